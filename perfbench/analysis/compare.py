"""Comparing runs: the matching behind `perfbench compare` and `perfbench gate`, and compare's two-sided verdict.

Runs of two folders match by run_id, then (for `compare`, on request) by what they computed: workload shape +
effective toggle set. A matched pair's change in a metric is the ratio B / A of the summary value with its
evidence from the raw samples, by `perfbench/analysis/effect.py` (the gate's one-sided checks call it too): a
two-sided Mann-Whitney U p-value below ALPHA, and the bootstrap CI of the ratio of medians excluding 1.
Throughputs have no samples of their own; they are tested on the latency samples they derive from (prefill
on TTFT, decode on TPOT: the rank test is the same for a quantity and its inverse) and their CI is the
inverted latency CI.

Process-to-process variation: results of interleaved rounds are merged per combination first
(perfbench/analysis/rounds.py); with enough rounds on both sides for a rank test on them to reach ALPHA (four
or more each), the per-round medians are the samples tested (the round is the unit). With fewer rounds, the
pooled iteration samples are tested, and a change inside the metric's run-to-run band
(perfbench/analysis/noise_band.py) is not significant. The word is one of the four (perfbench/results/verdicts.py).

Unstable data decide nothing: when either run was judged unstable (perfbench/analysis/stability.py: noisy samples or
a busy machine), or the two were timed while the host ran at different speeds (their host-probe medians more
than 15% apart), the change is reported with its ratio and CI but never called significant, as the gate's
timing checks are INCONCLUSIVE on the same data (`stability.contended`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfbench.analysis import noise_band
from perfbench.analysis.attribution import higher_is_better
from perfbench.analysis.effect import effect
from perfbench.analysis.rounds import merge_rounds, round_samples, tested_samples
from perfbench.analysis.stability import contended
from perfbench.analysis.stats import CI_LEVEL
from perfbench.results import RunResult, WorkloadShape
from perfbench.results.verdicts import FASTER, INCONCLUSIVE, SLOWER, Verdict, decide

ALPHA = 0.05
# metric -> raw samples it is tested on
COMPARED = {"ttft_ms_median": "ttft_ms", "tpot_ms_median": "tpot_ms", "prefill_tok_s": "ttft_ms",
            "decode_tok_s": "tpot_ms"}


@dataclass(frozen=True)
class MetricChange:
    """One metric of one matched pair. significant is None when there are too few samples to test."""

    metric: str
    a: float
    b: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    significant: bool | None
    basis: str = "iterations"  # "rounds": per-round medians tested; "iterations": iteration samples + band
    in_band: bool = False  # inside the run-to-run band (only checked on the "iterations" basis)
    undecided: str = ""  # why the data cannot decide (an unstable run, another host speed); "" when they can

    @property
    def ratio(self) -> float:
        return self.b / self.a

    @property
    def direction(self) -> str:
        """faster / slower / same, whatever the metric's direction."""
        if self.ratio == 1.0:
            return "same"
        better = self.ratio > 1.0 if higher_is_better(self.metric) else self.ratio < 1.0
        return "faster" if better else "slower"

    @property
    def word(self) -> Verdict:
        """One of the four words (perfbench/results/verdicts.py) on the latency ratio's interval; a change the rank
        test does not back, or data that cannot decide, is "inconclusive"."""
        if self.ci_low is None or self.ci_high is None or self.undecided or self.significant is None:
            return INCONCLUSIVE
        low, high = (1.0 / self.ci_high, 1.0 / self.ci_low) if higher_is_better(self.metric) else (
            self.ci_low, self.ci_high)
        word = decide(low, high)
        return INCONCLUSIVE if word in (SLOWER, FASTER) and not self.significant else word

    @property
    def verdict(self) -> str:
        """"1.250x slower", "1.010x same", "1.030x inconclusive": the factor and the word."""
        factor = max(self.ratio, 1.0 / self.ratio)
        return f"{factor:.3f}x {self.word}"


def _pair_change(metric: str, a: RunResult, b: RunResult,
                 bands: dict[str, float] | None = None) -> MetricChange | None:
    value_a, value_b = a.metric(metric), b.metric(metric)
    if value_a is None or value_b is None or value_a <= 0 or value_b <= 0:
        return None
    sample_key = COMPARED[metric]
    xs, ys, basis = tested_samples(
        a, b, lambda r, per_round: round_samples(r, sample_key) if per_round else r.finite_samples(sample_key),
        alpha=ALPHA)
    if xs is None or ys is None or len(xs) < 2 or len(ys) < 2:
        return MetricChange(metric, value_a, value_b, None, None, None, None, basis)
    change = effect(xs, ys, alternative="two-sided", alpha=ALPHA, ci_level=CI_LEVEL)
    lo, hi = change.ci_low, change.ci_high
    assert lo is not None and hi is not None  # effect() gives a CI at every ci_level
    if higher_is_better(metric):  # throughput ~ 1 / latency
        lo, hi = 1.0 / hi, 1.0 / lo
    in_band = basis == "iterations" and noise_band.inside(metric, value_b / value_a, bands)
    undecided = contended(a, b)
    significant = change.significant and bool(change.ci_excludes_one) and not in_band and not undecided
    return MetricChange(metric, value_a, value_b, lo, hi, change.p_value, significant, basis, in_band, undecided)


@dataclass
class Match:
    a: RunResult
    b: RunResult
    matched_by: str  # "run_id" or "shape+toggles"

    @property
    def label(self) -> str:
        return self.a.run_id if self.a.run_id == self.b.run_id else f"{self.a.run_id} -> {self.b.run_id}"

    def changes(self, bands: dict[str, float] | None = None) -> list[MetricChange]:
        if self.a.status != "ok" or self.b.status != "ok":
            return []
        return [c for c in (_pair_change(m, self.a, self.b, bands) for m in COMPARED) if c is not None]


def _identity(r: RunResult) -> tuple[WorkloadShape, frozenset[str]]:
    return r.shape(), r.effective_on()


def match_runs(runs_a: Sequence[RunResult], runs_b: Sequence[RunResult], by_identity: bool = True,
               ) -> tuple[list[Match], list[RunResult], list[RunResult]]:
    """Pairs (by run_id first, then, with `by_identity`, by shape + effective toggles, in order), runs only in
    A, only in B. Results of interleaved rounds are first merged per combination."""
    return match_merged(merge_rounds(list(runs_a)), merge_rounds(list(runs_b)), by_identity)


def match_merged(runs_a: Sequence[RunResult], runs_b: Sequence[RunResult], by_identity: bool = True,
                 ) -> tuple[list[Match], list[RunResult], list[RunResult]]:
    """`match_runs` of results whose rounds are merged already (a folder analysis's `merged`)."""
    by_id_a = {r.run_id: r for r in runs_a}
    matches = [Match(by_id_a[r.run_id], r, "run_id") for r in runs_b if r.run_id in by_id_a]
    taken = {m.a.run_id for m in matches}
    rest_a = [r for r in runs_a if r.run_id not in taken]
    rest_b = [r for r in runs_b if r.run_id not in taken]
    if not by_identity:
        return matches, rest_a, rest_b
    only_b = []
    for r in rest_b:
        same = next((x for x in rest_a if _identity(x) == _identity(r)), None)
        if same is None:
            only_b.append(r)
        else:
            rest_a.remove(same)
            matches.append(Match(same, r, "shape+toggles"))
    return matches, rest_a, only_b


