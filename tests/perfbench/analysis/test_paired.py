"""The paired decision rule against hand-computed cases (log ratios, cluster estimates, the t and Yuen intervals,
the verdicts, Holm, the clusters still needed), and seeded simulations of each rule's false-call rate and power
under the variance-components model d = delta + u_cluster + e_pair (no timing: synthetic pairs only)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from scipy.stats import mstats

from perfbench.analysis import paired


def test_log_ratios_pair_aligned_samples_and_drop_broken_pairs():
    logs = paired.log_ratios([10.0, 20.0, float("nan"), 5.0, 0.0], [11.0, 20.0, 3.0, float("inf"), 1.0])
    assert logs == pytest.approx([math.log(1.1), 0.0])
    with pytest.raises(ValueError, match="differ in length"):
        paired.log_ratios([1.0, 2.0], [1.0])


def test_a_cluster_estimate_is_the_trimmed_mean_from_five_pairs_and_the_mean_below():
    # 4 pairs: plain mean; 10 pairs: 20% of each tail (2 values) trimmed, so a 10x spike on two pairs is ignored
    assert paired.cluster_estimate(np.array([0.0, 0.0, 0.0, 0.4])) == pytest.approx(0.1)
    assert paired.cluster_estimate(np.log([1.0] * 8 + [10.0, 10.0])) == pytest.approx(0.0)


def test_a_constant_ratio_is_its_own_estimate_and_interval():
    # every pair 1.1 in both clusters: zero spread, so the interval is the point and the verdict is slower
    ratio = paired.paired_ratio({"e1": ([10.0] * 6, [11.0] * 6), "e2": ([20.0] * 6, [22.0] * 6)}, band=0.05)
    assert (ratio.value, ratio.low, ratio.high) == pytest.approx((1.1, 1.1, 1.1))
    assert (ratio.pairs, ratio.clusters, ratio.method, ratio.verdict) == (12, 2, "t", paired.SLOWER)
    assert ratio.speedup() == pytest.approx((1 / 1.1, 1 / 1.1, 1 / 1.1))


def test_two_clusters_that_disagree_get_the_t_interval_with_one_degree_of_freedom():
    # cluster A: every pair 1.0; B: every pair 1.2. Estimates 0 and L = log 1.2; centre L/2; sd = L/sqrt(2);
    # se = sd/sqrt(2) = L/2; t(0.975, 1) = 12.7062. The interval is exp(L/2 -+ 12.7062 * L/2): far wider than
    # the [1.0, 1.2] that a percentile bootstrap over the two clusters reported.
    big = math.log(1.2)
    ratio = paired.paired_ratio({"A": ([10.0] * 5, [10.0] * 5), "B": ([10.0] * 5, [12.0] * 5)}, band=0.05)
    assert ratio.value == pytest.approx(math.sqrt(1.2))
    assert ratio.low == pytest.approx(math.exp(big / 2 - 12.7062 * big / 2), rel=1e-4)
    assert ratio.high == pytest.approx(math.exp(big / 2 + 12.7062 * big / 2), rel=1e-4)
    assert ratio.verdict == paired.INCONCLUSIVE


def test_one_cluster_decides_nothing():
    # a 2x change in every pair of one process: its pairs' interval is shown, but one cluster cannot show how far
    # another would differ, so no verdict and no weight in Holm's correction
    ratio = paired.paired_ratio({"only": ([10.0] * 8, [20.0] * 8)}, band=0.05)
    assert ratio.verdict == paired.INCONCLUSIVE and ratio.method == "pairs of one cluster"
    assert (ratio.low, ratio.high) == pytest.approx((2.0, 2.0)) and ratio.p_slower == 1.0
    lone = paired.paired_ratio({"a": ([10.0], [20.0]), "b": ([], [])}, band=0.05)
    assert lone is None  # one pair in all
    single = paired.paired_ratio({"a": ([10.0], [20.0]), "b": ([10.0], [20.0])}, band=0.05)
    assert single.clusters == 2 and single.verdict == paired.SLOWER


def test_yuen_interval_from_ten_clusters_ignores_one_bad_cluster():
    # estimates 0.00 .. 0.08 and one cluster at 1.0; g = floor(0.2 * 10) = 2 per tail.
    # trimmed mean = mean(0.02 .. 0.07) = 0.045; the 2-winsorized sample is 0.02 x3, 0.03 .. 0.06, 0.07 x3 with
    # sum of squared deviations 0.00425, so s_w = sqrt(0.00425 / 9) = 0.021731; se = s_w / (0.6 sqrt(10))
    # = 0.011453; df = 10 - 4 - 1 = 5.
    estimates = [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 1.0]
    interval = paired.interval_over_clusters(estimates)
    assert (interval.method, interval.df) == ("yuen", 5)
    assert interval.center == pytest.approx(0.045)
    assert interval.se == pytest.approx(0.011453, rel=1e-4)
    # scipy's standard error of the trimmed mean (winsorized variance) agrees
    assert interval.se == pytest.approx(float(mstats.trimmed_stde(np.array(estimates), limits=(0.2, 0.2))))
    low, high = interval.bounds(0.95)
    assert (low, high) == pytest.approx((0.045 - 2.5706 * 0.011453, 0.045 + 2.5706 * 0.011453), rel=1e-3)
    # below ten clusters the plain t: the outlier widens it
    small = paired.interval_over_clusters(estimates[1:])
    assert small.method == "t" and small.df == 8
    assert small.se == pytest.approx(float(np.std(estimates[1:], ddof=1)) / 3.0)


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (0.99, 1.01, paired.SAME),  # the whole interval inside +-5%
    (1.02, 1.049, paired.SLOWER),  # inside the band but clear of the margin: a measured change of 2-5%
    (0.995, 1.049, paired.SAME),  # inside the band, not clear of the margin
    (1.02, 1.08, paired.SLOWER),  # above the 1% margin
    (1 / 1.08, 1 / 1.02, paired.FASTER),
    (1.005, 1.06, paired.INCONCLUSIVE),  # excludes 1, but not the margin, and leaves the band
    (0.98, 1.12, paired.INCONCLUSIVE),
])
def test_verdicts_against_band_and_margin(low: float, high: float, verdict: str):
    assert paired.decide(low, high, band=0.05, margin=0.01) == verdict


def test_band_and_margin_are_checked():
    with pytest.raises(ValueError, match="band must be positive"):
        paired.decide(1.0, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="margin"):
        paired.decide(1.0, 1.0, 0.05, 0.05)


def test_only_slower_verdicts_that_survive_holm_are_regressions():
    def ratio(verdict: str, p: float) -> paired.PairedRatio:
        return paired.PairedRatio(1.1, 1.02, 1.2, 40, 5, 0.05, 0.01, 0.95, "t", verdict, p)

    # p .001 x4 = .004 < .025 survives; p .02 x3 = .06 does not, although its own interval said slower
    found = [ratio(paired.SLOWER, 0.001), ratio(paired.SLOWER, 0.02), ratio(paired.SAME, 0.5),
             ratio(paired.FASTER, 0.9)]
    assert paired.regressions(found) == [True, False, False, False]


def test_p_slower_is_the_one_sided_t_test_against_the_margin():
    # estimates 0.05, 0.07, 0.09: mean 0.07, sd 0.02, se 0.02/sqrt(3); H0: centre <= log(1.01)
    est = [0.05, 0.07, 0.09]
    interval = paired.interval_over_clusters(est)
    t_stat = (0.07 - math.log(1.01)) / (0.02 / math.sqrt(3))
    assert interval.p_above(math.log(1.01)) == pytest.approx(scipy_stats.t.sf(t_stat, 2))


def test_clusters_needed_by_hand():
    # centre 0, between-cluster sd 0.05 from 3 clusters, band 5%: room log(1.05) = 0.04879. t(5) 2.5706 x 0.05 /
    # sqrt(6) = 0.0525 is not enough; t(6) 2.4469 x 0.05 / sqrt(7) = 0.0462 is: 7 clusters.
    interval = paired.LogInterval(0.0, 0.05 / math.sqrt(3), 2, "t")
    assert paired.clusters_needed(interval, 3, band=0.05, margin=0.01, level=0.95) == 7
    # a centre right at the band edge with the margin beyond reach: no number of clusters would decide
    edge = paired.LogInterval(math.log(1.05), 0.01, 2, "t")
    assert paired.clusters_needed(edge, 3, band=0.05, margin=0.05 - 1e-12, level=0.95) is None


def test_an_undecided_ratio_says_what_it_needs():
    rng = np.random.default_rng(3)
    clusters = {g: (list(np.full(6, 10.0)), list(10.0 * np.exp(rng.normal(0.0, 0.05, 6) + rng.normal(0, 0.04))))
                for g in range(3)}
    ratio = paired.paired_ratio(clusters, band=0.05)
    assert ratio.verdict == paired.INCONCLUSIVE
    assert ratio.clusters_needed is not None and ratio.clusters_needed > 3


def test_look_levels_follow_haybittle_peto():
    assert paired.look_level(final=False) == 0.999
    assert paired.look_level(final=True) == 0.95


# ---- simulations: the rules' error rates under the variance-components model ----------------------------------

def _job(rng: np.random.Generator, delta: float, tau: float, s: float, clusters: int, per: int,
         looks: tuple[int, ...]) -> paired.PairedRatio:
    """One simulated job: clusters of `per` pairs with t5-tailed pair noise of SD `s` and a cluster effect of SD
    `tau`; decided at each planned look (Haybittle-Peto levels), stopping at the first decided look."""
    scale = s / math.sqrt(5 / 3)  # a t5 variable has variance 5/3
    logs = [delta + rng.normal(0, tau) + scale * rng.standard_t(5, per) for _ in range(clusters)]
    data = {g: (np.ones(per), np.exp(x)) for g, x in enumerate(logs)}
    for look in looks:
        final = look == looks[-1]
        found = paired.paired_ratio({g: data[g] for g in range(look)}, level=paired.look_level(final))
        assert found is not None
        if found.verdict != paired.INCONCLUSIVE or final:
            return found
    raise AssertionError("unreachable")


def test_simulated_aa_jobs_rarely_call_a_change():
    """A/A at tau = 0.02 (between epochs), s = 0.12, 15 epochs of 8 pairs, looks at 5, 10, 15: a false "slower" or
    "faster" per metric must stay under the 2.5% per side that the intervals promise. 2000 seeded jobs: the
    bound 0.05 + 3 binomial SDs (0.0146) over both sides leaves room for simulation error only; the
    simulated rate is far below it because the 1% margin is beyond what noise alone reaches."""
    rng = np.random.default_rng(20261202)
    calls = [_job(rng, 0.0, 0.02, 0.12, 15, 8, (5, 10, 15)).verdict for _ in range(2000)]
    false = sum(v in (paired.SLOWER, paired.FASTER) for v in calls) / len(calls)
    same = sum(v == paired.SAME for v in calls) / len(calls)
    assert false < 0.05 + 3 * math.sqrt(0.05 * 0.95 / 2000)
    assert same > 0.85  # hw ~2.6% at this design (measurement_design 4.2): "same" within +-5% nearly always


def test_simulated_aa_jobs_with_unequal_process_effects_stay_honest_with_few_clusters():
    """Few, noisy clusters (tau = 0.10 as two worker processes showed, 4 clusters): the t interval must keep the
    false-call rate near its nominal 5% (two sides), where the bootstrap over clusters called ~31%."""
    rng = np.random.default_rng(7)
    calls = [_job(rng, 0.0, 0.10, 0.12, 4, 8, (4,)).verdict for _ in range(3000)]
    false = sum(v in (paired.SLOWER, paired.FASTER) for v in calls) / len(calls)
    assert false < 0.05 + 3 * math.sqrt(0.05 * 0.95 / 3000)


def test_holm_keeps_a_job_of_eight_tests_from_false_regressions():
    """Eight A/A (run, metric) tests per job (ci_smoke: 4 runs x 2 metrics): the job-level false "regression"
    rate with Holm must stay under the one-sided 2.5% (plus 3 binomial SDs for 1000 simulated jobs)."""
    rng = np.random.default_rng(11)
    jobs = 0
    for _ in range(1000):
        found = [_job(rng, 0.0, 0.02, 0.12, 6, 8, (6,)) for _ in range(8)]
        jobs += any(paired.regressions(found))
    assert jobs / 1000 < 0.025 + 3 * math.sqrt(0.025 * 0.975 / 1000)


def test_simulated_plants_are_found():
    """Power at the recommended design (tau 0.02, s 0.12, 15 epochs of 8 pairs, 3 looks): a 15% slowdown is
    "slower" in all but a handful of 500 jobs, a 5% one in most (model: 0.85 at s = 0.12)."""
    rng = np.random.default_rng(5)
    big = [_job(rng, math.log(1.15), 0.02, 0.12, 15, 8, (5, 10, 15)).verdict for _ in range(500)]
    small = [_job(rng, math.log(1.05), 0.02, 0.12, 15, 8, (5, 10, 15)).verdict for _ in range(500)]
    assert sum(v == paired.SLOWER for v in big) >= 495
    assert sum(v == paired.SLOWER for v in small) >= 0.75 * 500


@pytest.mark.parametrize("size", [5, 8, 10, 13, 40])
def test_the_trimmed_mean_is_scipys(size: int):
    x = np.random.default_rng(size).standard_t(3, size)
    assert paired.trimmed_mean(x) == pytest.approx(float(scipy_stats.trim_mean(x, 0.2)))


def test_ratio_of_intervals_by_hand():
    # first 1.0 [exp(-0.1), exp(0.1)] over 5 clusters, second exp(0.3) [exp(0.2), exp(0.4)] over 5: each se =
    # 0.1 / t(0.975, 4) = 0.1 / 2.7764 = 0.036018; the difference 0.3 has se 0.050937 with Welch df 8
    # (equal parts: (2 se^2)^2 / (2 se^4 / 4) = 8); t = 5.8896, one-sided p = t.sf(5.8896, 8)
    first = (1.0, math.exp(-0.1), math.exp(0.1), 5)
    second = (math.exp(0.3), math.exp(0.2), math.exp(0.4), 5)
    ratio, p = paired.ratio_of_intervals(first, second)
    assert ratio == pytest.approx(math.exp(0.3))
    assert p == pytest.approx(float(scipy_stats.t.sf(0.3 / (math.sqrt(2) * 0.1 / 2.7764), 8)), rel=1e-3)
    # one cluster on a side: no spread known, never significant
    assert paired.ratio_of_intervals((1.0, 0.9, 1.1, 1), second)[1] == 1.0


def test_an_interval_beyond_the_largest_float_is_unbounded_not_an_error():
    # two clusters 1000x apart judged at 99.9% (t(0.9995, 1) = 636.6): the upper bound is e^(~2200)
    ratio = paired.paired_ratio({"a": ([1.0] * 3, [1.0] * 3), "b": ([1.0] * 3, [1000.0] * 3)}, level=0.999)
    assert ratio.high == math.inf and ratio.low == 0.0 and ratio.verdict == paired.INCONCLUSIVE
    assert ratio.speedup()[1] == 0.0 and ratio.speedup()[2] == math.inf


def _false_word_jobs(rng: np.random.Generator, level: float, jobs: int = 1000, tests: int = 8) -> float:
    """Share of simulated A/A jobs of `tests` (run, metric) tests with at least one "slower" or "faster" word, each
    test 6 clusters of 6 pairs (cluster SD 0.03, pair SD 0.1), judged with no margin (any interval that misses 1
    is a word), so a word is false exactly when its interval misses the truth."""
    bad = 0
    for _ in range(jobs):
        words = []
        for _ in range(tests):
            data = {g: (np.ones(6), np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.1, 6))) for g in range(6)}
            found = paired.paired_ratio(data, band=0.05, margin=0.0, level=level)
            assert found is not None
            words.append(found.verdict)
        bad += any(w in (paired.SLOWER, paired.FASTER) for w in words)
    return bad / jobs


def test_a_jobs_words_hold_jointly_at_the_family_level():
    """8 tests judged at `family_level(8)` (99.375% each): a false word in at most 5% of jobs (+3 binomial SDs
    for 1000 simulated jobs); the near miss, each judged at 95% alone, prints one in about 1 - 0.95^8 = 34% of
    jobs, which the same bound would catch."""
    assert paired.family_level(8) == pytest.approx(1 - 0.05 / 8)
    assert paired.family_level(1) == pytest.approx(0.95)
    rng = np.random.default_rng(46)
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)
    assert _false_word_jobs(rng, paired.family_level(8)) < bound
    assert _false_word_jobs(rng, 0.95) > 0.2
