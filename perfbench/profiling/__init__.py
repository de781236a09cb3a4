"""Traces: capture (torch.profiler / torch_npu.profiler), parsers into one events table, and latency tables.

    events = parse_trace_path(path)     # chrome .json/.json.gz, trace_view.json, Ascend folder
    per_category(events), compute_vs_communication(events), ...   # tables.py
    analyze_trace(path, out_dir)        # what `perfbench trace` runs
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfbench.analysis.expert_load import load_lines, load_record_near
from perfbench.analysis.run_record import result_record_near
from perfbench.profiling.ascend import AscendProfile, parse_ascend_dir
from perfbench.profiling.categories import CATEGORIES, categorize
from perfbench.profiling.chrome import parse_chrome_trace
from perfbench.profiling.events import COLUMNS, empty_events
from perfbench.profiling.export import check_export_name, check_not_the_source, export_trace
from perfbench.profiling.graph_mode import trace_mode
from perfbench.profiling.loading import LoadedTrace, load_trace, parse_trace_path
from perfbench.profiling.summary import summarize, trace_advice, trace_steps
from perfbench.profiling.tables import (
    compute_vs_communication,
    op_counts_per_decode_step,
    per_category,
    per_layer_type,
    per_op,
    per_phase,
    trace_tables,
    write_table_files,
    write_tables,
)
from perfbench.results import RunResult, atomic_write_text
from perfbench.results.cells import csv_cells

if TYPE_CHECKING:
    from perfbench.profiling.capture import TraceCapture, capture_trace

__all__ = [
    "CATEGORIES", "COLUMNS", "AscendProfile", "LoadedTrace", "TraceCapture", "analyze_trace", "capture_trace",
    "categorize", "compute_vs_communication", "default_tables_dir", "empty_events", "load_trace",
    "op_counts_per_decode_step", "parse_ascend_dir", "parse_chrome_trace", "parse_trace_path", "per_category",
    "per_layer_type", "per_op", "per_phase", "write_tables",
]


def __getattr__(name: str) -> Any:
    # capture needs torch; parsing and tables do not (`perfbench trace` runs without torch)
    if name in ("TraceCapture", "capture_trace"):
        return getattr(importlib.import_module("perfbench.profiling.capture"), name)
    raise AttributeError(f"module 'perfbench.profiling' has no attribute {name!r}")


def default_tables_dir(path: Path) -> Path:
    """`<file>-tables` next to a trace file; `<folder>/perfbench-tables` inside a trace folder."""
    return path / "perfbench-tables" if path.is_dir() else path.with_name(f"{path.name}-tables")


def analyze_trace(path: Path, out_dir: Path | None, export: Path | None = None) -> str:
    """Parse the trace at `path`, write every table as CSV into `out_dir` (default `default_tables_dir`), and
    return a short summary: the execution mode, the advisor's findings, top categories with time and share,
    compute vs communication, idle and launch figures, missing columns, notes, where the CSVs went, and the run's
    MoE expert load when the trace sits in a perfbench run folder. UserError for a path that is not a trace.
    `export`: also write the normalized chrome trace there (export.py), with the findings on its own track."""
    path = Path(path)
    if export is not None:
        check_export_name(Path(export))
        check_not_the_source(path, Path(export))
    trace = load_trace(path)
    out = Path(out_dir) if out_dir is not None else default_tables_dir(path)
    run = _run_near(path)
    mode = trace_mode(trace.events, path, run)
    tables = trace_tables(trace.events, mode.mode, mode.emulation)
    written = write_table_files(tables, out)
    steps = out / "per_rank_steps.csv"
    step_table = trace_steps(trace)
    atomic_write_text(steps, csv_cells(step_table).to_csv(index=False, float_format="%.3f"))
    written.append(steps)
    for name, table in trace.extra_tables.items():
        extra = out / f"{name}.csv"
        atomic_write_text(extra, csv_cells(table).to_csv(index=False))
        written.append(extra)
    findings = trace_advice(trace, tables, step_table, out, run)
    load = load_lines(load_record_near(path))
    exported = ([export_trace(path, Path(export), findings, trace=trace, emulation=mode.emulation).line()]
                if export is not None else [])
    return "\n".join([summarize(trace, written, mode.line(), findings, tables.get("idle")), *load, *exported])


def _run_near(path: Path) -> RunResult | None:
    """The run whose trace `path` is (its result.json above it), None outside a run folder or for a record this
    perfbench cannot read (the trace is analysed all the same)."""
    record = result_record_near(path)
    if not record:
        return None
    try:
        return RunResult.from_dict(record)
    except (ValueError, TypeError):
        return None
