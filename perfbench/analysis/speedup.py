"""Speed-up of a combination over the baseline, with its CI and a verdict a reader can act on.

Runs timed in interleaved blocks (perfbench/measure/blocks.py) are compared on their pairs: each block's baseline
iteration against the combination's iteration of the same block, a re-allocation epoch of a process the cluster
(perfbench/analysis/paired.py: a t interval over clusters, the band and margin of its verdicts). The verdict
is one of the four words of perfbench/results/verdicts.py, on the paired interval. Per-run stability verdicts do not
enter: host drift between blocks cancels in a pair, and what does not cancel widens the CI.

Runs timed separately (older folders, accelerators, torchrun) are compared by rounds instead. With
interleaved rounds the baseline and the combination are paired by round (measured in the same round, minutes
apart): the speed-up is the geometric mean of the per-round ratios of medians. With `MIN_T_ROUNDS` or
more rounds its CI is a Student-t interval on their logarithms (the round is the unit). With two rounds that
interval has one degree of freedom (t = 12.7) and spans orders of magnitude, so the CI comes from a
two-stage bootstrap instead: draw the rounds with replacement, then resample each drawn round's iterations
within the round (baseline and combination of a round stay paired). It spans at least the two rounds' ratios
when they disagree. With one round it is the ratio of medians with a bootstrap CI over iterations, which calls
only a change beyond the run-to-run band (never "same").

The verdict is one of the four words (perfbench/results/verdicts.py), judged on the speed-up's interval with the
paired rule's band and margin, whatever the basis. An interval that straddles 1 is "inconclusive", never
"same": on an accelerator a toggle measured with too few rounds says how little it could see. A basis that
cannot see the spread between processes (one round: iterations of one process each) decides nothing, and
neither does a run judged unstable or a round whose two sides ran while the host ran at different speeds
(perfbench/analysis/stability.py `host_speed_differs`): those are "inconclusive" with the reason in
`Speedup.reason`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfbench.analysis import noise_band, paired, stats
from perfbench.analysis.rounds import by_combination, merge_rounds
from perfbench.analysis.stability import host_speed_differs
from perfbench.analysis.stats import CI_LEVEL
from perfbench.config.labels import short_plan_label
from perfbench.results import RunResult, WorkloadShape
from perfbench.results.verdicts import (
    DEFAULT_BAND,
    DEFAULT_MARGIN,
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    Verdict,
    decide_speedup,
)

__all__ = ["FASTER", "INCONCLUSIVE", "SAME", "SLOWER"]
LATENCIES = ("ttft_ms", "tpot_ms")
SUMMARY_KEY = {"ttft_ms": "ttft_ms_median", "tpot_ms": "tpot_ms_median"}
MIN_T_ROUNDS = 3  # paired rounds for a Student-t CI on the rounds; two: a two-stage bootstrap


@dataclass(frozen=True)
class Speedup:
    """baseline / combination of a latency: > 1 is faster. low/high: the CI; basis: what the CI resamples:
    "blocks" (within-block pairs, processes as clusters), "rounds" (t interval), "rounds and iterations" (two
    rounds, two-stage bootstrap) or "iterations"."""

    value: float
    low: float
    high: float
    basis: str
    verdict: Verdict
    n: int  # pairs ("blocks"), rounds ("rounds"), else iterations
    clusters: int = 0  # "blocks": the clusters (re-allocation epochs of the processes) the pairs came from
    reason: str = ""  # why an interval that might decide does not (an unstable run, one round)

    def text(self) -> str:
        return f"{self.value:.2f}x [{self.low:.2f}, {self.high:.2f}] {self.verdict}"

    def ci_text(self) -> str:
        return f"{self.value:.3f}x [{self.low:.3f}, {self.high:.3f}]"


def block_clusters(base_runs: list[RunResult], runs: list[RunResult], key: str
                   ) -> dict[str, tuple[list[float], list[float]]]:
    """cluster -> (baseline samples, combination samples) of the blocks both timed in it, aligned; {} when the
    runs were not timed in blocks together. A cluster is a re-allocation epoch of a process (older records
    without epochs: the process)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for b in base_runs:
        for r in runs:
            if b.status != "ok" or r.status != "ok" or not b.blocks or not r.blocks:
                continue
            if (b.blocks.process, b.blocks.group) != (r.blocks.process, r.blocks.group):
                continue
            xs = dict(zip(b.blocks.index, b.samples.get(key, [])))
            ys = dict(zip(r.blocks.index, r.samples.get(key, [])))
            epoch_of = dict(zip(b.blocks.index, b.blocks.epoch)) if b.blocks.epoch else {}
            for i in sorted(set(xs) & set(ys)):
                before, after = out.setdefault(f"{b.blocks.process}/{epoch_of.get(i, 0)}", ([], []))
                before.append(xs[i])
                after.append(ys[i])
    return out


def paired_speedup(base_runs: list[RunResult], runs: list[RunResult], key: str,
                   band: float = paired.DEFAULT_BAND) -> Speedup | None:
    """baseline / combination from within-block pairs; None when there are no pairs."""
    clusters = block_clusters(base_runs, runs, key)
    ratio = paired.paired_ratio(clusters, band) if clusters else None
    if ratio is None:
        return None
    value, low, high = ratio.speedup()
    return Speedup(value, low, high, "blocks", ratio.verdict, ratio.pairs, ratio.clusters)


def paired_ratio_ci(ratios: list[float], level: float = CI_LEVEL) -> tuple[float, float, float]:
    """Per-round ratios (two or more) by the paired rule's interval over clusters (perfbench/analysis/paired.py
    `interval_over_clusters`: Student t on their logarithms, Yuen's trimmed t from 10 rounds): the round is the
    cluster, as the epoch is for pairs."""
    interval = paired.interval_over_clusters(np.log(ratios))
    low, high = interval.bounds(level)
    return math.exp(interval.center), math.exp(low), math.exp(high)


def two_stage_ratio_ci(pairs: list[tuple[list[float], list[float]]], level: float = CI_LEVEL,
                        n_boot: int = stats.N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """Geometric mean over rounds of median(xs) / median(ys), with a two-stage percentile-bootstrap CI: each
    replicate draws the rounds with replacement, then resamples each drawn round's xs and ys within that
    round. Rounds that disagree widen the CI (the variation between processes shows), and so do noisy
    iterations. Deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    per_round = np.empty((len(pairs), n_boot))  # each round's resampled log ratio, per replicate
    point = 0.0
    for i, (xs, ys) in enumerate(pairs):
        x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        point += math.log(float(np.median(x)) / float(np.median(y)))
        bx = np.median(rng.choice(x, size=(n_boot, x.size)), axis=1)
        by = np.median(rng.choice(y, size=(n_boot, y.size)), axis=1)
        per_round[i] = np.log(bx / by)
    drawn = rng.integers(0, len(pairs), size=(n_boot, len(pairs)))
    boot = per_round[drawn, np.arange(n_boot)[:, None]].mean(axis=1)
    low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return math.exp(point / len(pairs)), math.exp(float(low)), math.exp(float(high))


def _paired_runs(base_rounds: list[RunResult], rounds: list[RunResult]) -> list[tuple[RunResult, RunResult]]:
    """(baseline, combination) of every round both measured."""
    by_round = {r.spec.round: r for r in base_rounds if r.status == "ok"}
    return [(by_round[r.spec.round], r) for r in rounds if r.status == "ok" and r.spec.round in by_round]


def _round_pairs(base_rounds: list[RunResult], rounds: list[RunResult], key: str
                 ) -> list[tuple[list[float], list[float]]]:
    """(baseline samples, combination samples) of every round both measured."""
    pairs = []
    for b, r in _paired_runs(base_rounds, rounds):
        xs, ys = b.finite_samples(key), r.finite_samples(key)
        if xs and ys and stats.median(ys) > 0:
            pairs.append((xs, ys))
    return pairs


def host_speed_reasons(base_rounds: list[RunResult], rounds: list[RunResult]) -> list[str]:
    """For each round whose baseline and combination ran while the host ran at different speeds, why."""
    return [(f"round {r.spec.round}: " if r.spec.rounds > 1 else "") + why for b, r in _paired_runs(base_rounds, rounds)
            if (why := host_speed_differs(b, r, names=("for the baseline", "for this plan")))]


def speedup(base_rounds: list[RunResult], rounds: list[RunResult], key: str) -> Speedup | None:
    """Speed-up of the combination measured by `rounds` over the baseline `base_rounds` (one result per
    round each, or one result each), on the latency samples `key` (ttft_ms, tpot_ms); None without data.
    Within-block pairs decide where the runs have them."""
    if (blocks := paired_speedup(base_rounds, rounds, key)) is not None:
        return blocks
    unstable = _unstable(base_rounds, rounds)
    if len(rounds) >= 2 and len(base_rounds) >= 2:
        pairs = _round_pairs(base_rounds, rounds, key)
        if len(pairs) >= MIN_T_ROUNDS:
            value, low, high = paired_ratio_ci([stats.median(xs) / stats.median(ys) for xs, ys in pairs])
            verdict, reason = _verdict(low, high, unstable)
            return Speedup(value, low, high, "rounds", verdict, len(pairs), reason=reason)
        if len(pairs) == 2 and all(len(xs) >= 2 and len(ys) >= 2 for xs, ys in pairs):
            value, low, high = two_stage_ratio_ci(pairs, n_boot=stats.N_BOOT)
            verdict, reason = _verdict(low, high, unstable)
            return Speedup(value, low, high, "rounds and iterations", verdict, sum(len(ys) for _, ys in pairs),
                           reason=reason)
    base = next((r for r in base_rounds if r.status == "ok"), None)
    cur = next((r for r in rounds if r.status == "ok"), None)
    if base is None or cur is None:
        return None
    xs, ys = base.finite_samples(key), cur.finite_samples(key)
    if len(xs) < 2 or len(ys) < 2:
        return None
    value, low, high = stats.ratio_ci(ys, xs, level=CI_LEVEL, n_boot=stats.N_BOOT)  # median(xs) / median(ys)
    if unstable:
        return Speedup(value, low, high, "iterations", INCONCLUSIVE, len(ys), reason=unstable)
    # iterations of one process per side: the interval cannot see the spread between processes, so it calls only a
    # change beyond the run-to-run band (perfbench/analysis/noise_band.py) as the margin, and never "same"
    run_to_run = noise_band.DEFAULT_BANDS.get(SUMMARY_KEY.get(key, key), DEFAULT_BAND)
    word = decide_speedup(low, high, run_to_run + DEFAULT_BAND, run_to_run)
    if word == SAME:
        word = INCONCLUSIVE
    reason = "" if word != INCONCLUSIVE else (f"one round per side: only a change beyond the run-to-run band "
                                              f"(+-{run_to_run:.0%}) can be called")
    return Speedup(value, low, high, "iterations", word, len(ys), reason=reason)


def _unstable(base_rounds: list[RunResult], rounds: list[RunResult]) -> str:
    """Why the rounds cannot decide ("" when they can): a run judged unstable, or host speeds that differed."""
    if any(r.is_stable() is False for r in (*base_rounds, *rounds)):
        return "a run behind it was judged unstable"
    reasons = host_speed_reasons(base_rounds, rounds)
    return reasons[0] if reasons else ""


def _verdict(low: float, high: float, unstable: str) -> tuple[Verdict, str]:
    """(verdict, reason) of a speed-up interval timed in separate rounds."""
    if unstable:
        return INCONCLUSIVE, unstable
    return decide_speedup(low, high, DEFAULT_BAND, DEFAULT_MARGIN), ""


def plan_label(result: RunResult) -> str:
    """The combination by its effective toggles, abbreviated: "all off", or "gdr+gmm"."""
    return short_plan_label(result.ran_on())


def baseline_of(results: list[RunResult]) -> RunResult | None:
    """The all-off run (the fewest toggles on among ok runs of the first shape)."""
    ok = [r for r in results if r.status == "ok"]
    return min(ok, key=lambda r: len(r.ran_on())) if ok else None


def speedups(results: list[RunResult]) -> dict[str, dict[str, Speedup | None]]:
    """combination id -> {"ttft_ms": ..., "tpot_ms": ...}: speed-up over the baseline."""
    groups = by_combination(results)
    base = baseline_of(merge_rounds(results))
    if base is None:
        return {}
    base_rounds = groups[base.spec.combination_id]
    return {cid: {key: speedup(base_rounds, rounds, key) for key in LATENCIES} for cid, rounds in groups.items()}


@dataclass(frozen=True)
class Marginal:
    """One toggle added on top of another measured plan (not the baseline): without / with, per latency."""

    toggle: str
    without: str  # combination id of the plan without it
    with_: str  # combination id of the plan with it
    gains: dict[str, Speedup | None]


def marginals(results: list[RunResult], merged: list[RunResult], base: RunResult | None) -> list[Marginal]:
    """Every pair of measured plans that differ by one toggle, the smaller not the baseline (those are the
    speed-ups themselves): what that toggle buys on top of the other toggles (graph_mode on the best eager
    plan). `merged` and `base`: the rounds of `results` merged, and its baseline."""
    groups = by_combination(results)
    merged = [r for r in merged if r.status == "ok"]
    out = []
    for small in merged:
        if base is not None and small.spec.combination_id == base.spec.combination_id:
            continue
        for big in merged:
            added = big.ran_on() - small.ran_on()
            if len(added) == 1 and small.ran_on() < big.ran_on() and big.shape() == small.shape():
                gains = {key: speedup(groups[small.spec.combination_id], groups[big.spec.combination_id], key)
                         for key in LATENCIES}
                out.append(Marginal(next(iter(added)), small.spec.combination_id, big.spec.combination_id, gains))
    return sorted(out, key=lambda m: (m.toggle, m.without))


@dataclass(frozen=True)
class ShapeBaseline:
    """The all-off plan of one workload shape and the speed-ups of that shape's plans over it (combination id
    -> latency -> speed-up)."""

    shape: WorkloadShape
    baseline: RunResult
    gains: dict[str, dict[str, Speedup | None]]


def shape_baselines(results: list[RunResult], merged: list[RunResult], baseline: RunResult | None,
                    gains: dict[str, dict[str, Speedup | None]]) -> list[ShapeBaseline]:
    """One entry per workload shape that has an all-off run. The shape whose all-off run is the folder's
    `baseline` takes the folder's `gains` (the same pairs give the same numbers); only another shape's are
    computed here."""
    shapes = {r.spec.combination_id: r.shape() for r in merged if r.status == "ok"}
    out = []
    for shape in dict.fromkeys(shapes.values()):
        ids = {cid for cid, s in shapes.items() if s == shape}
        base = baseline_of([r for r in merged if r.spec.combination_id in ids])
        if base is None or base.ran_on():  # no all-off run of this shape
            continue
        if baseline is not None and base.spec.combination_id == baseline.spec.combination_id:
            of_shape = {cid: g for cid, g in gains.items() if cid in ids}
        else:
            of_shape = speedups([r for r in results if r.spec.combination_id in ids])
        out.append(ShapeBaseline(shape, base, of_shape))
    return out
