"""Results of interleaved rounds merged per combination, and the per-round values the round-level tests use.

A merged result pools its rounds' iteration samples (for plots and the medians) and keeps each round's median
under `round_<sample>` (e.g. round_ttft_ms): with several rounds those are the samples that comparisons test,
since a round is a separate process and carries process-to-process variation that iterations do not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from perfbench.analysis import stats
from perfbench.results import RunResult

ROUND_PREFIX = "round_"
LATENCY_SAMPLES = ("ttft_ms", "tpot_ms")


def by_combination(results: list[RunResult]) -> dict[str, list[RunResult]]:
    groups: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        groups[r.spec.combination_id].append(r)
    return dict(groups)


def round_samples(result: RunResult, key: str) -> list[float] | None:
    """The per-round medians of a merged result (two or more rounds), else None."""
    values = result.finite_samples(ROUND_PREFIX + key)
    return values if len(values) >= 2 else None


def tested_samples(first: RunResult, second: RunResult,
                   read: Callable[[RunResult, bool], list[float] | None],
                   alpha: float, alternative: str = "two-sided",
                   ) -> tuple[list[float] | None, list[float] | None, str]:
    """The samples a comparison of two runs tests, and their basis. "rounds": the per-round medians, when both
    runs are merged results of enough rounds that a rank test on them can reach `alpha` (two rounds a side
    never can: 2 vs 2 gives p >= 1/6 one-sided); else "iterations": the pooled iteration samples, and then the
    run-to-run band (perfbench/analysis/noise_band.py) stands for the process-to-process variation they do not
    carry. `read(result, per_round)` reads one side."""
    a, b = read(first, True), read(second, True)
    if a and b and len(a) >= 2 and len(b) >= 2:
        sides = 2 if alternative == "two-sided" else 1
        if sides * stats.min_one_sided_p(len(a), len(b)) < alpha:
            return a, b, "rounds"
    return read(first, False), read(second, False), "iterations"


def _merge(combination: str, rounds: list[RunResult]) -> RunResult:
    ok = sorted((r for r in rounds if r.status == "ok"), key=lambda r: r.spec.round)
    if not ok:
        return rounds[0]
    first = ok[0]
    samples: dict[str, list[float]] = defaultdict(list)
    for r in ok:
        for key, values in r.samples.items():
            samples[key].extend(values)
    for key in LATENCY_SAMPLES:
        samples[ROUND_PREFIX + key] = [stats.median(v) for r in ok if (v := r.finite_samples(key))]
    summary: dict[str, float | None] = {}
    recorded = [r.summary.model_dump() for r in ok]  # every field at once: the merge is the same for all
    for key in first.summary.to_dict():
        values = [float(v) for fields in recorded if (v := fields[key]) is not None]
        summary[key] = stats.median(values) if values else None
    for key in LATENCY_SAMPLES:
        pooled = [x for r in ok for x in r.finite_samples(key)]
        if pooled:
            for label, p in (("median", 50.0), ("p90", 90.0), ("p99", 99.0)):
                summary[f"{key}_{label}"] = stats.percentile(pooled, p)
    # compile: the first round compiles cold, the later ones reuse the sweep's cache
    summary["compile_s"] = first.summary.compile_s
    summary["iterations"] = float(sum(len(r.finite_samples("ttft_ms")) for r in ok))
    unstable = [r for r in ok if r.is_stable() is False]
    reasons = [f"round {r.spec.round}: {r.stability.reason}" for r in unstable]
    stability = {"stable": not unstable, "reason": "; ".join(reasons)} if any(
        r.is_stable() is not None for r in ok) else {}
    failed = [r for r in rounds if r.status != "ok"]
    status = "ok" if not failed else failed[0].status
    error = None if not failed else f"{len(failed)} of {len(rounds)} rounds failed: {failed[0].error or ''}"
    failure = failed[0].failure if failed else next((r.failure for r in ok if r.failure), first.failure)
    spec = first.spec.replace(run_id=combination, round=0, rounds=len(rounds))
    stop = ", ".join(sorted({r.stop_reason for r in ok if r.stop_reason}))
    # pooled samples no longer line up with one round's block indices: pairs are read from the rounds
    return first.replace(run_id=combination, status=status, error=error, spec=spec, samples=dict(samples),
                         summary=summary, stability=stability, stop_reason=stop,
                         wall_s=sum(r.wall_s for r in rounds), blocks={}, failure=failure)


def merge_rounds(results: list[RunResult]) -> list[RunResult]:
    """One result per combination; results of a single round pass through unchanged."""
    out = []
    for combination, group in by_combination(results).items():
        if len(group) == 1 and group[0].spec.rounds <= 1:
            out.append(group[0])
        else:
            out.append(_merge(combination, group))
    return out
