"""Attribution on synthetic results whose effects are planted in log-time space."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.attribution import (
    Unavailable,
    attribute,
    cumulative_waterfall,
    designs,
    interactions,
    leave_one_out,
    marginal_effects,
    shapley_values,
)
from perfbench.errors import UserError
from perfbench.results import RunPlan, RunResult, RunSpec
from tests.records_kit import run_result

A, B, C = "fused_rope", "fused_attention", "grouped_moe"
# log speed-ups (log time saved) of each toggle alone
EFFECTS = {A: math.log(1.10), B: math.log(1.30), C: math.log(1.05)}
BASE_TPOT = 20.0


def make_run(run_id: str, on: set[str], tpot: float | None, *, inactive: set[str] = frozenset(),
             batch_size: int = 1, status: str = "ok", samples: list[float] | None = None,
             decode_tok_s: float | None = None) -> RunResult:
    plan = {}
    for t in TOGGLE_NAMES:
        if t in on:
            plan[t] = {"requested": True, "state": "on", "reason": "", "impl": "x"}
        elif t in inactive:
            plan[t] = {"requested": True, "state": "inactive", "reason": "needs attn_tp_size > 1", "impl": ""}
        else:
            plan[t] = {"requested": False, "state": "off", "reason": "not requested", "impl": ""}
    spec = {"run_id": run_id, "scenario": "synthetic", "device": "cpu", "dtype": "float32", "model": "tiny",
            "batch_size": batch_size, "input_len": 32, "output_len": 8, "parallel": {"world_size": 1},
            "toggles": {t: t in on or t in inactive for t in TOGGLE_NAMES}}
    return run_result(run_id, status=status, spec=RunSpec.from_dict(spec), plan=RunPlan.from_dict(plan),
                      samples={"tpot_ms": samples or []},
                      summary={"tpot_ms_median": tpot, "decode_tok_s": decode_tok_s})


def planted_tpot(on: set[str], interaction: float = 0.0) -> float:
    """Time = base / exp(sum of effects [+ interaction of A and B when both on])."""
    log_saved = sum(EFFECTS[t] for t in on) + (interaction if {A, B} <= on else 0.0)
    return BASE_TPOT * math.exp(-log_saved)


def factorial(toggles: list[str], interaction: float = 0.0) -> list[RunResult]:
    runs = []
    for k in range(len(toggles) + 1):
        for combo in combinations(toggles, k):
            on = set(combo)
            runs.append(make_run("r-" + ("-".join(sorted(on)) or "base"), on, planted_tpot(on, interaction)))
    return runs


def only_design(runs: list[RunResult], metric: str = "tpot_ms_median"):
    found = designs(runs, metric)
    assert len(found) == 1
    return found[0]


def by_toggle(rows) -> dict[str, float]:
    return {row.toggle: row.log_effect for row in rows}


def test_additive_effects_are_recovered_by_marginal_leave_one_out_and_shapley():
    design = only_design(factorial([A, B, C]))
    assert by_toggle(marginal_effects(design)) == pytest.approx(EFFECTS)
    assert by_toggle(leave_one_out(design)) == pytest.approx(EFFECTS)
    shapley = shapley_values(design)
    assert {v.toggle: v.log_value for v in shapley} == pytest.approx(EFFECTS)
    for row in interactions(design):
        assert row.log_interaction == pytest.approx(0.0, abs=1e-12)
        assert row.contexts == 2  # a 2^3 factorial has each pair's corners at both levels of the third toggle


def test_speedup_is_time_without_over_time_with():
    design = only_design(factorial([A]))
    (effect,) = marginal_effects(design)
    assert effect.value_without == pytest.approx(BASE_TPOT)
    assert effect.speedup == pytest.approx(BASE_TPOT / planted_tpot({A}))
    assert effect.speedup == pytest.approx(1.10)


def test_planted_interaction_is_found_and_split_equally_by_shapley():
    gamma = math.log(1.2)
    design = only_design(factorial([A, B, C], interaction=gamma))
    found = {(row.a, row.b): row.log_interaction for row in interactions(design)}
    assert found[(A, B)] == pytest.approx(gamma)
    assert found[(A, C)] == pytest.approx(0.0, abs=1e-12)
    assert found[(B, C)] == pytest.approx(0.0, abs=1e-12)
    shapley = {v.toggle: v.log_value for v in shapley_values(design)}
    assert shapley[A] == pytest.approx(EFFECTS[A] + gamma / 2)
    assert shapley[B] == pytest.approx(EFFECTS[B] + gamma / 2)
    assert shapley[C] == pytest.approx(EFFECTS[C])
    # marginal effects at the baseline do not see the interaction; leave-one-out (all others on) does
    assert by_toggle(marginal_effects(design))[A] == pytest.approx(EFFECTS[A])
    assert by_toggle(leave_one_out(design))[A] == pytest.approx(EFFECTS[A] + gamma)


def test_four_corners_of_a_pair_are_enough_for_its_interaction():
    gamma = math.log(0.9)
    runs = [make_run(f"r{i}", on, planted_tpot(on, gamma)) for i, on in enumerate([set(), {A}, {B}, {A, B}])]
    (row,) = interactions(only_design(runs))
    assert (row.a, row.b, row.contexts) == (A, B, 1)
    assert row.log_interaction == pytest.approx(gamma)
    assert row.factor == pytest.approx(0.9)


def test_one_at_a_time_design_explains_what_it_cannot_compute():
    runs = [make_run("base", set(), planted_tpot(set()))]
    runs += [make_run(t, {t}, planted_tpot({t})) for t in (A, B, C)]
    design = only_design(runs)
    assert by_toggle(marginal_effects(design)) == pytest.approx(EFFECTS)
    shapley = shapley_values(design)
    assert isinstance(shapley, Unavailable)
    assert "needs all 8 on/off combinations of the 3 varied toggles; 4 missing" in shapley.reason
    assert isinstance(interactions(design), Unavailable)
    assert "four on/off combinations" in interactions(design).reason
    assert isinstance(leave_one_out(design), Unavailable)
    assert isinstance(cumulative_waterfall(design), Unavailable)


def test_cumulative_design_gives_a_waterfall_in_its_order():
    order = [B, C, A]
    runs, on = [make_run("base", set(), planted_tpot(set()))], set()
    for t in order:
        on = on | {t}
        runs.append(make_run("+" + t, set(on), planted_tpot(on)))
    design = only_design(runs)
    steps = cumulative_waterfall(design)
    assert [s.effect.toggle for s in steps] == order
    assert [s.effect.log_effect for s in steps] == pytest.approx([EFFECTS[t] for t in order])
    assert steps[-1].cumulative_speedup == pytest.approx(BASE_TPOT / planted_tpot({A, B, C}))
    # only B was measured alone against the baseline
    assert [e.toggle for e in marginal_effects(design)] == [B]
    # removing A from all-on is measured (+B+C), removing B or C is not
    assert [e.toggle for e in leave_one_out(design)] == [A]


def test_waterfall_follows_the_requested_order_in_a_factorial():
    design = only_design(factorial([A, B, C]))
    assert [s.effect.toggle for s in cumulative_waterfall(design, order=[C, A, B])] == [C, A, B]
    assert [s.effect.toggle for s in cumulative_waterfall(design)] == [A, B, C]  # registry order


def test_inactive_toggles_count_as_off():
    runs = [make_run("base", set(), 10.0),
            make_run("asked-but-inactive", set(), 10.4, inactive={"mm_all_reduce"}),
            make_run("rope", {A}, 8.0)]
    design = only_design(runs)
    assert design.varied == [A]
    assert design.baseline.run_ids == ("base", "asked-but-inactive")
    assert design.baseline.value == pytest.approx(10.2)  # median over the two runs of the cell
    (effect,) = marginal_effects(design)
    assert effect.speedup == pytest.approx(10.2 / 8.0)


def test_toggles_on_in_every_run_are_context_not_players():
    graph = "graph_mode"
    corners = [set(), {A}, {B}, {A, B}]
    runs = [make_run(f"r{i}", on | {graph}, planted_tpot(on)) for i, on in enumerate(corners)]
    design = only_design(runs)
    assert design.varied == [A, B]
    assert design.constant_on == {graph}
    assert {v.toggle for v in shapley_values(design)} == {A, B}


def test_runs_are_grouped_by_workload_shape_and_failures_ignored():
    runs = factorial([A])
    runs += [make_run("bs4-base", set(), 40.0, batch_size=4), make_run("bs4-rope", {A}, 20.0, batch_size=4)]
    runs.append(make_run("broken", {B}, None, status="error"))
    found = designs(runs, "tpot_ms_median")
    assert [d.shape.batch_size for d in found] == [1, 4]
    assert all(d.varied == [A] for d in found)
    assert by_toggle(marginal_effects(found[1])) == pytest.approx({A: math.log(2.0)})


def test_throughput_metrics_count_higher_as_faster():
    runs = [make_run("base", set(), 10.0, decode_tok_s=100.0), make_run("rope", {A}, 8.0, decode_tok_s=150.0)]
    (effect,) = marginal_effects(only_design(runs, "decode_tok_s"))
    assert effect.speedup == pytest.approx(1.5)


def test_bootstrap_ci_brackets_the_speedup_when_samples_exist():
    rng = np.random.default_rng(0)
    base = list(BASE_TPOT * (1 + 0.02 * rng.standard_normal(64)))
    fast = list(planted_tpot({A}) * (1 + 0.02 * rng.standard_normal(64)))
    runs = [make_run("base", set(), float(np.median(base)), samples=base),
            make_run("rope", {A}, float(np.median(fast)), samples=fast)]
    (effect,) = marginal_effects(only_design(runs))
    assert effect.ci_low < effect.speedup < effect.ci_high
    assert effect.ci_low > 1.0  # a 10 % speed-up under 2 % noise is clearly resolved
    (no_samples,) = marginal_effects(only_design(factorial([A])))
    assert no_samples.ci_low is None and no_samples.ci_high is None


def test_non_finite_samples_are_left_out():
    runs = [make_run("base", set(), 10.0, samples=[10.0, math.nan, 10.2, 9.8]),
            make_run("rope", {A}, 8.0, samples=[8.0, 8.1, math.inf, 7.9])]
    design = only_design(runs)
    assert design.baseline.samples == (10.0, 10.2, 9.8)
    (effect,) = marginal_effects(design)
    assert effect.ci_low <= effect.speedup <= effect.ci_high


def test_a_single_combination_has_nothing_to_attribute():
    runs = [make_run("a", {A}, 5.0), make_run("b", {A}, 5.1)]
    assert attribute(runs, "tpot_ms_median") == []
    assert isinstance(shapley_values(only_design(runs)), Unavailable)


def test_unknown_metric_is_a_user_error():
    with pytest.raises(UserError, match="unknown metric `tpot`"):
        designs(factorial([A]), "tpot")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(min_value=1.0, max_value=100.0), min_size=8, max_size=8))
def test_shapley_values_add_up_to_the_total_speedup(times):
    on_sets = [set(c) for k in range(4) for c in combinations([A, B, C], k)]
    runs = [make_run(f"r{i}", on, t) for i, (on, t) in enumerate(zip(on_sets, times))]
    design = only_design(runs)
    total = sum(v.log_value for v in shapley_values(design))
    assert total == pytest.approx(math.log(design.baseline.value / design.full.value))
