"""Interleaved rounds (seeded order, ids, merging) and speed-ups paired by round, by hand-computed values."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from perfbench.analysis import noise_band
from perfbench.analysis.compare import match_runs
from perfbench.analysis.rounds import merge_rounds
from perfbench.analysis.speedup import FASTER, INCONCLUSIVE, host_speed_reasons, speedup
from perfbench.results import RunPlan, RunResult, RunSpec
from tests.records_kit import run_result


def _result(combo: str, rnd: int, rounds: int, ttft: list[float], tpot: list[float],
            stable: bool | None = True) -> RunResult:
    rid = f"{combo}-r{rnd}" if rounds > 1 else combo
    spec = RunSpec(run_id=rid, scenario="s", round=rnd, rounds=rounds, combination=combo if rounds > 1 else "")
    return run_result(rid, spec=spec, samples={"ttft_ms": ttft, "tpot_ms": tpot},
                      summary={"ttft_ms_median": sorted(ttft)[len(ttft) // 2],
                               "tpot_ms_median": sorted(tpot)[len(tpot) // 2]},
                      stability={} if stable is None else {"stable": stable, "reason": "" if stable else "noisy"})


def test_merged_rounds_pool_samples_and_keep_round_medians():
    merged = merge_rounds([_result("a", 1, 2, [10.0, 12.0, 11.0], [2.0, 2.0, 2.0]),
                           _result("a", 2, 2, [20.0, 22.0, 21.0], [3.0, 3.0, 3.0])])
    (a,) = merged
    assert a.run_id == "a" and a.spec.rounds == 2
    assert a.samples["round_ttft_ms"] == [11.0, 21.0] and a.samples["round_tpot_ms"] == [2.0, 3.0]
    assert sorted(a.samples["ttft_ms"]) == [10.0, 11.0, 12.0, 20.0, 21.0, 22.0]
    assert a.summary.ttft_ms_median == pytest.approx(16.0)  # median of the pooled six
    unstable = merge_rounds([_result("a", 1, 2, [1.0] * 3, [1.0] * 3),
                             _result("a", 2, 2, [1.0] * 3, [1.0] * 3, stable=False)])
    assert unstable[0].stability.to_dict() == {"stable": False, "reason": "round 2: noisy"}


def test_speedup_pairs_each_round_with_its_baseline():
    # per-round ratios baseline/plan: 20/10 = 2.0, 30/12 = 2.5, 22/11 = 2.0
    base = [_result("base", k, 3, [t] * 3, [t] * 3) for k, t in ((1, 20.0), (2, 30.0), (3, 22.0))]
    plan = [_result("plan", k, 3, [t] * 3, [t] * 3) for k, t in ((1, 10.0), (2, 12.0), (3, 11.0))]
    got = speedup(base, plan, "tpot_ms")
    logs = [math.log(2.0), math.log(2.5), math.log(2.0)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = scipy_stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert got is not None and got.basis == "rounds" and got.n == 3
    assert got.value == pytest.approx(math.exp(mean))
    assert (got.low, got.high) == (pytest.approx(math.exp(mean - half)), pytest.approx(math.exp(mean + half)))
    assert got.verdict == FASTER
    plan[1] = _result("plan", 2, 3, [12.0] * 3, [12.0] * 3, stable=False)
    unstable = speedup(base, plan, "tpot_ms")
    assert unstable.verdict == INCONCLUSIVE and "unstable" in unstable.reason


def test_a_round_timed_at_another_host_speed_makes_the_speedup_unstable():
    base = [_result("base", k, 3, [t] * 3, [t] * 3) for k, t in ((1, 20.0), (2, 30.0), (3, 22.0))]
    plan = [_result("plan", k, 3, [t] * 3, [t] * 3) for k, t in ((1, 10.0), (2, 12.0), (3, 11.0))]
    for run in base + plan:
        run.samples["host_probe_ms"] = [0.32] * 3
    assert speedup(base, plan, "tpot_ms").verdict == FASTER
    plan[2].samples["host_probe_ms"] = [0.42] * 3  # round 3's plan ran while the host was 31% slower
    other_speed = speedup(base, plan, "tpot_ms")
    assert other_speed.verdict == INCONCLUSIVE and "another speed" in other_speed.reason
    assert host_speed_reasons(base, plan) == ["round 3: the host ran at another speed: its probe took 0.42 ms for "
                                              "this plan vs 0.32 ms for the baseline (1.31x, tolerance 15%)"]


def test_two_rounds_take_the_ci_from_a_two_stage_bootstrap():
    # Two rounds: a t interval would have one degree of freedom. Steady iterations: every resample of a round
    # gives that round's ratio (20/10, 30/12), so the replicates are the means of two rounds drawn with
    # replacement: 2.0 (a quarter), sqrt(2 * 2.5) (half), 2.5 (a quarter); the 95% CI is the two ratios.
    base = [_result("base", k, 2, [t] * 4, [t] * 4) for k, t in ((1, 20.0), (2, 30.0))]
    plan = [_result("plan", k, 2, [t] * 4, [t] * 4) for k, t in ((1, 10.0), (2, 12.0))]
    got = speedup(base, plan, "tpot_ms")
    assert got.basis == "rounds and iterations" and got.n == 8
    assert got.value == pytest.approx(math.sqrt(2.0 * 2.5))
    assert (got.low, got.high) == (pytest.approx(2.0), pytest.approx(2.5))
    assert got.verdict == FASTER
    # Noisy iterations: a resampled median stays within its round's range, so the CI lies within the most
    # extreme ratio any one round allows, and it holds the point.
    base = [_result("base", 1, 2, [19.0, 20.0, 21.0, 22.0], [1.0] * 4),
            _result("base", 2, 2, [29.0, 30.0, 31.0, 33.0], [1.0] * 4)]
    plan = [_result("plan", 1, 2, [9.0, 10.0, 11.0, 10.5], [1.0] * 4),
            _result("plan", 2, 2, [11.0, 12.0, 13.0, 12.5], [1.0] * 4)]
    got = speedup(base, plan, "ttft_ms")
    assert min(19.0 / 11.0, 29.0 / 13.0) <= got.low < got.value < got.high <= max(22.0 / 9.0, 33.0 / 11.0)
    ratios = (20.5 / 10.25, 30.5 / 12.25)  # the rounds' ratios of medians
    half = scipy_stats.t.ppf(0.975, 1) * abs(math.log(ratios[0] / ratios[1])) / 2
    t_low, t_high = math.exp(math.log(got.value) - half), math.exp(math.log(got.value) + half)
    assert got.high - got.low < (t_high - t_low) / 4  # the rounds' t interval would be useless
    # a 7% speed-up whose interval clears the 1% margin is "faster", inside the 5% band or not (one word each);
    # an interval that straddles 1 is "inconclusive", never "same"
    close = [_result("plan", k, 2, [t] * 4, [t] * 4) for k, t in ((1, 19.0), (2, 28.5))]
    assert speedup(base, close, "ttft_ms").verdict == FASTER
    straddles = [_result("plan", 1, 2, [20.0] * 4, [1.0] * 4), _result("plan", 2, 2, [35.0] * 4, [1.0] * 4)]
    assert speedup(base, straddles, "ttft_ms").verdict == INCONCLUSIVE


def test_one_round_calls_only_a_change_beyond_the_run_to_run_band():
    """One process per side: the iteration interval cannot see the spread between processes, so a 5% change
    whose interval clears the 1% margin is "inconclusive", saying why; 2x is called."""
    base = [_result("base", 1, 1, [100.0, 101.0, 99.0, 100.5, 99.5] * 4, [10.0] * 5)]
    plan = [_result("plan", 1, 1, [95.0, 96.0, 94.0, 95.5, 94.5] * 4, [10.0] * 5)]
    got = speedup(base, plan, "ttft_ms")
    assert got.basis == "iterations" and got.low > 1.01  # the iteration CI alone would call it faster
    assert got.verdict == INCONCLUSIVE and "one round" in got.reason
    twice = [_result("plan", 1, 1, [50.0, 50.5, 49.5, 50.2, 49.8] * 4, [10.0] * 5)]
    assert speedup(base, twice, "ttft_ms").verdict == FASTER


def test_compare_tests_round_medians_and_the_band_with_one_round():
    # four rounds a side: 1 / C(8, 4) = 1/70 one-sided, so the round medians can reach p < 0.05 two-sided
    a = [_result("x", k, 4, [100.0 + k] * 5, [10.0] * 5) for k in (1, 2, 3, 4)]
    b = [_result("x", k, 4, [150.0 + k] * 5, [10.0] * 5) for k in (1, 2, 3, 4)]
    (match,), _, _ = match_runs(a, b)
    ttft = next(c for c in match.changes() if c.metric == "ttft_ms_median")
    assert ttft.basis == "rounds" and match.a.run_id == "x" and ttft.significant
    # two rounds a side can never reach it (2 vs 2: p >= 1/3 two-sided): the pooled iterations are tested
    # against the band, so a 15 % slowdown is still found and a 5 % change is not
    spread = [100.0, 101.0, 99.0, 100.5, 99.5]
    two_a = [_result("z", k, 2, [v + k for v in spread], [10.0] * 5) for k in (1, 2)]
    for factor, found in ((1.15, True), (1.05, False)):
        two_b = [_result("z", k, 2, [(v + k) * factor for v in spread], [10.0] * 5) for k in (1, 2)]
        (match,), _, _ = match_runs(two_a, two_b)
        ttft = next(c for c in match.changes() if c.metric == "ttft_ms_median")
        assert ttft.basis == "iterations" and ttft.significant is found
    # one round each, 5 % apart with tight samples: significant by iterations, but inside the band
    one_a = [_result("y", 1, 1, [100.0, 100.2, 99.8, 100.1, 99.9] * 3, [10.0] * 5)]
    one_b = [_result("y", 1, 1, [105.0, 105.2, 104.8, 105.1, 104.9] * 3, [10.0] * 5)]
    (match,), _, _ = match_runs(one_a, one_b)
    ttft = next(c for c in match.changes() if c.metric == "ttft_ms_median")
    assert ttft.basis == "iterations" and ttft.in_band and not ttft.significant
    assert next(c for c in match.changes({"ttft_ms_median": 0.01}) if c.metric == "ttft_ms_median").significant


def test_compare_decides_nothing_on_unstable_data():
    # four rounds a side, 1.5x slower: significant when both sides are stable (above); one unstable round in B
    # makes B's merged verdict unstable, and the same change is then reported but not called significant
    a = [_result("x", k, 4, [100.0 + k] * 5, [10.0] * 5) for k in (1, 2, 3, 4)]
    b = [_result("x", k, 4, [150.0 + k] * 5, [10.0] * 5, stable=k != 3) for k in (1, 2, 3, 4)]
    (match,), _, _ = match_runs(a, b)
    ttft = next(c for c in match.changes() if c.metric == "ttft_ms_median")
    assert ttft.ratio == pytest.approx(152.5 / 102.5) and not ttft.significant
    assert "unstable" in ttft.undecided and "round 3: noisy" in ttft.undecided
    assert ttft.word == INCONCLUSIVE and ttft.verdict.endswith("inconclusive")


def test_band_parsing_names_what_is_wrong():
    assert noise_band.parse_band("tpot_ms_median=0.05") == ("tpot_ms_median", 0.05)
    for bad, why in (("tpot=0.1", "METRIC=FRACTION"), ("tpot_ms_median=x", "not a number"),
                     ("tpot_ms_median=2", r"in \[0, 1\)")):
        with pytest.raises(ValueError, match=why):
            noise_band.parse_band(bad)


def test_ablation_effects_pair_rounds():
    from perfbench.analysis.attribution import designs, marginal_effects

    def run(combo: str, on: dict[str, bool], k: int, tpot: float) -> RunResult:
        r = _result(combo, k, 3, [1.0] * 3, [tpot] * 3)
        r.spec.toggles = on
        r.plan = RunPlan.from_dict({"chunk_gdr": {"requested": bool(on), "state": "on" if on else "off"}})
        return r

    # per-round speed-ups of chunk_gdr: 20/10 = 2.0, 30/12 = 2.5, 22/11 = 2.0 (round 2 was slow for both)
    results = [run("base", {}, k, t) for k, t in ((1, 20.0), (2, 30.0), (3, 22.0))]
    results += [run("gdr", {"chunk_gdr": True}, k, t) for k, t in ((1, 10.0), (2, 12.0), (3, 11.0))]
    (design,) = designs(results, "tpot_ms_median")
    (effect,) = marginal_effects(design)
    expected = speedup([r for r in results if r.run_id.startswith("base")],
                       [r for r in results if r.run_id.startswith("gdr")], "tpot_ms")
    assert (effect.ci_low, effect.ci_high) == (pytest.approx(expected.low), pytest.approx(expected.high))
