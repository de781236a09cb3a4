"""perfbench.analysis.effect: the one ratio + CI + Mann-Whitney engine of `compare` (two-sided) and the gate
(one-sided), on samples whose answer is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfbench.analysis.effect import effect


def test_one_sided_slowdown() -> None:
    rng = np.random.default_rng(2)
    before = rng.lognormal(math.log(5.0), 0.05, size=20)
    slower = effect(before, before * 1.15, "greater", alpha=0.01, ci_level=None)
    assert slower.ratio == pytest.approx(1.15)  # every sample scaled: the medians scale too
    assert slower.significant and slower.method == "mann-whitney" and slower.p_value < 1e-6
    faster = effect(before, before / 1.15, "greater", alpha=0.01, ci_level=None)
    assert not faster.significant and faster.ratio < 1 and faster.p_value > 0.99
    # a higher-is-better metric regresses when it gets smaller
    throughput = np.linspace(100.0, 110.0, 20)
    assert effect(throughput, throughput / 1.2, "less", alpha=0.01, ci_level=None).significant
    assert not effect(throughput, throughput * 1.2, "less", alpha=0.01, ci_level=None).significant


def test_one_sided_tiny_samples_fall_back_to_separation() -> None:
    # 2 vs 2 samples cannot reach p < 0.01 (min one-sided p = 1 / C(4, 2) = 1/6): separation decides.
    separated = effect([5.0, 5.1], [6.0, 6.2], "greater", alpha=0.01, ci_level=None)
    assert separated.method == "no-overlap" and separated.significant
    assert not effect([5.0, 6.5], [6.0, 6.6], "greater", alpha=0.01, ci_level=None).significant
    # a two-sided test has no fallback: 2 vs 2 can never be significant at 0.05 (min p = 2/6)
    two_sided = effect([5.0, 5.1], [6.0, 6.2], alpha=0.05, ci_level=None)
    assert two_sided.method == "mann-whitney" and two_sided.p_value == pytest.approx(1 / 3)
    assert not two_sided.significant


def test_two_sided_ci_brackets_the_ratio_and_excludes_one_for_a_clear_change() -> None:
    before = np.linspace(10.0, 11.0, 15)
    change = effect(before, before * 1.3)
    assert change.ratio == pytest.approx(1.3)
    assert change.ci_low <= change.ratio <= change.ci_high and change.ci_level == 0.95
    assert change.ci_excludes_one and change.significant
    same = effect(before, before[::-1].copy())
    assert same.ratio == pytest.approx(1.0) and same.ci_excludes_one is False and not same.significant
    # one-sided: the CI must lie beyond 1 on the tested side
    assert effect(before, before * 1.3, "less").ci_excludes_one is False


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="alpha"):
        effect([1.0], [1.0], alpha=0.0)
    with pytest.raises(ValueError, match="alternative"):
        effect([1.0], [1.0], alternative="worse")
