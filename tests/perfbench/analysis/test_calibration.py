"""perfbench calibrate's simulation, checked where the answer is known: synthetic noise with a known spread, a
planted wrong variance, and the recorded noise of a real A/A job (tests/fixtures/noise, see SOURCES.md).
Nothing here times anything."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from perfbench.analysis import calibration, paired
from perfbench.analysis.calibration import Noise, simulate, variance_check
from perfbench.analysis.sequential import DecisionRule, judge
from perfbench.results.noise_record import read_noise
from perfbench.run.calibrate import simulate_record

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "noise" / "ci_smoke_epyc_busy.json"
EPOCH_SD = 0.02
EPOCHS = 60
EPOCH_S = 2.0


def synthetic(tests: int = 1, seed: int = 3) -> Noise:
    rng = np.random.default_rng(seed)
    est = rng.normal(0.0, EPOCH_SD, (EPOCHS, tests))
    est -= est.mean(axis=0)  # centred: the recording itself carries no shift
    return Noise([f"t{i}" for i in range(tests)], est, np.full((EPOCHS, tests), 5), np.full(EPOCHS, EPOCH_S))


def test_a_shift_of_three_standard_errors_is_detected_in_most_jobs():
    """One test, no margin, a 60 s cap after 10 s of start-up: a job ends with about 25 epochs, so the standard
    error of its estimate is sigma = 0.02 / sqrt(25) = 0.004. A shift of 3 sigma against a final 95% t interval
    (t ~ 2.06) is detected with P(Z > 2.06 - 3) ~ 0.83; the interim looks (99.9%) add a little."""
    noise = synthetic()
    rule = DecisionRule(band=0.05, margin=0.0)
    sigma = EPOCH_SD / math.sqrt((60 - 10) / EPOCH_S)
    jobs = simulate(noise, math.expm1(3 * sigma), 1000, rule, 60.0, 10.0)
    detected = np.mean([j.regressed for j in jobs])
    assert 0.72 <= detected <= 0.95
    slower_half = simulate(noise, math.expm1(0.5 * sigma), 1000, rule, 60.0, 10.0)
    assert np.mean([j.regressed for j in slower_half]) < 0.2  # a near miss: half a sigma is rarely called


def test_a_zero_shift_gives_false_words_at_the_nominal_rate():
    """A/A: one test at 95% two-sided with three looks (Haybittle-Peto) says "slower" or "faster" in about 5% of
    jobs. The count must not be significantly above 5% (one-sided binomial p > 0.001) and not absurdly below."""
    jobs = simulate(synthetic(), 0.0, 2000, DecisionRule(band=0.05, margin=0.0), 60.0, 10.0)
    false = sum(calibration.false_word(j, 0.0) for j in jobs)
    assert stats.binomtest(false, 2000, 0.05, alternative="greater").pvalue > 0.001
    assert false >= 20  # the check can fire: an engine that never says a word would pass the line above


def test_the_variance_check_passes_honest_intervals_and_catches_ones_two_times_too_narrow(monkeypatch):
    noise = synthetic(tests=4)
    honest = variance_check(noise)
    assert honest.honest and 0.7 < honest.mean_t2 < 1.4

    real = paired.interval_over_clusters

    def too_narrow(estimates):  # a planted bug: the standard error halved, so every interval is 2x too narrow
        interval = real(estimates)
        return paired.LogInterval(interval.center, interval.se / 2, interval.df, interval.method)

    monkeypatch.setattr(paired, "interval_over_clusters", too_narrow)
    planted = variance_check(noise)
    assert not planted.honest and planted.mean_t2 > 3


def test_the_table_has_every_shift_and_its_rates_are_shares():
    rows, detectable, check, seconds = simulate_record(read_noise(FIXTURE), jobs=200, cap_s=600.0, startup_s=10.0)
    assert [r.shift for r in rows] == list(calibration.SHIFTS)
    for r in rows:
        assert 0 <= r.false_word <= 1 and 0 <= r.decided <= 1 and 0 <= r.detected <= 1 and r.median_s <= r.p90_s
    assert rows[-1].detected > rows[0].detected  # 10% slower is found more often than nothing
    assert check.values > 0 and detectable.cap_s == 600.0


def _recorded() -> tuple[dict[str, list[float]], dict[str, int]]:
    noise = Noise.of(read_noise(FIXTURE))
    estimates = {t: noise.estimates[:, i].tolist() for i, t in enumerate(noise.tests)}
    return estimates, {t: int(noise.pairs[:, i].sum()) for i, t in enumerate(noise.tests)}


def test_the_recorded_a_a_job_says_no_false_word_at_its_last_look():
    """The fixture is a real A/A job (28 epochs, 8 tests, beside other work): judged as its last look, no test is
    "slower" or "faster", and the words are the ones that job printed (SOURCES.md): "same" for three tests."""
    estimates, pairs = _recorded()
    judged = judge(estimates, pairs, DecisionRule(), tests=len(estimates), final=True)
    words = {t: r.verdict for t, r in judged.ratios.items()}
    assert not judged.regressed and set(words.values()) <= {"same", "inconclusive"}
    assert sorted(t for t, w in words.items() if w == "same") == [
        "b1-i256-o8-ac8dc274/tpot_ms", "b1-i256-o8-d626ea33/tpot_ms", "b1-i256-o8-d626ea33/ttft_ms"]


@pytest.mark.parametrize(("shift", "regressed"), [(0.25, True), (0.0, False)])
def test_a_slowdown_planted_in_the_recorded_epochs_is_a_regression_and_nothing_planted_is_not(shift, regressed):
    """+25% in every test of the recorded epochs (their widest 99.4% interval is about +-11%) must be a regression
    in every test; the same epochs unplanted must not be."""
    estimates, pairs = _recorded()
    moved = {t: [v + math.log1p(shift) for v in values] for t, values in estimates.items()}
    judged = judge(moved, pairs, DecisionRule(), tests=len(moved), final=True)
    assert judged.regressed is regressed
    if regressed:
        assert all(r.verdict == "slower" for r in judged.ratios.values())


def test_the_epoch_design_recovers_the_two_levels_of_synthetic_noise():
    """Pairs spread 0.10 around their epoch's centre, centres 0.03 around 0: the design reads both back (within
    what 80 epochs of 6 pairs allow), and with an epoch costing one round beyond its 6, the cost-optimal pairs per
    epoch is sqrt(1 x 0.1^2 / 0.03^2) ~ 3."""
    from perfbench.analysis.calibration import epoch_design
    from perfbench.results.host_kind import HostKind
    from perfbench.results.noise_record import NoiseEpoch, NoiseRecord

    rng = np.random.default_rng(9)
    epochs = []
    for _ in range(80):
        centre = rng.normal(0, 0.03)
        logs = (centre + rng.normal(0, 0.10, 6)).tolist()
        epochs.append(NoiseEpoch(seconds=7.0, log_ratios={"r/ttft_ms": logs},
                                 estimates={"r/ttft_ms": paired.cluster_estimate(np.asarray(logs))}))
    record = NoiseRecord(scenario="s", host=HostKind(), pairs_per_epoch=6, startup_s=1.0, tests=["r/ttft_ms"],
                         epochs=epochs)
    design = epoch_design(record)
    assert 0.085 < design.pair_sd < 0.115 and 0.01 < design.epoch_sd < 0.05
    assert design.pair_s == pytest.approx(1.0) and design.pairs_best is not None and 1 <= design.pairs_best <= 8
