"""The compare page's op-level diff: per matched run pair with traces, the ops that moved most (profiling/diff.py).

Shown only when some matched pair kept traces on both sides. The table holds the TOP_ROWS biggest movers of
each pair (compare_op_diff.csv, the same rows); `perfbench diff A B` gives every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfbench.analysis.compare import Match
from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.profiling.diff import BOTH
from perfbench.profiling.diff_runs import TraceDiff, pair_diffs
from perfbench.results import ResultFolder

TOP_ROWS = 20
LISTED_ONLY = 10


def _rows(d: TraceDiff) -> list[dict[str, Any]]:
    assert d.diff is not None
    rows = d.diff.rows
    moved = rows[(rows["delta_us"] != 0) | (rows["count_a"] != rows["count_b"]) | (rows["present"] != BOTH)]
    out = []
    for row in moved.head(TOP_ROWS).to_dict("records"):
        direction = "faster" if row["delta_us"] < 0 else "slower" if row["delta_us"] > 0 else ""
        out.append({"run": d.label, **row, "direction": direction})
    return out


def _only_text(d: TraceDiff) -> str:
    assert d.diff is not None
    parts = []
    for which, ops in (("A", d.diff.only_a), ("B", d.diff.only_b)):
        if len(ops):
            named = ", ".join(f"{op} ({side}, {count}x)" for side, op, count in
                              zip(ops["side"], ops["op"], ops["count"]))
            names = named if len(ops) <= LISTED_ONLY else ", ".join(named.split(", ")[:LISTED_ONLY]) + ", ..."
            parts.append(f"only in {which} ({len(ops)}): {names}")
    return f"{d.label}: " + ("; ".join(parts) if parts else "every op ran on both sides")


def op_diff_section(folder_a: ResultFolder, folder_b: ResultFolder, matches: Sequence[Match]) -> Section | None:
    """The section, or None when no matched pair has traces on both sides."""
    diffs = pair_diffs(folder_a, folder_b, matches)
    done = [d for d in diffs if d.diff is not None]
    if not done and all(d.problem.startswith("no trace") for d in diffs):
        return None
    section = Section("Op-level diff")
    section.blocks.append(Text(
        "From each run's profiled iteration (runs/<run_id>/trace): time and count of every op on both sides, by "
        "side (device kernel time, host self time), op, category, phase, module and input shapes; the "
        f"{TOP_ROWS} biggest movers per run pair. `perfbench diff A B` prints and writes every row.", note=True))
    rows = [row for d in done for row in _rows(d)]
    keys = done[0].diff.keys if done and done[0].diff is not None else []
    columns = [Column("run"), *(Column(k, "shape" if k == "input_shapes" else k) for k in keys),
               Column("count_a", "A n"), Column("total_us_a", "A µs"), Column("count_b", "B n"),
               Column("total_us_b", "B µs"), Column("delta_us", "B - A µs", mark_key="direction"),
               Column("ratio", "B/A", suffix="x"), Column("present")]
    if rows:
        section.blocks.append(Table("compare_op_diff", columns, rows, caption="Biggest movers per run pair"))
    section.blocks += [Text(_only_text(d)) for d in done]
    untraced = [d for d in diffs if d.a is None and d.b is None]
    section.blocks += [Text(f"{d.label}: not diffed: {d.problem}", note=True) for d in diffs
                       if d.diff is None and d not in untraced]
    if untraced:
        section.blocks.append(Text(f"{len(untraced)} matched pair{'s' if len(untraced) != 1 else ''} without a "
                                   "trace on either side.", note=True))
    return section
