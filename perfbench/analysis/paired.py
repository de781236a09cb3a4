"""Paired decisions: is the plan (or the head) slower than its baseline (or the base)? One home for the rule
that `perfbench ab`, the sweep's block groups, `gate` and `compare` use.

A pair is two arms timed back to back in one process: one timed iteration of each, in a random order. Host
drift that lasts longer than a pair cancels in the pair's log ratio log(after / before). Pairs are grouped in
clusters: an *epoch* of a few pairs, after which both arms' weights are re-allocated (perfbench/measure/epochs.py),
or a worker process. What varies between clusters (memory layout, thread placement, the host's speed state)
is what an interval must cover, so the cluster is the statistical unit:

- Estimate per cluster: the 20% trimmed mean (`TRIM`) of its pairs' log ratios (the plain mean below
  `MIN_TRIM_PAIRS` pairs), robust to the single iterations a VM spike hits.
- Interval over G clusters: Student t with G - 1 degrees of freedom on the cluster estimates; from
  `YUEN_MIN_CLUSTERS` clusters on, Yuen's 20%-trimmed t (df = G - 2g - 1), so one bad cluster cannot move it.
  A percentile bootstrap over 2-4 clusters is 2.7-9x too narrow (Cameron, Gelbach & Miller 2008); t is not.
- Looks: a job that may stop early decides from repeated confidence intervals with Haybittle-Peto boundaries:
  an interim look decides only from a `INTERIM_LEVEL` (99.9%) interval, the last look from the nominal
  `CI_LEVEL` one. The overall false-call rate then stays near the nominal one whenever the job stops.
- Verdict (perfbench/results/verdicts.py, the one vocabulary): "slower" / "faster" when the interval lies beyond
  the margin, "same" when it lies inside the band, else "inconclusive". The margin keeps a real but negligible
  layout effect from being called a change (Stabilizer: one process is one layout sample).
- Many (run, metric) tests in one job: each word is judged at the family level (`family_level`, Bonferroni), so
  the words of a job hold jointly at 95%; and Holm's step-down correction (`stats.holm_adjust`) of the one-sided
  p-values of "slower" decides the exit code (`regressions`), so a job of 8 tests is not 8 chances of a false alarm.
- An undecided metric says how many more clusters it needs (`clusters_needed`), from its own between-cluster
  spread.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special as scipy_special
from scipy import stats as scipy_stats

from perfbench.analysis.stats import CI_LEVEL, holm_adjust
from perfbench.results.verdicts import (
    DEFAULT_BAND,
    DEFAULT_MARGIN,
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    VERDICTS,
    Verdict,
    decide,
)

TRIM = 0.2
MIN_TRIM_PAIRS = 5  # a cluster of fewer pairs is summarised by its plain mean (trimming 20% of 4 trims nothing)
YUEN_MIN_CLUSTERS = 10  # from here on the interval over clusters is Yuen's trimmed t
MIN_CLUSTERS = 2  # fewer clusters decide nothing (no spread between clusters to go on)
INTERIM_LEVEL = 0.999  # Haybittle-Peto: an interim look decides only at |z| > 3.29
# the words and their widths live in perfbench/results/verdicts.py (re-exported here for the callers)
__all__ = ["DEFAULT_BAND", "DEFAULT_MARGIN", "FASTER", "INCONCLUSIVE", "SAME", "SLOWER", "VERDICTS", "decide"]


@dataclass(frozen=True)
class PairedRatio:
    """after / before of a latency over clustered pairs: value and interval (ratios), counts, the rule it was
    judged by, and the verdict. `p_slower`: one-sided p-value of "after / before > 1 + margin" (for Holm);
    `clusters_needed`: the clusters an undecided verdict would need in all (None when decided or unknown)."""

    value: float
    low: float
    high: float
    pairs: int
    clusters: int
    band: float
    margin: float
    level: float
    method: str  # "t" | "yuen" | "pairs of one cluster" (shown, decides nothing)
    verdict: Verdict
    p_slower: float = 1.0
    clusters_needed: int | None = None

    def speedup(self) -> tuple[float, float, float]:
        """before / after (> 1 faster), with its interval (an unbounded side stays unbounded)."""
        def inverse(x: float) -> float:
            return math.inf if x == 0 else 1.0 / x

        return inverse(self.value), inverse(self.high), inverse(self.low)


def log_ratios(before: Sequence[float], after: Sequence[float]) -> np.ndarray:
    """log(after / before) of aligned samples; pairs with a non-finite or non-positive side are left out."""
    a = np.asarray(before, dtype=float)
    b = np.asarray(after, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} before, {b.size} after")
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    return np.log(b[keep] / a[keep])


def trimmed_mean(values: np.ndarray, trim: float = TRIM) -> float:
    """The mean after cutting floor(trim * n) values off each end (scipy.stats.trim_mean's rule, without its
    per-call overhead: this runs once per cluster per look)."""
    x = np.sort(np.asarray(values, dtype=float))
    cut = int(trim * x.size)
    return float(x[cut:x.size - cut].mean())


def cluster_estimate(values: np.ndarray) -> float:
    """A cluster's log ratio: the 20% trimmed mean, the plain mean below `MIN_TRIM_PAIRS` pairs."""
    values = np.asarray(values, dtype=float)
    if values.size < MIN_TRIM_PAIRS:
        return float(values.mean())
    return trimmed_mean(values)


@dataclass(frozen=True)
class LogInterval:
    """An interval on the log scale over cluster estimates: centre, standard error, degrees of freedom."""

    center: float
    se: float
    df: int
    method: str

    def bounds(self, level: float) -> tuple[float, float]:
        if self.df < 1 or not math.isfinite(self.se):
            return -math.inf, math.inf
        half = _two_sided_quantile(level, self.df) * self.se
        return self.center - half, self.center + half

    def p_above(self, threshold: float) -> float:
        """One-sided p-value of "the true centre > threshold" (H0: centre <= threshold)."""
        if self.df < 1 or not math.isfinite(self.se):
            return 1.0
        if self.se == 0:
            return 0.0 if self.center > threshold else 1.0
        return float(_t_sf((self.center - threshold) / self.se, self.df))


def interval_over_clusters(estimates: Sequence[float] | np.ndarray) -> LogInterval:
    """Student t (G - 1 df) on the cluster estimates; Yuen's 20%-trimmed t from `YUEN_MIN_CLUSTERS` on.

    Yuen (1974): with g = floor(0.2 G) trimmed from each end, the centre is the trimmed mean, the standard error
    s_w / ((1 - 2 * 0.2) sqrt(G)) with s_w the standard deviation of the g-winsorized sample, df = G - 2g - 1.
    """
    x = np.sort(np.asarray(estimates, dtype=float))
    n = x.size
    if n == 0:
        raise ValueError("no clusters")
    if n < MIN_CLUSTERS:
        return LogInterval(float(x.mean()), math.inf, 0, "none")
    if n < YUEN_MIN_CLUSTERS:
        return LogInterval(float(x.mean()), float(x.std(ddof=1)) / math.sqrt(n), n - 1, "t")
    g = int(math.floor(TRIM * n))
    winsorized = np.clip(x, x[g], x[n - g - 1])
    se = float(winsorized.std(ddof=1)) / ((1 - 2 * TRIM) * math.sqrt(n))
    return LogInterval(trimmed_mean(x), se, n - 2 * g - 1, "yuen")


def family_level(tests: int, level: float = CI_LEVEL) -> float:
    """The level each of `tests` intervals is judged at so that their words hold jointly at `level` (Bonferroni:
    the chance that any of them is wrong is at most the sum of the chances, 1 - level). A job of 8 tests judges
    each at 99.375%, so a job prints a false word in at most 1 job in 20, not in about 1 in 3."""
    return 1.0 - (1.0 - level) / max(tests, 1)


def look_level(final: bool, level: float = CI_LEVEL) -> float:
    """The confidence level a look decides at: Haybittle-Peto's 99.9% before the last look, nominal at it."""
    return level if final else max(level, INTERIM_LEVEL)


@dataclass
class LookPlan:
    """Planned looks at 1/k, 2/k, ... of a time budget; the last look is the one before the budget runs out (the
    next cluster would pass it). Interim looks decide at `INTERIM_LEVEL`, the last at the nominal level."""

    max_time_s: float
    looks: int
    done: int = 0

    def due(self, elapsed: float, next_cluster_s: float) -> tuple[bool, bool]:
        """(look now, final) after a cluster that ended at `elapsed` s, the next one taking `next_cluster_s`."""
        final = elapsed + next_cluster_s > self.max_time_s
        interim = self.done < self.looks - 1 and elapsed >= self.max_time_s * (self.done + 1) / self.looks
        return final or interim, final


def clusters_needed(interval: LogInterval, clusters: int, band: float, margin: float, level: float,
                    cap: int = 10_000) -> int | None:
    """How many clusters in all the interval would need to decide, if the between-cluster spread and the centre
    stay as measured: the fewest G whose half-width t(G-1) * sd / sqrt(G) lets the interval clear the margin
    (a change) or fit in the band (same), whichever comes first. None when no number would."""
    if clusters < MIN_CLUSTERS or not math.isfinite(interval.se):
        return None
    sd = interval.se * math.sqrt(clusters)
    room = max(math.log1p(band) - abs(interval.center), abs(interval.center) - math.log1p(margin))
    if room <= 0:
        return None
    if sd == 0:
        return clusters

    def enough(g: int) -> bool:  # the half-width falls with G, so the first G that is enough is found by halving
        return _two_sided_quantile(level, g - 1) * sd / math.sqrt(g) < room

    high = max(clusters, MIN_CLUSTERS)
    while not enough(high):
        if high >= cap:
            return None
        high = min(2 * high, cap)
    low = max(clusters, MIN_CLUSTERS) - 1
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


def _t_sf(x: float, df: float) -> float:
    """Student t's survival function through the special function (a simulated calibration calls it ~10^5
    times; scipy.stats' wrapper costs ~0.1 ms a call)."""
    return float(scipy_special.stdtr(df, -x))


def _ratio(log_value: float) -> float:
    """exp, unbounded past the largest float: a wide interval at 99.9% over two clusters can reach e^1000."""
    return math.exp(log_value) if log_value < 709.0 else math.inf


def paired_ratio(clusters: Mapping[Any, tuple[Sequence[float], Sequence[float]]], band: float = DEFAULT_BAND,
                 margin: float = DEFAULT_MARGIN, level: float = CI_LEVEL) -> PairedRatio | None:
    """after / before over paired samples, `clusters` mapping a cluster (an epoch, a process) to its aligned
    (before, after) samples; None when fewer than two pairs remain. Judged at `level` (see `look_level`)."""
    logs = [x for x in (log_ratios(b, a) for b, a in clusters.values()) if x.size]
    pairs = sum(x.size for x in logs)
    if pairs < 2:
        return None
    if len(logs) < MIN_CLUSTERS and logs[0].size >= 2:
        # one cluster: the t interval over its pairs is shown, but it cannot see the spread between clusters, so
        # it decides nothing
        single = interval_over_clusters(logs[0])
        interval = LogInterval(cluster_estimate(logs[0]), single.se, single.df, "pairs of one cluster")
        return _judged(interval, pairs, len(logs), band, margin, level, decides=False)
    return ratio_of_estimates([cluster_estimate(x) for x in logs], pairs, band, margin, level)


def ratio_of_estimates(estimates: Sequence[float], pairs: int, band: float = DEFAULT_BAND,
                       margin: float = DEFAULT_MARGIN, level: float = CI_LEVEL) -> PairedRatio:
    """after / before from the clusters' log-ratio estimates (`cluster_estimate` of each cluster's pairs): the
    decision every paired verdict goes through, the jobs' own and `perfbench calibrate`'s simulated ones."""
    interval = interval_over_clusters(estimates)
    return _judged(interval, pairs, len(estimates), band, margin, level,
                   decides=interval.df >= 1 and len(estimates) >= MIN_CLUSTERS)


def _judged(interval: LogInterval, pairs: int, clusters: int, band: float, margin: float, level: float,
            decides: bool) -> PairedRatio:
    low, high = interval.bounds(level)
    value, lo, hi = _ratio(interval.center), _ratio(low), _ratio(high)
    verdict = decide(lo, hi, band, margin) if decides else INCONCLUSIVE
    needed = clusters_needed(interval, clusters, band, margin, level) if verdict == INCONCLUSIVE else None
    p_slower = interval.p_above(math.log1p(margin)) if decides else 1.0
    return PairedRatio(value, lo, hi, pairs, clusters, band, margin, level, interval.method, verdict, p_slower,
                       needed)


def regressions(ratios: Sequence[PairedRatio]) -> list[bool]:
    """Which "slower" verdicts survive Holm's correction across all of `ratios` (one per (run, metric)) at the
    one-sided level of the interval each was judged by."""
    adjusted = holm_adjust([r.p_slower for r in ratios])
    return [r.verdict == SLOWER and p < (1 - r.level) / 2 for r, p in zip(ratios, adjusted)]


def interval_df(clusters: int) -> int:
    """The degrees of freedom of `interval_over_clusters` over that many clusters (0: no interval)."""
    if clusters < MIN_CLUSTERS:
        return 0
    if clusters < YUEN_MIN_CLUSTERS:
        return clusters - 1
    return clusters - 2 * int(math.floor(TRIM * clusters)) - 1


def log_se_of_interval(low: float, high: float, level: float = CI_LEVEL, df: float | None = None) -> float:
    """The standard error on the log scale behind a ratio's interval [low, high] at `level`: a t interval with
    `df` degrees of freedom, or (df None) a normal or bootstrap one."""
    return (math.log(high) - math.log(low)) / (2 * _two_sided_quantile(level, df))


@functools.lru_cache(maxsize=1024)
def _two_sided_quantile(level: float, df: float | None) -> float:
    """Student's t (df) or the normal quantile of a two-sided interval at `level` (a history reads thousands of
    intervals of a few levels and dfs: scipy's ppf costs ~0.2 ms a call)."""
    return float(scipy_stats.t.ppf((1 + level) / 2, df) if df is not None else scipy_stats.norm.ppf((1 + level) / 2))


def ratio_of_intervals(first: tuple[float, float, float, int], second: tuple[float, float, float, int],
                       level: float = CI_LEVEL) -> tuple[float, float]:
    """second / first of two independent estimates, each (value, low, high, clusters) with a t interval at
    `level` over `clusters` clusters: (ratio, one-sided p-value of "second / first > 1"). Each standard error is
    recovered from its interval's half-width on the log scale and its t quantile; the two are combined with
    Welch-Satterthwaite degrees of freedom. A side with fewer than two clusters has no known spread: p is 1."""
    parts = []
    for value, low, high, clusters in (first, second):
        if clusters < MIN_CLUSTERS or not (0 < low <= value <= high < math.inf):
            return (second[0] / first[0] if first[0] > 0 else math.inf), 1.0
        parts.append((log_se_of_interval(low, high, level, clusters - 1), clusters - 1))
    (se1, df1), (se2, df2) = parts
    diff = math.log(second[0]) - math.log(first[0])
    var = se1**2 + se2**2
    if var == 0:
        return math.exp(diff), 0.0 if diff > 0 else 1.0
    df = var**2 / (se1**4 / df1 + se2**4 / df2)
    return math.exp(diff), float(scipy_stats.t.sf(diff / math.sqrt(var), df))
