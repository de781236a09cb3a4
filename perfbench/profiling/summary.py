"""The short human-readable summary `perfbench trace` prints after writing the tables."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from perfbench.analysis.advisor import (
    HOST_BOUND_FREE_PCT,
    Finding,
    TraceFacts,
    ordered,
    run_findings,
    trace_findings,
)
from perfbench.profiling.across_ranks import cluster_record, link_pairs, per_rank_steps, rank_summary, slowest
from perfbench.profiling.communication import link_bandwidth
from perfbench.profiling.events import NONE_LABEL, primary_side
from perfbench.profiling.idle import ALL_LAYERS as IDLE_ALL_LAYERS
from perfbench.profiling.loading import LoadedTrace
from perfbench.profiling.tables import (
    ALL_OPS,
    compute_vs_communication,
    op_counts_per_decode_step,
    per_category,
)
from perfbench.results import RunResult

TOP_CATEGORIES = 6


def format_us(value: float) -> str:
    """µs as a short human string: "812 µs", "12.35 ms", "3.210 s"."""
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3f} s"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.2f} ms"
    return f"{value:.0f} µs"


def _header(trace: LoadedTrace) -> str:
    events = trace.events
    ranks = trace.ranks
    what = "Ascend profiler folder" if trace.kind == "ascend" else "chrome trace"
    level = f", {trace.level}" if trace.level and trace.level != "unknown" else ""
    sides = events["side"].value_counts()
    rank_text = f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks)) or 'none'}"
    return (f"trace: {trace.path} ({what}{level}, {rank_text}; {int(sides.get('device', 0))} device / "
            f"{int(sides.get('host', 0))} host events)")


def _categories(events: pd.DataFrame, side: str) -> list[str]:
    table = per_category(events)
    table = table[table["side"] == side].head(TOP_CATEGORIES)
    label = "kernel time" if side == "device" else "host self time"
    lines = [f"{label} by category:"]
    for row in table.itertuples(index=False):
        lines.append(f"  {row.category:<14} {format_us(row.total_us):>11}  {row.share_pct:5.1f}%  "
                     f"({row.count} ops)")
    return lines


def _compute_vs_communication(events: pd.DataFrame) -> str:
    table = compute_vs_communication(events)
    compute, comm = table["compute_us"].sum(), table["communication_us"].sum()
    text = f"compute {format_us(compute)}, communication {format_us(comm)}"
    if table["side"].iloc[0] == "device":
        text += (f" (overlapped {format_us(table['overlapped_us'].sum())}, not overlapped "
                 f"{format_us(table['communication_not_overlapped_us'].sum())})")
    steps = table["step"].dropna().nunique()
    return text + (f" over {steps} step{'s' if steps != 1 else ''}" if steps else "")


def trace_steps(trace: LoadedTrace) -> pd.DataFrame:
    """`across_ranks.per_rank_steps` of a loaded trace (its events, and the profiler's step_trace_time.csv)."""
    return per_rank_steps(trace.events, trace.extra_tables.get("ascend_step_trace_time"))


def cluster_lines(steps: pd.DataFrame, links: pd.DataFrame | None = None,
                  matrix: pd.DataFrame | None = None) -> list[str]:
    """The cluster section: per-rank step table (`across_ranks.per_rank_steps` rows), the slowest rank, bandwidth per
    link type and the slowest link of the communication matrix, where the profiler wrote those."""
    ranks = rank_summary(steps)
    if ranks.empty:
        return []
    sources = steps.groupby("rank")["source"].first()
    lines = ["per rank (mean per step):",
             f"  {'rank':>4} {'steps':>5} {'step':>11} {'compute':>11} {'communication':>13} {'wait':>11}  from"]
    for row in ranks.itertuples(index=False):
        lines.append(f"  {row.rank:>4} {row.steps:>5} {format_us(row.step_us):>11} {format_us(row.compute_us):>11}"
                     f" {format_us(row.communication_us):>13} {format_us(row.wait_us):>11}  {sources[row.rank]}")
    rank, pct = slowest(ranks, "rank", "step_us")
    if rank is not None:
        lines.append(f"slowest rank: {rank}, steps {pct:.2f}% longer than the median rank's")
    if links is not None and len(links):
        lines.append("bandwidth per link type:")
        for link, group in link_bandwidth(links).groupby("link", sort=True):
            part = group["part_of"].dropna()
            label = f"{link} (part of {part.iloc[0]})" if len(part) else link
            values = ", ".join(f"rank {r.rank} {r.bandwidth_gb_s:.2f} GB/s" for r in group.itertuples())
            lines.append(f"  {label}: {values}")
    if matrix is not None and len(matrix):
        pairs = link_pairs(matrix)
        link, pct = slowest(pairs, "link", "bandwidth_gb_s", higher_is_slower=False)
        if link is not None:
            lines.append(f"slowest link: {link}, bandwidth {pct:.2f}% below the median link's "
                         f"({len(pairs)} links in communication_matrix.json)")
    return lines


def trace_advice(trace: LoadedTrace, tables: Mapping[str, pd.DataFrame], steps: pd.DataFrame, out_dir: Path,
                 run: RunResult | None = None) -> list[Finding]:
    """The advisor's findings on a trace (docs/advisor.md): its idle and compute-vs-communication tables, its
    slowest rank and link across ranks, and, for a trace inside a run folder, the run's record."""
    cluster = cluster_record(steps) if len(trace.ranks) > 1 else None
    matrix = trace.extra_tables.get("ascend_communication_matrix")
    links = link_pairs(matrix) if matrix is not None and len(matrix) else None
    # the Ascend tables too: the AI CPU rule reads their task types
    facts = TraceFacts(tables={**trace.extra_tables, **tables}, cluster=cluster, links=links, tables_dir=f"{out_dir}/")
    return ordered([*trace_findings(facts), *(run_findings(run) if run is not None else [])])


def finding_lines(findings: list[Finding]) -> list[str]:
    """The findings block: one line each, most severe first, or a line saying there are none."""
    if not findings:
        return ["findings: no findings (every rule of docs/advisor.md stayed silent)"]
    return [f"findings ({len(findings)}, most severe first; rules: docs/advisor.md):",
            *(f"  {finding.line()}" for finding in findings)]


def idle_lines(table: pd.DataFrame | None) -> list[str]:
    """Per phase (all ranks pooled): the device's free share of the span, the mean gap between kernels and the
    mean launch delay; on CPU the dispatch overhead; host-bound where the share reaches the threshold."""
    if table is None or table.empty:
        return []
    phases = table[table["layer_type"] == IDLE_ALL_LAYERS]
    if (phases["phase"] != NONE_LABEL).any():  # ops outside any phase: the profiler's own start and stop
        phases = phases[phases["phase"] != NONE_LABEL]
    lines = [f"idle and launch (idle.csv; host-bound at >= {HOST_BOUND_FREE_PCT:g}% free):"]
    for phase, rows in phases.groupby("phase", sort=False):
        span, free = float(rows["span_us"].sum()), float(rows["free_us"].sum())
        if not span > 0:
            continue
        share = 100.0 * free / span
        steps = int(rows["windows"].max())
        over = f" over {steps} steps" if steps > 1 else ""
        if rows["side"].iloc[0] == "device":
            text = f"device free {share:.1f}% of {format_us(span)}{over}"
            gaps = rows["gap_mean_us"].astype(float)
            if gaps.notna().any():
                text += f"; kernel to kernel gap {format_us(float(gaps.mean()))} mean"
            linked = int(rows["linked_launches"].sum())
            if linked:
                delay = float((rows["launch_delay_mean_us"] * rows["linked_launches"]).sum()) / linked
                text += f"; launch to start {format_us(delay)} mean ({linked} kernels linked)"
        else:
            text = (f"dispatch overhead {share:.1f}% of {format_us(span)}{over} (no op running "
                    f"{format_us(float(rows['no_op_us'].sum()))}; no device kernels)")
        if share >= HOST_BOUND_FREE_PCT:
            text += "; host-bound"
        lines.append(f"  {phase:<8} {text}")
    return lines if len(lines) > 1 else []


def summarize(trace: LoadedTrace, written: list[Path], mode_line: str | None = None,
              findings: list[Finding] | None = None, idle: pd.DataFrame | None = None) -> str:
    """A few lines: what was parsed, its execution mode, the advisor's findings (first: they say where to look),
    top categories with time and share, compute vs communication, decode ops per step, idle and launch figures,
    missing columns and notes, and where the CSVs went."""
    events = trace.events
    lines = [_header(trace)]
    if mode_line:
        lines.append(mode_line)
    if findings is not None:
        lines += finding_lines(findings)
    if len(events):
        lines += _categories(events, primary_side(events))
        lines.append(_compute_vs_communication(events))
        counts = op_counts_per_decode_step(events)
        if counts:
            lines.append(f"decode: {counts[ALL_OPS]:.1f} ops per step")
        lines += idle_lines(idle)
    else:
        lines.append("no op or kernel events found")
    if len(trace.ranks) > 1:
        lines += cluster_lines(trace_steps(trace), trace.extra_tables.get("ascend_communication_links"),
                               trace.extra_tables.get("ascend_communication_matrix"))
    if trace.missing_columns:
        lines.append(f"missing columns: {', '.join(trace.missing_columns)} (those fields are left empty)")
    lines += [f"note: {note}" for note in trace.notes]
    if written:
        lines.append(f"tables: {written[0].parent} ({', '.join(p.name for p in written)})")
    return "\n".join(lines)
