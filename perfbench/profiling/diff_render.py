"""An OpDiff (diff.py) as terminal text: per side, its totals, the biggest movers and the ops one side only ran.

Lines stay within WIDTH columns: op names and shapes are shortened with "…" to what the other columns leave,
and key columns that say nothing (every row "(none)") are left out. The CSV (diff.csv) has every row in full.
"""

from __future__ import annotations

import math
import textwrap

import pandas as pd
from tabulate import tabulate

from perfbench.profiling.diff import BOTH, OpDiff
from perfbench.profiling.events import NONE_LABEL
from perfbench.profiling.summary import format_us

WIDTH = 120
TOP = 15
SHAPE_WIDTH = 18
MIN_OP_WIDTH = 16
LISTED_ONLY = 8  # ops named per "only in" line before "... and N more"
ONLY_NAME_WIDTH = 60
HEADERS = {"input_shapes": "shape", "layer_type": "layer type"}


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def _signed_us(value: float) -> str:
    return ("+" if value > 0 else "-" if value < 0 else "") + format_us(abs(value)) if value else "0"


def _time(total_us: float, count: int) -> str:
    return format_us(total_us) if count else "-"  # "-": the op did not run there


def _ratio(present: str, ratio: float) -> str:
    if present != BOTH:
        return present
    return "n/a" if not math.isfinite(ratio) else f"{ratio:.3g}x"


def _table(rows: pd.DataFrame, keys: list[str], width: int) -> list[str]:
    shown = [k for k in keys if k not in ("side", "op", "category") and (rows[k].astype(str) != NONE_LABEL).any()]
    numbers = [[_time(r.total_us_a, r.count_a), str(r.count_a), _time(r.total_us_b, r.count_b), str(r.count_b),
                _signed_us(r.delta_us), _ratio(r.present, r.ratio)] for r in rows.itertuples(index=False)]
    labels = [[shorten(str(getattr(r, k)), SHAPE_WIDTH if k == "input_shapes" else 14) for k in shown]
              for r in rows.itertuples(index=False)]
    header_numbers = ["A", "A n", "B", "B n", "B - A", "B/A"]
    headers = ["op", *(HEADERS.get(k, k) for k in shown), *header_numbers]
    widths = [max([len(h), *(len(row[i]) for row in labels)]) for i, h in enumerate(headers[1:1 + len(shown)])]
    widths += [max([len(h), *(len(row[i]) for row in numbers)]) for i, h in enumerate(header_numbers)]
    op_width = max(MIN_OP_WIDTH, width - sum(widths) - 2 * len(widths))
    align = ["left"] * (1 + len(shown)) + ["right"] * len(header_numbers)
    while True:  # tabulate pads short headers: narrow the op column until the table fits
        cells = [[shorten(str(r.op), op_width), *label, *number]
                 for r, label, number in zip(rows.itertuples(index=False), labels, numbers)]
        lines = tabulate(cells, headers, tablefmt="plain", disable_numparse=True, colalign=align).splitlines()
        excess = max(len(line) for line in lines) - width
        if excess <= 0 or op_width <= MIN_OP_WIDTH:
            return lines
        op_width = max(MIN_OP_WIDTH, op_width - excess)


def _only_line(side: str, which: str, ops: pd.DataFrame) -> list[str]:
    ops = ops[ops["side"] == side]
    if ops.empty:
        return []
    named = [f"{shorten(str(op), ONLY_NAME_WIDTH)} ({count}x, {format_us(total)})" for op, count, total in
             zip(ops["op"].head(LISTED_ONLY), ops["count"].head(LISTED_ONLY), ops["total_us"].head(LISTED_ONLY))]
    more = f", ... and {len(ops) - LISTED_ONLY} more" if len(ops) > LISTED_ONLY else ""
    text = f"only in {which} ({len(ops)} op{'s' if len(ops) != 1 else ''}): {', '.join(named)}{more}"
    return textwrap.wrap(text, WIDTH - 2, subsequent_indent="  ", break_on_hyphens=False)


def diff_lines(diff: OpDiff, top: int = TOP) -> list[str]:
    """Per side (device first): `side: A .., B .. (B/A ..)`, the `top` biggest movers, the one-side ops."""
    lines: list[str] = []
    for side in sorted(diff.totals["side"], key=lambda s: s != "device"):
        total = diff.totals[diff.totals["side"] == side].iloc[0]
        label = "kernel time" if side == "device" else "host self time"
        ratio = f"{total['ratio']:.3f}x" if math.isfinite(total["ratio"]) else "n/a"
        lines.append(f"{side} ({label}): A {format_us(total['total_us_a'])}, B {format_us(total['total_us_b'])}, "
                     f"B/A {ratio}")
        rows = diff.rows[diff.rows["side"] == side]
        moved = rows[(rows["delta_us"] != 0) | (rows["count_a"] != rows["count_b"]) | (rows["present"] != BOTH)]
        if moved.empty:
            lines.append("  no change: every op ran as often and as long in both")
        else:
            lines += ["  " + line for line in _table(moved.head(top), diff.keys, WIDTH - 2)]
            if len(moved) > top:
                lines.append(f"  ... {len(moved) - top} more rows that changed (diff.csv has every row)")
        lines += ["  " + line for line in _only_line(side, "A", diff.only_a)]
        lines += ["  " + line for line in _only_line(side, "B", diff.only_b)]
    return [shorten(line, WIDTH) for line in lines]
