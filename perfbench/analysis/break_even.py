"""Each toggle's break-even: how many tokens a process must serve before the toggle's extra cold-start cost
(compiling its graphs and kernels) is paid back by its per-token saving.

    cold cost of a run   = (first_ttft_ms - ttft_ms_median) + 1000 * compile_s
                           the first, untimed iteration's excess over a steady one: the first prefill's excess
                           and the first decode step's (compile_s is that step's excess, graph mode only)
    time per iteration   = ttft_ms_median + (output_len - 1) * tpot_ms_median   (one batch of requests)
    saving per token     = (time per iteration without - with) / (batch_size * output_len)
    break-even tokens    = (cold cost with - cold cost without) / saving per token

A token is a generated token at the run's shape: the saving counts the prefill (a toggle that only speeds up
prefill pays back too) and the decode steps of the requests that produced it.

Pairs: every merged run with toggle T on, against the run of the same workload shape whose plan is the same
but for T. Point estimates from the runs' medians; no CI (a ratio of two differences of medians, one of
them from a single cold start per process). Runs timed in one process (block groups) share it: the plan
warmed up second may find kernels the first compiled, so their cold costs are a lower bound of a fresh
process's.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from perfbench.analysis.attribution import combo_label
from perfbench.analysis.rounds import merge_rounds
from perfbench.results import RunResult


class BreakEven(BaseModel):
    """One toggle added to one plan: its extra cold-start cost, its saving per token, and the break-even."""

    model_config = ConfigDict(extra="forbid")

    toggle: str
    plan: str  # the plan it is added to ("all off" for the baseline)
    shape: str
    with_run: str
    without_run: str
    cold_extra_ms: float | None  # cold cost with T - without T
    saving_per_token_ms: float | None  # time saved per generated token (prefill and decode, at the run's shape)
    tokens: float | None  # tokens served until paid back; None: not computable, inf: never
    verdict: str  # "paid back after N tokens" / "no extra cold cost" / "never: no per-token saving" / ...


def cold_cost_ms(result: RunResult) -> float | None:
    """The first iteration's excess over a steady one (ms): see the module docstring; None without data."""
    first, ttft = result.summary.first_ttft_ms, result.summary.ttft_ms_median
    compile_s = result.summary.compile_s
    parts = []
    if first is not None and ttft is not None:
        parts.append(first - ttft)
    if compile_s is not None:
        parts.append(1e3 * compile_s)
    return sum(parts) if parts else None


def _iteration_ms(result: RunResult) -> float | None:
    ttft, tpot = result.summary.ttft_ms_median, result.summary.tpot_ms_median
    if ttft is None or tpot is None:
        return None
    return ttft + max(result.spec.output_len - 1, 0) * tpot


def break_even(with_run: RunResult, without_run: RunResult) -> tuple[float | None, float | None, float | None, str]:
    """(cold extra ms, saving per token ms, tokens, verdict) of `with_run` against `without_run`."""
    cold_with, cold_without = cold_cost_ms(with_run), cold_cost_ms(without_run)
    time_with, time_without = _iteration_ms(with_run), _iteration_ms(without_run)
    if cold_with is None or cold_without is None or time_with is None or time_without is None:
        return None, None, None, "not computable: a run lacks its cold start, TTFT or TPOT"
    extra = cold_with - cold_without
    saving = (time_without - time_with) / max(with_run.spec.batch_size * with_run.spec.output_len, 1)
    if extra <= 0:
        return extra, saving, 0.0, "no extra cold cost: paid from the first token"
    if saving <= 0:
        return extra, saving, math.inf, "never: no per-token saving"
    tokens = extra / saving
    return extra, saving, tokens, f"paid back after {math.ceil(tokens):,} tokens"


def break_evens(results: list[RunResult]) -> list[BreakEven]:
    """Every (toggle, plan without it) pair of the folder's ok runs, merged over rounds."""
    merged = [r for r in merge_rounds(results) if r.status == "ok"]
    by_plan = {(r.shape(), r.ran_on()): r for r in merged}
    out = []
    for r in merged:
        for toggle in sorted(r.ran_on()):
            without = by_plan.get((r.shape(), r.ran_on() - {toggle}))
            if without is None:
                continue
            extra, saving, tokens, verdict = break_even(r, without)
            out.append(BreakEven(toggle=toggle, plan=combo_label(without.ran_on()), shape=r.shape().label(),
                                 with_run=r.run_id, without_run=without.run_id, cold_extra_ms=extra,
                                 saving_per_token_ms=saving, tokens=tokens, verdict=verdict))
    return out
