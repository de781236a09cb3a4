"""The self-contained HTML page: sections of blocks (text, tables, figures, inline SVG charts), inline CSS and
sorting JS; the report (perfbench/report) and the history trend page (perfbench/history/page.py) both render
through `render_page`.

Nothing on the page refers to another file or URL, so a page opens offline and can be mailed. Every
string that reaches the page passes through html.escape in a block's `html()`.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from perfbench.pages.table import Table
from perfbench.results import atomic_write_text


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text."""

    text: str
    note: bool = False  # rendered as a muted explanatory note

    def html(self) -> str:
        css = ' class="note"' if self.note else ""
        return f"<p{css}>{html.escape(self.text)}</p>\n"


@dataclass(frozen=True)
class Heading:
    text: str

    def html(self) -> str:
        return f"<h3>{html.escape(self.text)}</h3>\n"


@dataclass(frozen=True)
class Figure:
    """A PNG embedded as base64 (from `plots.png_base64`)."""

    png_base64: str
    alt: str

    def html(self) -> str:
        return (f'<figure><img alt="{html.escape(self.alt)}" src="data:image/png;base64,{self.png_base64}">'
                f"<figcaption>{html.escape(self.alt)}</figcaption></figure>\n")


@dataclass(frozen=True)
class Preformatted:
    """Long text (a traceback) folded under a one-line summary."""

    summary: str
    text: str

    def html(self) -> str:
        return (f"<details><summary>{html.escape(self.summary)}</summary>"
                f"<pre>{html.escape(self.text)}</pre></details>\n")


@dataclass(frozen=True)
class Svg:
    """An inline SVG chart, its markup from perfbench/pages/svg.py (which escapes every string it places)."""

    markup: str
    caption: str

    def html(self) -> str:
        return f'<figure class="svg">{self.markup}<figcaption>{html.escape(self.caption)}</figcaption></figure>\n'


class Block(Protocol):
    """Anything a section holds: it renders itself, escaping every string it places."""

    def html(self) -> str: ...


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")

    @property
    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]

    def html(self, csv_dir: str = "report") -> str:
        inner = "".join(b.html(csv_dir) if isinstance(b, Table) else b.html() for b in self.blocks)
        return f'<section id="{self.anchor}"><h2>{html.escape(self.title)}</h2>\n{inner}</section>\n'


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 2rem 3rem; color: #1d1d1f;
       background: #fff; line-height: 1.4; }
header { border-bottom: 2px solid #ddd; margin-bottom: 1rem; }
h1 { margin: 1rem 0 0.2rem; font-size: 1.6rem; }
h2 { margin-top: 2rem; border-bottom: 1px solid #e3e3e3; padding-bottom: 0.2rem; }
h3 { margin: 1.2rem 0 0.4rem; font-size: 1.05rem; }
nav a { margin-right: 1rem; }
.subtitle, .note, .csv { color: #666; }
.csv { font-size: 0.75rem; margin: 0.2rem 0 0.8rem; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85rem; }
caption { text-align: left; font-weight: 600; padding: 0.3rem 0; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top;
         white-space: nowrap; }
/* a long message or path wraps inside its cell, never past the page */
td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 12rem; }
th { background: #f4f4f6; cursor: pointer; user-select: none; white-space: nowrap; }
th.sorted-asc::after { content: " \\25B2"; } th.sorted-desc::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ci { color: #777; font-size: 0.8em; }
td.mark { text-align: center; }
td.mark-on, td.mark-faster { background: #cdeccf; } td.mark-off { background: #eeeeee; color: #666; }
td.mark-inactive { background: #fde6b4; } td.mark-slower { background: #f8cfcf; }
td.mark-error { background: #f8cfcf; } td.mark-warning { background: #fde6b4; }
figure { margin: 0.5rem 0 1rem; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #666; font-size: 0.8rem; }
svg.chart { display: block; height: auto; }
pre { background: #f7f7f7; padding: 0.5rem; overflow-x: auto; font-size: 0.8rem; }
"""

# Click a header to sort by that column; numbers sort by their data-sort value, empty cells go last.
SCRIPT = """
(function () {
  function key(cell) {
    if (!cell) { return null; }
    var raw = cell.getAttribute("data-sort");
    var text = raw !== null ? raw : cell.textContent.trim();
    if (text === "") { return null; }
    var num = Number(text);
    return isNaN(num) ? text.toLowerCase() : num;
  }
  function compare(a, b) {
    if (a === null) { return b === null ? 0 : 1; }
    if (b === null) { return -1; }
    if (typeof a === typeof b) { return a < b ? -1 : a > b ? 1 : 0; }
    return typeof a === "number" ? -1 : 1;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var headers = table.querySelectorAll("thead th");
    headers.forEach(function (th, index) {
      th.addEventListener("click", function () {
        var ascending = !th.classList.contains("sorted-asc");
        headers.forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r1, r2) {
          var order = compare(key(r1.cells[index]), key(r2.cells[index]));
          return ascending ? order : -order;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""


def render_page(title: str, subtitle: str, sections: Iterable[Section], csv_dir: str = "report",
                script: str = SCRIPT, style: str = "") -> str:
    """The page; `script` replaces the table-sorting script, `style` adds CSS rules after the shared ones."""
    sections = list(sections)
    nav = "".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in sections)
    body = "".join(s.html(csv_dir) for s in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}{style}</style></head>\n<body>\n"
            f'<header><h1>{html.escape(title)}</h1><p class="subtitle">{html.escape(subtitle)}</p>'
            f"<nav>{nav}</nav></header>\n{body}<script>{script}</script>\n</body></html>\n")


def write_page(html_path: Path, csv_dir: Path, title: str, subtitle: str, sections: list[Section],
               owned_csvs: str = "*.csv") -> None:
    """Write the page and one CSV per table. CSVs in `csv_dir` matching `owned_csvs` that this page no longer
    has are removed, so the folder never holds a stale table beside a fresh page."""
    tables = [t for s in sections for t in s.tables]
    names = [t.name for t in tables]
    duplicate = {n for n in names if names.count(n) > 1}
    assert not duplicate, f"two report tables share a CSV name: {sorted(duplicate)}"
    csv_dir.mkdir(parents=True, exist_ok=True)
    for stale in csv_dir.glob(owned_csvs):
        if stale.stem not in names:
            stale.unlink()
    for table in tables:
        atomic_write_text(csv_dir / f"{table.name}.csv", table.csv_text())
    csv_rel = os.path.relpath(csv_dir.resolve(), html_path.parent.resolve())
    atomic_write_text(html_path, render_page(title, subtitle, sections, csv_rel))
