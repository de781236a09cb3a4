"""The end-of-run table: plans by toggle names, medians with CIs, speed-ups, stability, warnings."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.folder_analysis import analyse
from perfbench.analysis.speedup import Marginal, Speedup
from perfbench.config.labels import TOGGLE_ABBREV
from perfbench.results import RunPlan, RunResult, RunSpec
from perfbench.run.summary_table import compile_summary, short_number, summary_table
from tests.records_kit import run_result


def _run(run_id: str, on: bool, ttft: float, tpot: float, stable: bool = True,
         compile_s: float | None = None, warm: float | None = None) -> RunResult:
    plan = RunPlan.from_dict({"chunk_gdr": {"requested": on, "state": "on" if on else "off"}})
    return run_result(run_id, plan=plan,
                      samples={"ttft_ms": [ttft, ttft * 1.01, ttft * 0.99], "tpot_ms": [tpot] * 3},
                      summary={"compile_s": compile_s, "compile_cache_warm": warm},
                      stability={"stable": stable, "reason": "" if stable else "other processes kept 1.50 cores"})


def test_runs_timed_separately_are_named_by_toggles_and_unstable_ones_warned_about():
    text = summary_table(analyse([_run("a", False, 100.0, 10.0), _run("b", True, 50.0, 10.0, stable=False)]))
    lines = text.splitlines()
    assert lines[0].split()[0] == "plan"
    base = next(line for line in lines if line.startswith("all off"))
    gdr = next(line for line in lines if line.startswith("gdr "))
    assert "(baseline)" in base and "100.0" in base
    assert "2.00x" in gdr and "inconclusive" in gdr
    assert "legend: gdr chunk_gdr" in text
    assert "WARNING: 1 of 2 plans need a second look:" in text
    assert "gdr: timed separately, unstable: other processes kept 1.50 cores" in " ".join(text.split())


def test_a_plan_timed_separately_at_another_host_speed_is_warned_about():
    base, gdr = _run("a", False, 100.0, 10.0), _run("b", True, 50.0, 10.0)
    base.samples["host_probe_ms"], gdr.samples["host_probe_ms"] = [0.32] * 3, [0.33] * 3
    assert "WARNING" not in summary_table(analyse([base, gdr]))
    gdr.samples["host_probe_ms"] = [0.42] * 3
    text = summary_table(analyse([base, gdr]))
    assert "WARNING: 1 of 2 plans need a second look:" in text
    assert ("the host ran at another speed: its probe took 0.42 ms for this plan vs 0.32 ms for the baseline"
            in " ".join(text.split()))
    assert "inconclusive" in next(line for line in text.splitlines() if line.startswith("gdr "))


def _blocked(run_id: str, on: tuple[str, ...], ttft: list[float], tpot: list[float]) -> RunResult:
    plan = RunPlan.from_dict({t: {"requested": t in on, "state": "on" if t in on else "off"} for t in TOGGLE_NAMES})
    return run_result(run_id, spec=RunSpec(run_id=run_id, scenario="s", timing="blocks", block_group="g"),
                      plan=plan, samples={"ttft_ms": ttft, "tpot_ms": tpot},
                      blocks={"group": "g", "process": "p1", "index": list(range(len(ttft))),
                              "epoch": [i // 5 for i in range(len(ttft))]},
                      stability={"stable": False, "reason": "95% CI of the median spans 40% of it"})


def test_block_timed_plans_get_paired_verdicts_and_the_default_table_fits_120_columns():
    # host drift shared by every plan in a block (x1, x1.5, x0.8 ...) cancels in the pairs
    drift = [1.0, 1.5, 0.8, 1.2, 0.9, 1.4, 1.1, 0.7, 1.3, 1.0]
    wobble = [1.0 + 0.002 * ((i % 3) - 1) for i in range(len(drift))]
    base = _blocked("base", (), [100 * d for d in drift], [10 * d for d in drift])
    gdr = _blocked("gdr", ("chunk_gdr",), [40 * d * w for d, w in zip(drift, wobble)],
                   [10 * d * w for d, w in zip(drift, wobble)])
    singles = [_blocked(t, (t,), [90 * d for d in drift], [9 * d for d in drift])
               for t in ("fused_rope", "fused_attention", "fused_rmsnorm", "merged_projections", "grouped_moe")]
    eager = ("fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "merged_projections", "grouped_moe")
    best = _blocked("best", eager, [35 * d for d in drift], [5 * d for d in drift])
    graph = _blocked("graph", (*eager, "graph_mode"), [35 * d * w for d, w in zip(drift, wobble)],
                     [2.5 * d for d in drift])
    text = summary_table(analyse([base, gdr, *singles, best, graph]))
    assert max(len(line) for line in text.splitlines()) <= 120, text
    row = next(line for line in text.splitlines() if line.startswith("gdr "))
    assert "2.50x" in row and "faster" in row and "1.00x" in row and "same" in row
    marginal = next(line for line in text.splitlines() if line.startswith("+graph on"))
    assert "1.00x" in marginal and "same" in marginal and "2.00x" in marginal and "faster" in marginal
    assert "WARNING" not in text  # per-run spread is information only: the pairs decided
    assert "within-block pairs (up to 10 pairs in 2 epochs)" in " ".join(text.split())


def test_an_undecided_paired_speed_up_is_warned_about():
    base = _blocked("base", (), [100.0, 100.0, 100.0, 100.0], [10.0] * 4)
    noisy = _blocked("gdr", ("chunk_gdr",), [80.0, 130.0, 70.0, 125.0], [10.0] * 4)
    text = summary_table(analyse([base, noisy]))
    assert "inconclusive" in next(line for line in text.splitlines() if line.startswith("gdr "))
    assert "gdr: ttft_ms inconclusive: its 4 pairs spread too widely for a verdict" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 120


def test_compile_times_are_reported_cold_and_warm_apart():
    runs = [_run("a", False, 1.0, 1.0, compile_s=30.0, warm=0.0), _run("b", True, 1.0, 1.0, compile_s=2.0, warm=1.0),
            _run("c", True, 1.0, 1.0, compile_s=4.0, warm=1.0)]
    assert compile_summary(runs) == ("graph compile: cold cache: median 30.0 s over 1 run; "
                                     "warm cache: median 3.0 s over 2 runs")
    assert compile_summary([_run("a", False, 1.0, 1.0)]) == ""


@pytest.mark.parametrize(("value", "text"), [(0.934, "0.93"), (9.999, "10.00"), (12.345, "12.3"), (999.94, "999.9"),
                                             (999.96, "1000"), (12345.6, "12346"), (99999.5, "1e+05"),
                                             (123456.0, "1e+05"), (1e300, "1e300"), (float("inf"), "inf")])
def test_short_numbers_take_at_most_five_characters(value: float, text: str):
    assert short_number(value) == text and len(text) <= 5


def test_the_default_table_fits_120_columns_with_the_widest_values():
    # the default scenario's plans, the longest labels; medians of five digits and speed-ups whose pairs spread
    # so widely that every cell is "inconclusive" with bounds in exponent form
    rng = np.random.default_rng(0)
    wild = list(np.exp(rng.normal(0, 6, 10)))
    base = _blocked("base", (), [99999.0] * 10, [99999.0] * 10)
    eager = ("fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "merged_projections", "grouped_moe")
    plans = [_blocked(t, (t,), [99999.0 * w for w in wild], [99999.0 * w for w in wild]) for t in eager]
    plans.append(_blocked("best", eager, [99999.0 * w for w in wild], [99999.0 * w for w in wild]))
    plans.append(_blocked("graph", (*eager, "graph_mode"), [99999.0 * w for w in wild[::-1]],
                          [99999.0 * w for w in wild[::-1]]))
    text = summary_table(analyse([base, *plans]))
    assert "inconclusive" in text and "e+" in text
    widest = max(text.splitlines(), key=len)
    assert len(widest) <= 120, widest


def test_the_table_fits_120_columns_whatever_the_values():
    # the widest each column can hold: the longest plan labels (every toggle on; the baseline with all but one,
    # which adds " (baseline)"), a failed plan's status in the TTFT column, 5-digit medians, and speed-up cells of
    # 5-character numbers (finite and unbounded) with the longest verdict word
    def plan(run_id: str, on: tuple[str, ...], status: str = "ok") -> RunResult:
        decisions = {t: {"requested": t in on, "state": "on" if t in on else "off"} for t in TOGGLE_NAMES}
        return run_result(run_id, status=status, plan=RunPlan.from_dict(decisions),
                          samples={"ttft_ms": [99999.4] * 3, "tpot_ms": [99999.4] * 3})

    every = tuple(TOGGLE_NAMES)
    base, full = plan("base", every[1:]), plan("full", every)
    results = [base, full, plan("failed", every, status="timeout")]
    widest = Speedup(99999.0, 12345.6, 1e300, "blocks", "inconclusive", 10, 2)
    unbounded = Speedup(float("inf"), 99999.0, float("inf"), "blocks", "inconclusive", 10, 2)
    analysis = dataclasses.replace(analyse(results), gains={"full": {"ttft_ms": widest, "tpot_ms": unbounded}},
                                   on_top=(Marginal(every[0], "base", "full", {"ttft_ms": widest,
                                                                               "tpot_ms": unbounded}),))
    text = summary_table(analysis)
    for shown in ("(baseline)", "timeout", "99999", "1e300", "inf]", "inconclusive", f"+{TOGGLE_ABBREV[every[0]]} on"):
        assert shown in text
    assert max(len(line) for line in text.splitlines()) <= 120, text
