"""Where the time goes: per-run trace tables (runs/<run_id>/tables/*.csv) as stacked bars and tables.

The trace tables are written by perfbench.profiling; this module only needs a label column and `total_us`
in the breakdown tables, and shows any other CSV it finds as it is, so a new trace table needs no change here.
Host (self time) and device (kernel time) rows are never added: where a table has a `side` column, only the
device rows are used when there are any, else the host rows, as perfbench.profiling does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from perfbench.analysis.attribution import combo_label
from perfbench.analysis.trace_tables import TraceTables
from perfbench.config.labels import legend, short_plan_label
from perfbench.pages.page import Block, Figure, Section, Text
from perfbench.pages.table import Column, Table
from perfbench.profiling.events import primary_side
from perfbench.report import plots
from perfbench.results import RunResult

# trace table stem -> its label column, in the order the section shows them
BREAKDOWNS = {"per_category": "category", "per_layer_type": "layer_type", "per_phase": "phase"}
OPS_TABLE = "per_op"
CAPTIONS = {  # trace tables with more to say than their file name
    "idle": "idle.csv: per phase and layer, the share of the span with no kernel running (CPU: the dispatch "
            "overhead outside compute ops), kernel-to-kernel gaps and host launch to device start "
            "(docs/trace_analysis.md 2); host_bound at 30% free or more",
    "roofline": "roofline.csv: measured time per phase and op category next to the roofline of the same work "
                "(max of compute and memory time at the device's peaks, plus collectives; docs/roofline.md); "
                "pct_of_roofline = roofline / measured, the (all) row of a phase is its gap",
}
TOP_OPS = 15
NO_LABEL = "(none)"  # ops outside any annotated layer or phase


def _plain(value: Any) -> Any:
    """numpy / pandas scalars to Python values; missing values to None."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
        if isinstance(value, float) and math.isnan(value):
            return None
    return value


def ordered_stems(tables: TraceTables) -> list[str]:
    """The stems of the tables found: the known breakdowns first, in the section's order, then the rest sorted."""
    found = {stem for by_stem in tables.by_run.values() for stem in by_stem}
    known = [s for s in (*BREAKDOWNS, OPS_TABLE) if s in found]
    return known + sorted(found - set(known))


def _breakdown_blocks(stem: str, label: str, tables: TraceTables, toggles: dict[str, str],
                      short: dict[str, str]) -> list[Block]:
    """A stacked bar per run and a runs x labels table of total_us (µs in the profiled iteration). `toggles`:
    each run's toggles in full (the table); `short`: its short plan name (the chart's bars, with a legend)."""
    values: dict[tuple[str, str], float] = {}  # (run_id, label value) -> total_us
    sides: dict[str, str] = {}
    skipped, notes = [], []
    for run_id, frames in tables.by_run.items():
        frame = frames.get(stem)
        if frame is None:
            continue
        if label not in frame.columns and "note" in frame.columns:  # a graph-mode trace: what the graph hides
            notes += [f"{run_id}: {note}" for note in frame["note"].dropna().astype(str)]
            continue
        if label not in frame.columns or "total_us" not in frame.columns:
            skipped.append(run_id)
            continue
        if "side" in frame.columns:  # only the side whose time the model costs
            sides[run_id] = primary_side(frame)
            frame = frame[frame["side"] == sides[run_id]]
        keys = frame[label].map(lambda v: NO_LABEL if _plain(v) is None else str(v))
        for key, total in frame["total_us"].groupby(keys).sum().items():
            values[(run_id, str(key))] = float(total)
    blocks: list[Block] = [Text(note, note=True) for note in notes]
    if skipped:
        blocks.append(Text(f"{stem}.csv lacks a `{label}` or `total_us` column in runs {', '.join(skipped)}.",
                           note=True))
    if not values:
        return blocks
    totals: dict[str, float] = {}
    for (_, key), v in values.items():
        totals[key] = totals.get(key, 0.0) + v
    order = sorted(totals, key=lambda k: -totals[k])  # biggest first: the bottom of every stack
    runs = list(dict.fromkeys(run_id for run_id, _ in values))
    title = f"Time by {label.replace('_', ' ')}"
    in_ms = {k: v / 1000.0 for k, v in values.items()}
    # bars named by the plan's short name, as in the end table; the run id only where two runs share a plan
    names = [short[r] for r in runs]
    names = [f"{n} ({r})" if names.count(n) > 1 else n for n, r in zip(names, runs)]
    by_name = {(dict(zip(runs, names))[r], key): v for (r, key), v in in_ms.items()}
    blocks.append(Figure(plots.stacked_bars(names, order, by_name, "ms in the profiled iteration", title),
                         f"{title} per run (stacked)"))
    if key_line := legend(names):
        blocks.append(Text(key_line, note=True))
    rows = []
    for run_id in runs:
        row: dict[str, Any] = {"run_id": run_id, "toggles_on": toggles[run_id], "side": sides.get(run_id, ""),
                               "total_us": sum(v for (r, _), v in values.items() if r == run_id)}
        row.update({f"us.{key}": values.get((run_id, key)) for key in order})
        rows.append(row)
    columns = [Column("run_id"), Column("toggles_on"), Column("side"), Column("total_us")]
    columns += [Column(f"us.{key}", key) for key in order]
    blocks.append(Table(f"time_by_{label}", columns, rows, caption=f"{title}, µs per run"))
    return blocks


def _generic_rows(stem: str, tables: TraceTables, toggles: dict[str, str],
                  top: int | None = None) -> tuple[list[Column], list[dict[str, Any]]]:
    """Rows of one trace table across runs as they are (the `top` rows by total_us when asked)."""
    ours = ("run_id", "toggles_on")  # a trace column of the same name is dropped rather than overwrite these
    keys: list[str] = []
    rows = []
    for run_id, frames in tables.by_run.items():
        frame = frames.get(stem)
        if frame is None:
            continue
        if top is not None and "total_us" in frame.columns:
            if "side" in frame.columns:
                frame = frame[frame["side"] == primary_side(frame)]
            frame = frame.sort_values("total_us", ascending=False).head(top)
        keys += [str(c) for c in frame.columns if str(c) not in keys and str(c) not in ours]
        for record in frame.to_dict("records"):
            rows.append({**{str(k): _plain(v) for k, v in record.items()}, "run_id": run_id,
                         "toggles_on": toggles[run_id]})
    return [Column(k) for k in (*ours, *keys)], rows


def _slowest_rank_line(result: RunResult) -> str:
    """"<run>: slowest rank 1, steps 12.3% longer than the median rank's" for a multi-rank run (per-rank
    table: per_rank_steps.csv), else ""."""
    cluster = result.trace.cluster
    if cluster.get("slowest_rank") is None:
        return ""
    pct = float(cluster.get("slowest_rank_over_median_pct") or 0.0)
    return (f"{result.run_id}: slowest rank {cluster['slowest_rank']}, steps {pct:.2f}% longer than the median "
            f"rank's ({len(cluster.get('per_rank') or [])} ranks; per-rank compute, communication and wait in "
            "per_rank_steps.csv).")


def breakdown_section(results: Sequence[RunResult], tables: TraceTables) -> Section:
    """`tables`: the trace tables of `results`, as the folder analysis read them."""
    section = Section("Time breakdown")
    ok = [r for r in results if r.status == "ok"]
    section.blocks += [Text(p, note=True) for p in tables.problems]
    for r in ok:
        error = (r.trace.error or "").strip()
        if error:
            section.blocks.append(Text(f"{r.run_id}: the trace was not parsed ({error.splitlines()[-1]}).",
                                       note=True))
    if not tables.by_run:
        section.blocks.append(Text(
            "No trace tables found (runs/<run_id>/tables/*.csv): the runs were made without profiling, "
            "failed, or their traces were not parsed; `perfbench trace` makes tables from a captured trace.",
            note=True))
        return section
    section.blocks.append(Text("From each run's profiled iteration (separate from the timed ones); the trace "
                               "tables under runs/<run_id>/tables/ hold every op.", note=True))
    section.blocks += [Text(line) for line in map(_slowest_rank_line, ok) if line]
    section.blocks += [Text(f"{r.run_id}: trace vs plan: {line}") for r in ok
                       for line in r.trace.plan_mismatches]
    toggles = {r.run_id: combo_label(r.effective_on()) for r in ok}
    short = {r.run_id: short_plan_label(r.effective_on()) for r in ok}
    for stem, label in BREAKDOWNS.items():
        section.blocks += _breakdown_blocks(stem, label, tables, toggles, short)
    for stem in ordered_stems(tables):
        if stem in BREAKDOWNS:
            continue
        top = TOP_OPS if stem == OPS_TABLE else None
        columns, rows = _generic_rows(stem, tables, toggles, top)
        name = "top_ops" if stem == OPS_TABLE else "trace_" + re.sub(r"[^A-Za-z0-9_-]", "_", stem)
        caption = f"Top {TOP_OPS} ops by total time per run" if stem == OPS_TABLE else \
            CAPTIONS.get(stem, f"{stem}.csv")
        section.blocks.append(Table(name, columns, rows, caption=caption))
    return section
