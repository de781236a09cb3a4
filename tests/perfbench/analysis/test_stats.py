"""perfbench.analysis.stats (scipy-backed) against textbook and hand-computed values, and its properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import strategies as st

from perfbench.analysis import stats

finite_floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


def test_median_and_percentile_textbook() -> None:
    assert stats.median([3, 1, 2]) == 2.0
    assert stats.median([4, 1, 3, 2]) == 2.5
    # Linear interpolation between closest ranks: position (n-1) * p / 100.
    values = [15, 20, 35, 40, 50]
    assert stats.percentile(values, 0) == 15
    assert stats.percentile(values, 100) == 50
    assert stats.percentile(values, 40) == pytest.approx(29.0)  # position 1.6: 20 + 0.6 * 15
    assert stats.percentile(values, 90) == pytest.approx(46.0)  # position 3.6: 40 + 0.6 * 10


@pytest.mark.parametrize("p", [-0.1, 100.5, math.nan])
def test_percentile_range_checked(p: float) -> None:
    with pytest.raises(ValueError, match="percentile p"):
        stats.percentile([1.0, 2.0], p)


def test_empty_and_nan_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        stats.median([])
    with pytest.raises(ValueError, match="NaN"):
        stats.percentile([1.0, float("nan")], 50)


def test_bootstrap_ci_deterministic_and_contains_median() -> None:
    values = np.random.default_rng(0).normal(10.0, 1.0, size=50)
    first = stats.bootstrap_ci(values, seed=7)
    assert first == stats.bootstrap_ci(values, seed=7)
    # Bootstrap medians are order statistics, so another seed may land on the same pair; the mean cannot.
    mean_ci_seed7 = stats.bootstrap_ci(values, stat=np.mean, seed=7)
    assert mean_ci_seed7 != stats.bootstrap_ci(values, stat=np.mean, seed=8)
    assert first[0] < stats.median(values) < first[1]
    lo, hi = stats.bootstrap_ci(values, stat=np.mean, level=0.99)
    assert lo < float(np.mean(values)) < hi
    narrow = stats.bootstrap_ci(values, level=0.5)
    assert lo < narrow[0] < narrow[1] < hi


def test_bootstrap_ci_custom_stat() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    lo, hi = stats.bootstrap_ci(values, stat=max, n_boot=500)
    assert 1.0 <= lo <= hi == 100.0


def test_ratio_ci() -> None:
    rng = np.random.default_rng(1)
    before = rng.lognormal(math.log(5.0), 0.05, size=40)
    after = rng.lognormal(math.log(6.0), 0.05, size=40)
    ratio, lo, hi = stats.ratio_ci(before, after)
    assert ratio == pytest.approx(stats.median(after) / stats.median(before))
    assert lo < ratio < hi
    assert 1.1 < lo and hi < 1.3
    with pytest.raises(ValueError, match="statistic is 0"):
        stats.ratio_ci([0.0, 0.0, 0.0], [1.0])
    p90 = lambda v: stats.percentile(v, 90)  # noqa: E731
    ratio90, lo90, hi90 = stats.ratio_ci(before, after, stat=p90, n_boot=300)
    assert ratio90 == pytest.approx(p90(after) / p90(before)) and lo90 < ratio90 < hi90


def test_mann_whitney_textbook() -> None:
    # Complete separation, 3 vs 3: U = 9 and P(U >= 9) = 1 / C(6, 3) = 0.05 exactly.
    u, p = stats.mann_whitney_u([4, 5, 6], [1, 2, 3], alternative="greater")
    assert (u, p) == (9.0, pytest.approx(0.05))
    u, p = stats.mann_whitney_u([4, 5, 6], [1, 2, 3], alternative="less")
    assert (u, p) == (9.0, pytest.approx(1.0))
    assert stats.mann_whitney_u([4, 5, 6], [1, 2, 3])[1] == pytest.approx(0.1)
    # Ties count 1/2 per pair.
    assert stats.mann_whitney_u([1, 2], [2, 3])[0] == 0.5
    # Everything tied: no evidence.
    assert stats.mann_whitney_u([1.0, 1.0], [1.0, 1.0], alternative="greater") == (2.0, 1.0)


def test_mann_whitney_input_errors() -> None:
    with pytest.raises(ValueError, match="alternative"):
        stats.mann_whitney_u([1], [2], alternative="bigger")
    with pytest.raises(ValueError, match="ties"):
        stats.mann_whitney_u([1, 2], [2, 3], method="exact")


def test_mann_whitney_asymptotic_hand_computed() -> None:
    # 1..10 against 11..20: U = 0; normal approximation mu = 50, sigma = sqrt(10 * 10 * 21 / 12), continuity 0.5.
    a, b = list(range(1, 11)), list(range(11, 21))
    z = (50 - 0 - 0.5) / math.sqrt(10 * 10 * 21 / 12)
    u, p = stats.mann_whitney_u(a, b, alternative="less", method="asymptotic")
    assert u == 0.0 and p == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)), rel=1e-12)
    # with one tie group of size 2 (10 appears twice) the variance shrinks by the tie term (2^3 - 2) / (20 * 19)
    a2 = [*range(1, 10), 10]
    b2 = [10, *range(12, 21)]
    sigma = math.sqrt(10 * 10 / 12 * (21 - 6 / (20 * 19)))
    u2, p2 = stats.mann_whitney_u(a2, b2, alternative="less")
    assert u2 == 0.5 and p2 == pytest.approx(0.5 * math.erfc((50 - 0.5 - 0.5) / sigma / math.sqrt(2)), rel=1e-12)


def test_mann_whitney_exact_close_to_asymptotic() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(0, 1, 30), rng.normal(0.5, 1, 30)
    _, exact = stats.mann_whitney_u(a, b, "less", method="exact")
    _, approx = stats.mann_whitney_u(a, b, "less", method="asymptotic")
    assert exact == pytest.approx(approx, abs=2e-3)


def test_holm_adjust_textbook() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, max(1*0.04, 0.06)
    adjusted = stats.holm_adjust([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm_adjust([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert stats.holm_adjust([]) == []
    with pytest.raises(ValueError, match="p-values"):
        stats.holm_adjust([1.5])


def test_geometric_mean() -> None:
    assert stats.geometric_mean([1.0, 4.0, 16.0]) == pytest.approx(4.0)
    assert stats.geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive"):
        stats.geometric_mean([1.0, 0.0])
