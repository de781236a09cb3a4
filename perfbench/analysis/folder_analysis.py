"""A result folder analysed once: everything the terminal table, the report, the advisor and `compare` show is
computed here, and they only lay it out.

One estimator per timing mode (perfbench/analysis/speedup.py): runs timed in interleaved blocks are compared on
their within-block pairs (perfbench/analysis/paired.py), in the speed-ups, the marginals and the ablation alike;
runs timed separately by rounds or iterations. The trace tables are read once, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfbench.analysis.advisor import Finding, folder_findings, toggles_slower
from perfbench.analysis.attribution import Attribution, attribute
from perfbench.analysis.plan_warnings import plan_warnings
from perfbench.analysis.rounds import merge_rounds
from perfbench.analysis.speedup import (
    Marginal,
    ShapeBaseline,
    Speedup,
    baseline_of,
    marginals,
    shape_baselines,
    speedups,
)
from perfbench.analysis.trace_tables import TraceTables, read_trace_tables
from perfbench.results import RunResult

# summary metric -> its attribution (the report's ablation): both latencies, in milliseconds
ATTRIBUTED_METRICS = ("tpot_ms_median", "ttft_ms_median")


@dataclass(frozen=True)
class FolderAnalysis:
    """What a result folder's runs say, computed once (`analyse`).

    results: every run as recorded (each round apart); merged: one result per combination (rounds merged);
    baseline: the all-off plan; gains: combination id -> latency ("ttft_ms", "tpot_ms") -> speed-up over the
    baseline; by_shape: each workload shape's all-off plan and speed-ups over it; on_top: each toggle added to
    another measured plan; attributions: summary metric -> the ablation's analyses per shape; warnings:
    combination id -> why its numbers need a second look; trace_tables: the first round's trace tables;
    findings: the advisor's rules over all of it, most severe first."""

    results: tuple[RunResult, ...]
    merged: tuple[RunResult, ...]
    baseline: RunResult | None
    gains: dict[str, dict[str, Speedup | None]]
    by_shape: tuple[ShapeBaseline, ...]
    on_top: tuple[Marginal, ...]
    attributions: dict[str, list[Attribution]]
    warnings: dict[str, list[str]]
    trace_tables: TraceTables
    findings: tuple[Finding, ...]

    @property
    def first_round(self) -> list[RunResult]:
        """The runs of the first round: their traces are the ones shown (the profiled iteration is not timed)."""
        return [r for r in self.results if r.spec.round <= 1]


def analyse(results: Sequence[RunResult], trace_tables: TraceTables | None = None,
            order: Sequence[str] | None = None) -> FolderAnalysis:
    """Analyse `results` once. `trace_tables`: the first round's trace tables (none when not given, as at the end
    of `perfbench run` before the report); `order`: the ablation's preferred waterfall order."""
    runs = list(results)
    merged = merge_rounds(runs)
    baseline = baseline_of(merged)
    gains = speedups(runs)
    by_shape = shape_baselines(runs, merged, baseline, gains)
    on_top = marginals(runs, merged, baseline)
    tables = trace_tables if trace_tables is not None else TraceTables()
    slower = toggles_slower(merged, by_shape, on_top)
    return FolderAnalysis(
        results=tuple(runs), merged=tuple(merged), baseline=baseline, gains=gains, by_shape=tuple(by_shape),
        on_top=tuple(on_top), attributions={m: attribute(runs, m, order) for m in ATTRIBUTED_METRICS},
        warnings=plan_warnings(runs, merged, baseline, gains), trace_tables=tables,
        findings=tuple(folder_findings(runs, tables.by_run, slower)))


def analyse_folder(folder: Path, results: Sequence[RunResult]) -> FolderAnalysis:
    """`analyse` with the trace tables of the first round's ok runs of `folder` (read here, once)."""
    traced = [r for r in results if r.status == "ok" and r.spec.round <= 1]
    return analyse(results, read_trace_tables(Path(folder), traced))
