"""Why a plan's numbers cannot be taken as they stand: the warnings the terminal table and the report's headline
both print, from the folder analysis's speed-ups (perfbench/analysis/folder_analysis.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfbench.analysis.rounds import by_combination
from perfbench.analysis.speedup import INCONCLUSIVE, Speedup, host_speed_reasons, plan_label
from perfbench.results import RunResult

MAX_ITERATIONS = "max_iterations"  # the stop reason perfbench/measure/blocks.py records at the block cap


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
            out.setdefault(cid, []).append(f"{plan_label(r)}: {r.status}{kind}: {why}; {failure_hint(r)}")
            continue
        if r.failure:
            out.setdefault(cid, []).append(f"{plan_label(r)}: {r.failure.kind}: {r.failure.reason}; "
                                           f"{failure_hint(r)}")
        separate = [x for x in groups[cid] if x.spec.timing != "blocks"]
        unstable = [f"round {x.spec.round}: {x.stability.reason}" if x.spec.rounds > 1
                    else str(x.stability.reason) for x in separate if x.is_stable() is False]
        if unstable:
            out.setdefault(cid, []).append(f"{plan_label(r)}: timed separately, unstable: {'; '.join(unstable)}; "
                                           f"{more_rounds_hint(r)}")
        if baseline is None or cid == baseline.spec.combination_id:
            continue
        if separate and (speed_reasons := host_speed_reasons(base_rounds, groups[cid])):
            out.setdefault(cid, []).append(f"{plan_label(r)} against the baseline: {'; '.join(speed_reasons)}; "
                                           f"{more_rounds_hint(r)}")
        for key, gain in gains.get(cid, {}).items():
            if gain is not None and gain.basis == "blocks" and gain.verdict == INCONCLUSIVE:
                out.setdefault(cid, []).append(
                    f"{plan_label(r)}: {key} inconclusive: its {gain.n} pairs spread too widely for a verdict "
                    f"(CI {gain.low:.4g}-{gain.high:.4g}); {more_blocks_hint(groups[cid])}")
    return out


def failure_hint(result: RunResult) -> str:
    """What to change or read for a failed (or not trusted) run, by its failure kind."""
    kind = result.failure.kind or ("timeout" if result.status == "timeout" else "")
    if kind == "timeout":
        return f"give it longer: --set perfbench.measure.timeout_s={2 * result.spec.timeout_s:g}"
    if kind == "oom":
        return "out of memory: smaller perfbench.workload.batch_sizes or input_lens"
    if kind == "plan_refused":
        return "`perfbench run --dry-run` shows why each toggle can or cannot run here"
    if kind == "numerics_fail":
        return "the report's Numerics section has the logit difference and its tolerance"
    return f"its error is under the report's Failures section and in runs/{result.run_id}/"


def more_blocks_hint(rounds: Sequence[RunResult]) -> str:
    """The setting that buys more blocks: the block cap when the timing stopped at it, else the time budget (its
    default stops timing first), at twice what the run had."""
    if any(MAX_ITERATIONS in r.stop_reason.split(", ") for r in rounds):  # merged rounds join their reasons
        cap = max((r.spec.max_iterations or r.spec.iterations) for r in rounds)
        return f"run more blocks: --set perfbench.measure.max_iterations={2 * cap}"
    budget = max((r.spec.max_time_s for r in rounds if r.spec.max_time_s), default=None)
    return f"run more blocks: --set perfbench.measure.max_time_s={2 * budget:g}" if budget else \
        "run more blocks: --set perfbench.measure.max_time_s=40"


def more_rounds_hint(result: RunResult) -> str:
    """Runs timed separately: more interleaved rounds pair each plan with a baseline timed beside it."""
    return f"pair it over more rounds: --set perfbench.sweep.rounds={max(3, 2 * result.spec.rounds)}"


def host_notes(results: Sequence[RunResult]) -> list[str]:
    """What the host did to the whole folder, once each with how many runs it touched: runs timed with fewer
    threads because other processes held cores when their job started (measure/thread_budget.py)."""
    counts: dict[str, int] = {}
    for r in results:
        if r.env.threads_note:
            counts[r.env.threads_note] = counts.get(r.env.threads_note, 0) + 1
    return [f"{note} ({n} of {len(results)} runs)" for note, n in counts.items()]
