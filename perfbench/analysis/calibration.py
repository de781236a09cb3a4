"""What a timing job can see on this host: simulated jobs drawn from recorded A/A noise (`perfbench calibrate`).

A simulated job draws whole recorded epochs (all tests of an epoch together, so their correlation stays): in a
fresh random order without replacement, then again in a new order when it needs more epochs than were recorded.
(Drawing with replacement from the start gives a short job two copies of one epoch often enough, 10% of
3-epoch jobs from 28 epochs, and two equal epochs make a zero spread and a false word no real job can have.)
It adds log(1 + shift) to every test's epoch estimate (the head made `shift` slower everywhere),
and feeds them, epoch by epoch with the recorded epoch times after the start-up, to the jobs' own decision
(perfbench/analysis/sequential.py `SequentialJob`, the same object `ab` asks). What it says at its stop is what a
real job on this host would have said.

Per shift (`ShiftRow`): the share of jobs with a false word (A/A: any "slower" or "faster"; a slowdown: any
"faster"), the share decided (every test worded), the share detected (the job's exit code says regression), and
the time to the decision (median, 90th percentile, start-up included).

`variance_check`: are the intervals honest? For every test and epoch, the epoch's estimate against the interval of
the other epochs (`paired.interval_over_clusters`, the function every job uses): t = (d - centre) / sqrt(sd^2 +
se^2), where sd is the spread of one epoch the interval implies. Averaged over epochs and tests, t^2 is 1 (scaled
by (df - 2) / df) when the interval's spread is the real one; 4 when the intervals are 2x too narrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfbench.analysis import paired
from perfbench.analysis.sequential import DecisionRule, SequentialJob
from perfbench.results.noise_record import NoiseRecord
from perfbench.results.verdicts import FASTER, SLOWER, Verdict

SHIFTS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.10)
POWER = 0.8  # "could detect X%": the smallest slowdown detected in this share of jobs
HONEST_T2 = (0.6, 1.6)  # a mean scaled t^2 outside this range: the intervals do not match the noise


@dataclass(frozen=True)
class SimulatedJob:
    words: dict[str, Verdict]
    regressed: bool
    decided: bool
    seconds: float
    epochs: int


@dataclass(frozen=True)
class ShiftRow:
    shift: float
    jobs: int
    false_word: float
    decided: float
    detected: float
    median_s: float
    p90_s: float


@dataclass(frozen=True)
class Noise:
    """A noise record as arrays: epochs x tests estimates, pairs per epoch and test, epoch seconds."""

    tests: list[str]
    estimates: np.ndarray
    pairs: np.ndarray
    seconds: np.ndarray

    @classmethod
    def of(cls, record: NoiseRecord) -> Noise:
        tests = [t for t in record.tests if all(t in e.estimates for e in record.epochs)]
        est = np.array([[e.estimates[t] for t in tests] for e in record.epochs], dtype=float)
        pairs = np.array([[max(len(e.log_ratios.get(t, [])), 1) for t in tests] for e in record.epochs], dtype=int)
        return cls(tests, est, pairs, np.array([e.seconds for e in record.epochs], dtype=float))


def simulate_job(noise: Noise, shift: float, rule: DecisionRule, max_time_s: float, startup_s: float,
                 rng: np.random.Generator, max_epochs: int = 10_000) -> SimulatedJob:
    """One job: epochs drawn with replacement until the decision stops it (see the module docstring)."""
    job: SequentialJob[str] = SequentialJob(rule, max_time_s, len(noise.tests))
    moved = math.log1p(shift)
    drawn: list[int] = []
    order: list[int] = []
    elapsed = startup_s
    while len(drawn) < max_epochs:
        if not order:
            order = rng.permutation(len(noise.seconds)).tolist()
        e = order.pop()
        drawn.append(e)
        elapsed += float(noise.seconds[e])
        recent = float(noise.seconds[drawn[-3:]].max())
        estimates = {t: (noise.estimates[drawn, i] + moved).tolist() for i, t in enumerate(noise.tests)}
        pairs = {t: int(noise.pairs[drawn, i].sum()) for i, t in enumerate(noise.tests)}
        # the budget counts from the job's start, start-up included, as `ab`'s does
        judged = job.after_epoch(elapsed, recent, estimates, pairs)
        if judged is not None and judged.stops:
            words = {t: r.verdict for t, r in judged.ratios.items()}
            return SimulatedJob(words, judged.regressed, judged.decided, elapsed, len(drawn))
    raise RuntimeError(f"a simulated job did not stop in {max_epochs} epochs")


def false_word(job: SimulatedJob, shift: float) -> bool:
    """A word that is wrong for the injected shift: any change word under A/A, "faster" under a slowdown."""
    if shift == 0:
        return any(w in (SLOWER, FASTER) for w in job.words.values())
    return any(w == FASTER for w in job.words.values())


def simulate(noise: Noise, shift: float, jobs: int, rule: DecisionRule, max_time_s: float, startup_s: float,
             seed: int = 0) -> list[SimulatedJob]:
    rng = np.random.default_rng([seed, int(round(shift * 1e6))])
    return [simulate_job(noise, shift, rule, max_time_s, startup_s, rng) for _ in range(jobs)]


def row(shift: float, jobs: Sequence[SimulatedJob]) -> ShiftRow:
    seconds = np.array([j.seconds for j in jobs])
    return ShiftRow(shift, len(jobs), float(np.mean([false_word(j, shift) for j in jobs])),
                    float(np.mean([j.decided for j in jobs])), float(np.mean([j.regressed for j in jobs])),
                    float(np.median(seconds)), float(np.percentile(seconds, 90)))


def table(noise: Noise, jobs: int, rule: DecisionRule, max_time_s: float, startup_s: float,
          shifts: Sequence[float] = SHIFTS, seed: int = 0) -> list[ShiftRow]:
    return [row(s, simulate(noise, s, jobs, rule, max_time_s, startup_s, seed)) for s in shifts]


def smallest_detectable(noise: Noise, jobs: int, rule: DecisionRule, max_time_s: float, startup_s: float,
                        power: float = POWER, seed: int = 0, largest: float = 0.5) -> float | None:
    """The smallest slowdown (to 0.25%) detected in `power` of jobs, by bisection; None when even `largest` is not."""
    def detected(shift: float) -> bool:
        found = simulate(noise, shift, jobs, rule, max_time_s, startup_s, seed)
        return float(np.mean([j.regressed for j in found])) >= power

    if not detected(largest):
        return None
    low, high = 0.0, largest
    while high - low > 0.0025:
        mid = (low + high) / 2
        low, high = (low, mid) if detected(mid) else (mid, high)
    return round(high, 4)


def recommended_cap(noise: Noise, jobs: int, rule: DecisionRule, startup_s: float,
                    caps: Sequence[float] = (60, 90, 120, 150, 180, 240, 300, 420, 600), decided: float = 0.9,
                    seed: int = 0) -> float | None:
    """The smallest cap at which `decided` of A/A jobs end with every test worded (None: not up to the largest)."""
    for cap in caps:
        if cap <= startup_s:
            continue
        if row(0.0, simulate(noise, 0.0, jobs, rule, cap, startup_s, seed)).decided >= decided:
            return float(cap)
    return None


@dataclass(frozen=True)
class VarianceCheck:
    mean_t2: float  # scaled by (df - 2) / df: 1 when the intervals are honest
    values: int
    lag1: float | None  # the lag-1 autocorrelation of epoch estimates, averaged over tests (drift between epochs)

    @property
    def honest(self) -> bool:
        return HONEST_T2[0] <= self.mean_t2 <= HONEST_T2[1]


def variance_check(noise: Noise) -> VarianceCheck:
    """Leave-one-epoch-out t^2 of every test (see the module docstring)."""
    scaled: list[float] = []
    lags: list[float] = []
    epochs = noise.estimates.shape[0]
    for i in range(len(noise.tests)):
        column = noise.estimates[:, i]
        for e in range(epochs):
            others = np.delete(column, e)
            interval = paired.interval_over_clusters(others)
            if interval.df <= 2 or not math.isfinite(interval.se):
                continue
            sd = interval.se * math.sqrt(others.size)
            t2 = (column[e] - interval.center) ** 2 / (sd**2 + interval.se**2)
            scaled.append(t2 * (interval.df - 2) / interval.df)
        if epochs >= 4 and float(np.std(column)) > 0:
            lags.append(float(np.corrcoef(column[:-1], column[1:])[0, 1]))
    return VarianceCheck(float(np.mean(scaled)) if scaled else math.nan, len(scaled),
                         float(np.mean(lags)) if lags else None)


@dataclass(frozen=True)
class EpochDesign:
    """The noise's two levels and their costs, and the pairs per epoch that give the narrowest interval for the
    time (Kalibera & Jones, "Rigorous benchmarking in reasonable time", 2013): n = sqrt(c_epoch / c_pair *
    s^2 / tau^2), s the spread of one pair's log ratio, tau that of an epoch's true centre, c_epoch the cost an
    epoch adds beyond its pairs (the move and the untimed iteration), c_pair the cost of one pair of every run."""

    pair_sd: float
    epoch_sd: float  # tau: between epochs, beyond what the pairs' own spread explains (0 when none shows)
    pair_s: float
    overhead_s: float
    pairs_now: int
    pairs_best: int | None  # None when tau is 0: more pairs per epoch are always better


def epoch_design(record: NoiseRecord) -> EpochDesign:
    n = record.pairs_per_epoch
    within = [float(np.var(v, ddof=1)) for e in record.epochs for v in e.log_ratios.values() if len(v) >= 2]
    s2 = float(np.mean(within)) if within else 0.0
    noise = Noise.of(record)
    between = float(np.mean(np.var(noise.estimates, axis=0, ddof=1))) if noise.estimates.size else 0.0
    tau2 = max(between - s2 / n, 0.0)
    per_epoch = float(np.median(noise.seconds))
    # an epoch is n rounds of pairs plus one untimed round (the move is cheap next to it): the overhead is about one
    # round, a round one pair of every run
    pair_s = per_epoch / (n + 1)
    overhead_s = pair_s
    best = None if tau2 == 0 else max(1, round(math.sqrt(overhead_s / pair_s * s2 / tau2)))
    return EpochDesign(math.sqrt(s2), math.sqrt(tau2), pair_s, overhead_s, n, best)
