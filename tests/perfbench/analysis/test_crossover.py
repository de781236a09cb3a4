"""The crossover search on synthetic speed-up curves with a known crossing and seeded noise: no timing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfbench.analysis.crossover import SpeedupPoint, crossing_from_points, find_crossing

LO, HI = 16, 4096


def _curve(x0: float, slope: float, sigma: float, rng: np.random.Generator):
    """speed-up 1 + slope * ln(x0 / x) (falls through 1 at x0 when slope > 0), measured with normal noise of
    sd `sigma` and a 95% CI of +- 1.96 sigma around each measurement."""
    calls: list[int] = []

    def measure(x: int) -> SpeedupPoint:
        calls.append(x)
        value = 1.0 + slope * math.log(x0 / x) + float(rng.normal(0.0, sigma))
        return SpeedupPoint(x=x, value=value, low=value - 1.96 * sigma, high=value + 1.96 * sigma)

    return measure, calls


@pytest.mark.parametrize("slope", [0.25, -0.25], ids=["falls", "rises"])
def test_the_true_crossing_lies_in_the_ci_in_at_least_95_of_100_seeded_cases(slope: float) -> None:
    covered = found = 0
    widths = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        x0 = float(math.exp(rng.uniform(math.log(32), math.log(2048))))
        measure, calls = _curve(x0, slope, 0.03, rng)
        crossing, points = find_crossing(measure, LO, HI)
        assert len(calls) == len(set(calls)) <= 8  # each point measured once, within the budget
        found += crossing.found
        if crossing.found:
            covered += crossing.low <= x0 <= crossing.high
            widths.append(crossing.high / crossing.low)
            assert crossing.direction == ("falls" if slope > 0 else "rises")
    assert found == 100 and covered >= 95
    # the search narrows the bracket from the range's 256x. A point's CI excludes 1 only where
    # |0.25 ln(x / x0)| > 1.96 * 0.03, i.e. beyond x0 e^(+-0.235): no CI can be narrower than e^0.47 = 1.6x
    assert float(np.median(widths)) < 2.5


def test_a_given_threshold_other_than_one() -> None:
    rng = np.random.default_rng(3)
    measure, _ = _curve(300.0, 0.25, 0.02, rng)
    # 1 + 0.25 ln(300 / x) = 1.1 at x = 300 / e^0.4 = 201.1
    crossing, _ = find_crossing(measure, LO, HI, threshold=1.1)
    assert crossing.found and crossing.low <= 201.1 <= crossing.high
    assert crossing.estimate == pytest.approx(201.1, rel=0.15)


def test_no_crossing_in_range_is_said_so() -> None:
    rng = np.random.default_rng(5)
    measure, _ = _curve(10_000.0, 0.25, 0.02, rng)  # crosses far beyond 4096: faster everywhere in range
    crossing, points = find_crossing(measure, LO, HI)
    assert not crossing.found and crossing.text.startswith("no crossing in range 16-4096")
    assert len(points) == 8


def test_ci_ends_are_the_nearest_significant_points_or_open() -> None:
    pts = [SpeedupPoint(x=16, value=1.3, low=1.2, high=1.4), SpeedupPoint(x=64, value=1.05, low=0.95, high=1.15),
           SpeedupPoint(x=128, value=0.97, low=0.9, high=1.04), SpeedupPoint(x=512, value=0.8, low=0.7, high=0.9)]
    crossing = crossing_from_points(pts, 1.0, 16, 512)
    # estimates cross between 64 (1.05) and 128 (0.97): 64 * 2^(0.05/0.08) = 98.7 in log space
    assert crossing.estimate == pytest.approx(64 * 2 ** (0.05 / 0.08))
    assert (crossing.low, crossing.high, crossing.low_open, crossing.high_open) == (16, 512, False, False)
    # without 512, no point is significantly below 1: a candidate whose open end is the range's, not a crossing
    undecided_end = crossing_from_points(pts[:3], 1.0, 16, 128)
    assert not undecided_end.found and undecided_end.high == 128 and undecided_end.high_open
    assert undecided_end.text == ("no crossing shown in range 16-128: the speed-up is significantly above 1 at 16, "
                                  "never significantly below it (3 points)")


def test_one_significant_point_among_noisy_ones_is_not_a_crossing() -> None:
    # chunk_gdr's TPOT in a recorded 6-point search: one CI of six clears 1 by 0.001, the rest hold it
    pts = [SpeedupPoint(x=16, value=0.9647, low=0.7398, high=1.2581),
           SpeedupPoint(x=25, value=1.0021, low=0.8516, high=1.1792),
           SpeedupPoint(x=38, value=1.0829, low=1.0012, high=1.1713),
           SpeedupPoint(x=91, value=0.9884, low=0.8990, high=1.0867),
           SpeedupPoint(x=216, value=1.0040, low=0.8658, high=1.1642),
           SpeedupPoint(x=512, value=1.0243, low=0.9376, high=1.1191)]
    crossing = crossing_from_points(pts, 1.0, 16, 512)
    assert not crossing.found and crossing.estimate is None
    assert "significantly above 1 at 38, never significantly below it" in crossing.text


def test_a_flat_curve_is_called_a_crossing_rarely() -> None:
    """A speed-up of exactly 1 everywhere, 6 points with 95% CIs: a crossing needs one CI wholly above 1 and
    one wholly below, in the right order around a sign change: about 2 in 100 at most (each side's chance
    of one significant point of six is 1 - 0.975^6 = 0.14, and 0.14^2 = 0.02). Over 400 seeded cases the
    count is Binomial(400, <= 0.02): mean <= 8; the bound 20 is more than 4 SDs above it (P < 1e-4)."""
    calls = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        measure, _ = _curve(100.0, 0.0, 0.05, rng)
        crossing, points = find_crossing(measure, LO, HI, max_points=6)
        calls += crossing.found
    assert calls <= 20


def test_bad_range_is_refused() -> None:
    with pytest.raises(ValueError, match="1 <= lo < hi"):
        find_crossing(lambda x: SpeedupPoint(x=x, value=1, low=1, high=1), 64, 64)


def test_estimates_that_wander_around_the_threshold_inside_their_cis_are_no_crossing() -> None:
    # chunk_gdr's TPOT over input length (a prefill-only toggle): estimates on both sides of 1, every CI holding 1
    pts = [SpeedupPoint(x=16, value=1.01, low=0.94, high=1.09), SpeedupPoint(x=59, value=0.99, low=0.97, high=1.01),
           SpeedupPoint(x=91, value=1.003, low=0.98, high=1.03), SpeedupPoint(x=512, value=1.02, low=0.92, high=1.13)]
    crossing = crossing_from_points(pts, 1.0, 16, 512)
    assert not crossing.found and crossing.estimate is None
    assert crossing.text == "no crossing shown in range 16-512: every point's CI holds 1 (4 points)"
