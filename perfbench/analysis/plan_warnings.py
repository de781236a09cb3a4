"""Why a plan's numbers cannot be taken as they stand: the warnings the terminal table and the report's headline
both print, from the folder analysis's speed-ups (perfbench/analysis/folder_analysis.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfbench.analysis.rounds import by_combination
from perfbench.analysis.speedup import INCONCLUSIVE, Speedup, host_speed_reasons, plan_label
from perfbench.results import RunResult


def plan_warnings(results: Sequence[RunResult], merged: Sequence[RunResult], baseline: RunResult | None,
                  gains: Mapping[str, Mapping[str, Speedup | None]]) -> dict[str, list[str]]:
    """combination id -> why its numbers cannot be taken as they stand: failed; for runs timed in blocks, a
    speed-up the pairs could not decide; for runs timed separately, judged unstable, or timed in a round where
    the host ran at another speed than for the baseline. Combinations without a warning are left out.
    `merged`, `baseline` and `gains`: the rounds merged, the baseline and the speed-ups of `results`."""
    out: dict[str, list[str]] = {}
    groups = by_combination(list(results))
    base_rounds = groups[baseline.spec.combination_id] if baseline is not None else []
    for r in merged:
        cid = r.spec.combination_id
        if r.status != "ok":
            kind = f" ({r.failure.kind})" if r.failure.kind else ""
            why = r.failure.reason or (r.error or "").strip()[-160:]
            out.setdefault(cid, []).append(f"{plan_label(r)}: {r.status}{kind}: {why}")
            continue
        if r.failure:
            out.setdefault(cid, []).append(f"{plan_label(r)}: {r.failure.kind}: {r.failure.reason}")
        separate = [x for x in groups[cid] if x.spec.timing != "blocks"]
        unstable = [f"round {x.spec.round}: {x.stability.reason}" if x.spec.rounds > 1
                    else str(x.stability.reason) for x in separate if x.is_stable() is False]
        if unstable:
            out.setdefault(cid, []).append(f"{plan_label(r)}: timed separately, unstable: {'; '.join(unstable)}")
        if baseline is None or cid == baseline.spec.combination_id:
            continue
        if separate and (speed_reasons := host_speed_reasons(base_rounds, groups[cid])):
            out.setdefault(cid, []).append(f"{plan_label(r)} against the baseline: {'; '.join(speed_reasons)}")
        for key, gain in gains.get(cid, {}).items():
            if gain is not None and gain.basis == "blocks" and gain.verdict == INCONCLUSIVE:
                out.setdefault(cid, []).append(
                    f"{plan_label(r)}: {key} inconclusive: its {gain.n} pairs spread too widely for a verdict "
                    f"(CI {gain.low:.4g}-{gain.high:.4g}); run more blocks (perfbench.measure.max_iterations)")
    return out


def host_notes(results: Sequence[RunResult]) -> list[str]:
    """What the host did to the whole folder, once each with how many runs it touched: runs timed with fewer
    threads because other processes held cores when their job started (measure/thread_budget.py)."""
    counts: dict[str, int] = {}
    for r in results:
        if r.env.threads_note:
            counts[r.env.threads_note] = counts.get(r.env.threads_note, 0) + 1
    return [f"{note} ({n} of {len(results)} runs)" for note, n in counts.items()]
