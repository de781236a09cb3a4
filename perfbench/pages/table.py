"""A report table: one definition rendered twice, as an HTML table and as the CSV beside it.

The CSV keeps full precision; the HTML shows `format_number` of the same values, so every number on the
page can be found in a CSV. Every string is HTML-escaped here, the only place table cells become HTML.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfbench.results.cells import cell_text, csv_safe


def format_number(value: float) -> str:
    """Four significant digits (trailing zeros kept: a 1.0003x factor reads 1.000x, not 1x); plain digits
    from 1000 up, without thousands separators, so the text stays parseable."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:#.4g}"


def format_cell(value: Any) -> str:
    """Display text of a cell value (None and "" show empty)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_number(value)
    return cell_text(str(value))


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return repr(value)
    return str(csv_safe(cell_text(str(value))))  # a 100 MB field is not copied into every table; no formula


@dataclass(frozen=True)
class Column:
    """One column of a table.

    key: the row key (and CSV column). label: header text (default key).
    ci: row keys of a confidence interval shown as "[lo, hi]" after the value (separate CSV columns).
    title_key: row key of hover text for the cell (also a CSV column).
    mark_key: row key whose value colours the cell (css class "mark-<value>": on/off/inactive, faster/slower);
    a CSV column too when it is not `key` itself.
    suffix: unit shown after a number in the HTML ("x" for speed-up factors).
    wrap: long text (a message, a list of values) that wraps inside its cell; other cells keep to one line, and
    a table too wide for the page scrolls inside its own frame.
    """

    key: str
    label: str = ""
    ci: tuple[str, str] | None = None
    title_key: str | None = None
    mark_key: str | None = None
    suffix: str = ""
    wrap: bool = False

    @property
    def header(self) -> str:
        return self.label or self.key

    @property
    def csv_keys(self) -> list[str]:
        keys = [self.key]
        if self.ci:
            keys += list(self.ci)
        if self.title_key:
            keys.append(self.title_key)
        if self.mark_key and self.mark_key != self.key:
            keys.append(self.mark_key)
        return keys


@dataclass
class Table:
    """name: the CSV file stem (report/<name>.csv) and the HTML id; rows: dicts keyed by column keys.
    collapsed: folded under its caption (long reference tables such as the scenario)."""

    name: str
    columns: Sequence[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    caption: str = ""
    collapsed: bool = False

    def csv_text(self) -> str:
        keys = [k for col in self.columns for k in col.csv_keys]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(keys)
        for row in self.rows:
            writer.writerow([csv_cell(row.get(k)) for k in keys])
        return buf.getvalue()

    def html(self, csv_dir: str = "report") -> str:
        """The table; `csv_dir` is where its CSV lies relative to the page (named under the table)."""
        head = "".join(f"<th>{html.escape(c.header)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(_cell_html(c, row) for c in self.columns) + "</tr>\n"
                       for row in self.rows)
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        csv_path = f"{csv_dir}/{self.name}.csv" if csv_dir not in ("", ".") else f"{self.name}.csv"
        link = f'<div class="csv">CSV: {html.escape(csv_path)}</div>'
        table = (f'<div class="table-wrap"><table class="sortable" id="t-{html.escape(self.name)}">{caption}'
                 f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table>{link}</div>\n")
        if not self.collapsed:
            return table
        return f"<details><summary>{html.escape(self.caption or self.name)}</summary>{table}</details>\n"


def _cell_html(col: Column, row: dict[str, Any]) -> str:
    value = row.get(col.key)
    attrs, classes = [], []
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if numeric and math.isfinite(value):  # type: ignore[arg-type]  # `numeric`: an int or a float
        attrs.append(f'data-sort="{value!r}"')
        classes.append("num")
    if col.mark_key and row.get(col.mark_key):
        classes += ["mark", f"mark-{row[col.mark_key]}"]
    if col.wrap:
        classes.append("wrap")
    if classes:
        attrs.append(f'class="{html.escape(" ".join(classes))}"')
    if col.title_key and row.get(col.title_key):
        attrs.append(f'title="{html.escape(str(row[col.title_key]))}"')
    text = html.escape(format_cell(value))
    if text and col.suffix and numeric:
        text += html.escape(col.suffix)
    if col.ci and row.get(col.ci[0]) is not None and row.get(col.ci[1]) is not None:
        lo, hi = (html.escape(format_cell(row[k])) for k in col.ci)
        text += f' <span class="ci">[{lo}, {hi}]</span>'
    return f"<td {' '.join(attrs)}>{text}</td>" if attrs else f"<td>{text}</td>"
