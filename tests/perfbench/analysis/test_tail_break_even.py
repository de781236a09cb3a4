"""Cold start and tail as metrics: the decode-step p50/p99 with CIs, and each toggle's break-even."""

from __future__ import annotations

import math

import pytest

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.break_even import break_even, break_evens, cold_cost_ms
from perfbench.analysis.tail import decode_step_summary
from perfbench.results import RunPlan, RunResult, RunSpec
from tests.records_kit import run_result


def _run(run_id: str, on: set[str], batch_size: int = 1, **summary: float) -> RunResult:
    spec = RunSpec(run_id=run_id, scenario="s", batch_size=batch_size, output_len=9,
                   toggles={t: t in on for t in TOGGLE_NAMES})
    plan = RunPlan.from_dict({t: {"requested": t in on, "state": "on" if t in on else "off", "reason": "",
                                  "impl": ""} for t in TOGGLE_NAMES})
    return run_result(run_id, spec=spec, plan=plan, summary=summary)


def test_decode_step_percentiles_and_their_cis() -> None:
    summary = decode_step_summary([float(v) for v in range(1, 101)])
    # 1..100: the median is 50.5; p99 by linear interpolation at rank 0.99 * 99 = 98.01: 99 + 0.01 = 99.01
    assert summary["decode_step_ms_p50"] == pytest.approx(50.5)
    assert summary["decode_step_ms_p99"] == pytest.approx(99.01)
    for key in ("decode_step_ms_p50", "decode_step_ms_p99"):
        assert summary[f"{key}_ci_low"] <= summary[key] <= summary[f"{key}_ci_high"]
        assert summary[f"{key}_ci_low"] < summary[f"{key}_ci_high"]
    assert decode_step_summary([])["decode_step_ms_p99"] is None
    one = decode_step_summary([7.0])
    assert one["decode_step_ms_p50"] == 7.0 and one["decode_step_ms_p50_ci_low"] is None


def test_break_even_tokens_by_hand() -> None:
    # without: first prefill 100 ms vs median 40 (60 ms cold), no graph; with: the same prefill and a 2 s compile
    without = _run("a", set(), batch_size=4, first_ttft_ms=100.0, ttft_ms_median=40.0, tpot_ms_median=10.0)
    with_ = _run("b", {"graph_mode"}, batch_size=4, first_ttft_ms=100.0, ttft_ms_median=40.0, compile_s=2.0,
                 tpot_ms_median=8.0)
    assert cold_cost_ms(without) == pytest.approx(60.0) and cold_cost_ms(with_) == pytest.approx(2060.0)
    # 2000 ms extra; an iteration (TTFT + 8 steps) takes 120 ms without, 104 with, and makes 4 x 9 = 36 tokens:
    # 16 / 36 ms saved per token -> 2000 * 36 / 16 = 4500 tokens
    extra, saving, tokens, verdict = break_even(with_, without)
    assert (extra, saving, tokens) == pytest.approx((2000.0, 16 / 36, 4500.0))
    assert verdict == "paid back after 4,500 tokens"
    # a toggle that only speeds up prefill pays back too: TTFT 40 -> 30 ms saves 10 / 36 ms per token
    prefill_only = with_.replace(summary={**with_.summary.model_dump(), "ttft_ms_median": 30.0,
                                          "first_ttft_ms": 90.0, "tpot_ms_median": 10.0})
    assert break_even(prefill_only, without)[2] == pytest.approx(2000 * 36 / 10)
    slower = with_.replace(summary={**with_.summary.model_dump(), "tpot_ms_median": 11.0})
    assert math.isinf(break_even(slower, without)[2]) and break_even(slower, without)[3].startswith("never")
    cheap = with_.replace(summary={**with_.summary.model_dump(), "compile_s": None})
    assert break_even(cheap, without)[2] == 0.0


def test_break_evens_pair_each_toggle_with_the_plan_without_it() -> None:
    runs = [_run("base", set(), first_ttft_ms=50.0, ttft_ms_median=40.0, tpot_ms_median=10.0),
            _run("g", {"graph_mode"}, first_ttft_ms=50.0, ttft_ms_median=40.0, compile_s=1.0, tpot_ms_median=9.0),
            _run("gr", {"graph_mode", "fused_rope"}, first_ttft_ms=50.0, ttft_ms_median=40.0, compile_s=1.0,
                 tpot_ms_median=8.0)]
    pairs = {(p.toggle, p.without_run): p for p in break_evens(runs)}
    assert set(pairs) == {("graph_mode", "base"), ("fused_rope", "g")}  # graph_mode alone has no rope-only plan
    # 1000 ms extra; 8 steps x 1 ms saved per 9 tokens (batch 1, output_len 9) -> 1125 tokens
    assert pairs[("graph_mode", "base")].tokens == pytest.approx(1000 * 9 / 8)
    assert pairs[("fused_rope", "g")].tokens == 0.0  # the same compile cost with and without rope


def test_cold_start_across_rounds_has_a_median_and_ci() -> None:
    from perfbench.report.cold_start import rounds_rows

    rounds = [_run(f"g{i}", {"graph_mode"}, first_ttft_ms=v, ttft_ms_median=40.0, compile_s=c, tpot_ms_median=9.0)
              for i, (v, c) in enumerate([(100.0, 1.0), (140.0, 3.0), (120.0, 2.0)])]
    rounds = [r.replace(spec=r.spec.replace(round=i + 1, combination="g")) for i, r in enumerate(rounds)]
    (row,) = rounds_rows(rounds)
    # three rounds: medians 120 ms and 2 s; the CI lies within the rounds' range
    assert row["rounds"] == 3 and row["first_ttft_ms"] == 120.0 and row["compile_s"] == 2.0
    assert 100.0 <= row["first_ttft_ms_lo"] <= 120.0 <= row["first_ttft_ms_hi"] <= 140.0
    assert rounds_rows(rounds[:1]) == []  # one round: no CI across rounds
