"""Paired statistics against hand-computed cases: log ratios, the clustered bootstrap, the verdict band, and the
sequential stop of `perfbench ab`."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfbench.analysis import paired
from perfbench.run import ab


def test_log_ratios_pair_aligned_samples_and_drop_broken_pairs():
    logs = paired.log_ratios([10.0, 20.0, float("nan"), 5.0, 0.0], [11.0, 20.0, 3.0, float("inf"), 1.0])
    assert logs == pytest.approx([math.log(1.1), 0.0])
    with pytest.raises(ValueError, match="differ in length"):
        paired.log_ratios([1.0, 2.0], [1.0])


def test_a_constant_ratio_is_its_own_estimate_and_interval():
    # every pair 1.1: the estimate and both bounds are 1.1 whatever is resampled
    ratio = paired.paired_ratio({"p1": ([10.0] * 6, [11.0] * 6), "p2": ([20.0] * 6, [22.0] * 6)}, band=0.03)
    assert (ratio.value, ratio.low, ratio.high) == pytest.approx((1.1, 1.1, 1.1))
    assert (ratio.pairs, ratio.processes, ratio.verdict) == (12, 2, paired.SLOWER)
    assert ratio.speedup() == pytest.approx((1 / 1.1, 1 / 1.1, 1 / 1.1))


def test_processes_that_disagree_span_the_interval():
    # process A: every pair 1.0; process B: every pair 1.2 (five each). Pooled trimmed mean (20% each tail of 10
    # values: two values off each end) = mean of three log(1.0) and three log(1.2) = log(1.2) / 2. A replicate
    # draws {A, A} (log ratio 0), {B, B} (log 1.2) or one of each, each pure draw with probability 1/4, so the
    # 2.5% and 97.5% quantiles are exactly 1.0 and 1.2: the CI spans both processes although each is exact.
    a = ([10.0] * 5, [10.0] * 5)
    b = ([10.0] * 5, [12.0] * 5)
    ratio = paired.paired_ratio({"A": a, "B": b}, band=0.03, n_boot=4000)
    assert ratio.value == pytest.approx(math.sqrt(1.2))
    assert ratio.low == pytest.approx(1.0) and ratio.high == pytest.approx(1.2)
    assert ratio.verdict == paired.INCONCLUSIVE  # the CI touches 1: no call either way
    # ... while pairs read as one process (twenty of each) are a clear slowdown: a resample then rarely holds
    # so many 1.0 pairs that the trimmed mean reaches 1.0
    one = paired.paired_ratio({"A+B": ([10.0] * 40, [10.0] * 20 + [12.0] * 20)}, band=0.03, n_boot=4000)
    assert one.low > 1.0
    split = paired.paired_ratio({"A": ([10.0] * 20, [10.0] * 20), "B": ([10.0] * 20, [12.0] * 20)}, band=0.03)
    assert split.low == pytest.approx(1.0)


def test_host_drift_shared_by_a_pair_cancels():
    # the host's speed swings 2x from block to block; the change is 5% in every block
    drift = np.array([1.0, 2.0, 1.3, 0.7, 1.8, 1.1, 0.9, 1.6])
    ratio = paired.paired_ratio({"p": (list(100 * drift), list(105 * drift))}, band=0.03)
    assert (ratio.value, ratio.low, ratio.high) == pytest.approx((1.05, 1.05, 1.05))


def test_the_trimmed_mean_ignores_a_spike():
    # two of ten pairs hit by a 10x spike on one side: trimmed away (20% of each tail)
    before, after = [10.0] * 10, [10.0] * 8 + [100.0, 100.0]
    assert paired.paired_ratio({"p": (before, after)}, band=0.03).value == pytest.approx(1.0)


@pytest.mark.parametrize(("value", "low", "high", "band", "verdict"), [
    (1.00, 0.99, 1.01, 0.03, paired.SAME),  # the whole CI inside +-3%
    (1.02, 1.01, 1.029, 0.03, paired.SAME),  # significant but small: inside the band is "same"
    (1.05, 1.02, 1.08, 0.03, paired.SLOWER),  # excludes 1, beyond half the band
    (1 / 1.05, 1 / 1.08, 1 / 1.02, 0.03, paired.FASTER),
    (1.01, 1.001, 1.04, 0.03, paired.INCONCLUSIVE),  # excludes 1 but under half the band, CI leaves the band
    (1.05, 0.98, 1.12, 0.03, paired.INCONCLUSIVE),  # includes 1 and leaves the band
])
def test_verdicts_against_the_band(value: float, low: float, high: float, band: float, verdict: str):
    assert paired.decide(value, low, high, band) == verdict


def test_the_band_must_be_positive():
    with pytest.raises(ValueError, match="band must be positive"):
        paired.decide(1.0, 1.0, 1.0, 0.0)


def _pairs(ratio: float, noise: float, generations: int, per: int, seed: int = 0) -> list[ab.Pair]:
    rng = np.random.default_rng(seed)
    out = []
    for g in range(generations):
        for i in range(per):
            base = 50.0 * rng.uniform(0.7, 1.5)  # host speed of this pair
            head = base * ratio * math.exp(rng.normal(0, noise))
            out.append(ab.Pair("r", g, i, bool(i % 2), {"ttft_ms": base, "tpot_ms": base / 10},
                               {"ttft_ms": head, "tpot_ms": head / 10}))
    return out


def test_the_sequential_stop_decides_clear_cases_and_waits_on_noisy_ones():
    slower = ab.verdicts(_pairs(2.0, 0.02, 2, 5), ["r"], threshold=0.03)
    assert ab.decided(slower) and ab.exit_code(slower) == ab.EXIT_FAIL
    same = ab.verdicts(_pairs(1.0, 0.005, 2, 10), ["r"], threshold=0.03)
    assert {r.verdict for r in same["r"].values()} == {paired.SAME} and ab.exit_code(same) == ab.EXIT_PASS
    noisy = ab.verdicts(_pairs(1.0, 0.3, 2, 3), ["r"], threshold=0.03)
    assert not ab.decided(noisy) and ab.exit_code(noisy) == ab.EXIT_INCONCLUSIVE
    faster = ab.verdicts(_pairs(0.5, 0.02, 2, 5), ["r"], threshold=0.03)
    assert ab.decided(faster) and ab.exit_code(faster) == ab.EXIT_PASS
    assert ab.exit_code({}) == ab.EXIT_INCONCLUSIVE  # nothing measured decides nothing
    # one worker generation cannot show the variation between processes: even a clear 2x decides nothing yet
    one = ab.verdicts(_pairs(2.0, 0.02, 1, 10), ["r"], threshold=0.03)
    assert {r.verdict for r in one["r"].values()} == {paired.INCONCLUSIVE} and not ab.decided(one)


def test_clusters_are_the_worker_generations():
    pairs = _pairs(1.0, 0.01, 3, 4)
    got = ab.clusters(pairs, "r", "ttft_ms")
    assert sorted(got) == [0, 1, 2] and all(len(xs) == len(ys) == 4 for xs, ys in got.values())
    assert ab.clusters(pairs, "other run", "ttft_ms") == {}
