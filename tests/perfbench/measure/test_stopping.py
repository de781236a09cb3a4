"""Adaptive stopping: the minimum always runs, then convergence, the iteration cap, the time cap."""

from __future__ import annotations

import pytest

from perfbench.measure.stopping import CONVERGED, MAX_ITERATIONS, MAX_TIME, StoppingRule


def test_a_fixed_count_runs_exactly_that_many():
    rule = StoppingRule.fixed(3)
    assert rule.stop_reason({"ttft_ms": [1.0, 1.0]}, 100.0) is None
    assert rule.stop_reason({"ttft_ms": [1.0, 5.0, 9.0]}, 0.0) == MAX_ITERATIONS


def test_identical_samples_converge_at_the_minimum():
    rule = StoppingRule(min_iterations=5, max_iterations=50, max_time_s=60.0, target_rel_ci=0.01)
    assert rule.stop_reason({"ttft_ms": [10.0] * 4}, 0.0) is None
    assert rule.stop_reason({"ttft_ms": [10.0] * 5, "tpot_ms": [2.0] * 5}, 0.0) == CONVERGED


def test_a_noisy_metric_keeps_going_until_a_cap():
    rule = StoppingRule(min_iterations=5, max_iterations=8, max_time_s=60.0, target_rel_ci=0.01)
    noisy = {"ttft_ms": [10.0] * 6, "tpot_ms": [1.0, 3.0, 2.0, 5.0, 1.5, 4.0]}
    assert rule.stop_reason(noisy, 1.0) is None
    assert rule.stop_reason(noisy, 61.0) == MAX_TIME
    assert rule.stop_reason({k: v + v[:2] for k, v in noisy.items()}, 1.0) == MAX_ITERATIONS


def test_limits_are_checked():
    with pytest.raises(ValueError, match="min_iterations <= max_iterations"):
        StoppingRule(min_iterations=5, max_iterations=2)
