"""Change points of a series over commits: where a plan's speed-up, a run's median or an ab ratio moved, and by how
much.

Each point is a log value with a standard error read from its CI (the CI's level, and the t quantile of its
degrees of freedom where it is a t interval over clusters or rounds: `perfbench.analysis.paired.log_se_of_interval`;
several points of one commit are pooled by inverse variance). The CIs weigh the points, but they need not say how
much the points scatter from commit to commit: a run's CI misses the host's speed of the day (points scatter
more), and the order-statistic CI of a median of 5 samples is often far wider than the medians' real scatter
(points scatter less). So the scatter is measured on the series itself. Binary segmentation proposes breakpoints
under an inverse-variance weighted squared-error cost (a point with a narrow CI counts more), in units of the
robust spread of successive differences (`dispersion`: a step moves one difference only), from prefix sums: each
level of splitting is one vectorized pass, O(n log n) per series. Each candidate is then confirmed between the
segments either side of it by a t-test of their inverse-variance means, whose variance is scaled by the points'
scatter around their segments' means (`residual_scale`: chi-square over the points less the segments, its
degrees of freedom; a step is never counted as scatter). A candidate that is not significant at `series_alpha`
(SERIES_ALPHA, 1%, over the splits the search chooses among), or whose size is below `min_magnitude` (default:
the equivalence band, 5%), is dropped and the segments merged, weakest first, until every remaining change passes
both. So a 25% step is confirmed over 3 + 3 commits whose points scatter by a few percent, whatever their CIs.
Rates on synthetic series shaped like real ones are tested in
tests/perfbench/history/test_history_changes.py.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats as scipy_stats

from perfbench.analysis.paired import log_se_of_interval
from perfbench.history.series import Series, SeriesKey, SeriesPoint

DEFAULT_MIN_MAGNITUDE = 0.05  # the equivalence band: a smaller change is never reported
SERIES_ALPHA = 0.01  # at most 1 false change per 100 series without one (split over its candidates: series_alpha)
MIN_SIZE = 2  # points (commits) a segment needs on each side of a change
MIN_DISPERSION = 0.1  # CIs up to 10x wider than the points' scatter scale the breakpoint search
MIN_SCALE = 1e-12  # points that do not scatter at all (copies): a step between them is certain, not a 0/0
# levels over commits; an ab folder's head/base ratio is one too when CI compares every commit with one base (a
# release, the main branch's tip of a fixed day): a step in it is a change of head (docs/ci.md)
CHANGE_FAMILIES = ("speedup", "median", "ab")


class Segmented(BaseModel):
    """A confirmed change between points `index - 1` and `index` of the series' commits."""

    model_config = ConfigDict(frozen=True)

    index: int
    before: float  # the segment means, back from log space
    after: float
    p_value: float
    n_before: int
    n_after: int

    @property
    def size(self) -> float:
        return self.after / self.before - 1.0


class PrefixSums:
    """Inverse-variance weighted squared error of any segment around its weighted mean, from cumulative sums: O(1)
    per segment, and every split of a segment at once in one vectorized step."""

    def __init__(self, y: np.ndarray, w: np.ndarray) -> None:
        self.w = np.concatenate([[0.0], np.cumsum(w)])
        self.wy = np.concatenate([[0.0], np.cumsum(w * y)])
        self.wyy = np.concatenate([[0.0], np.cumsum(w * y * y)])

    def cost(self, start: np.ndarray | int, end: np.ndarray | int) -> np.ndarray:
        w = self.w[end] - self.w[start]
        wy = self.wy[end] - self.wy[start]
        return np.asarray(self.wyy[end] - self.wyy[start] - wy * wy / w)

    def best_split(self, start: int, end: int) -> tuple[int, float]:
        """The split of [start, end) into two segments of MIN_SIZE or more that lowers the cost most, and by how
        much (0 when the segment is too short to split)."""
        splits = np.arange(start + MIN_SIZE, end - MIN_SIZE + 1)
        if splits.size == 0:
            return start, 0.0
        gains = self.cost(start, end) - self.cost(start, splits) - self.cost(splits, end)
        best = int(np.argmax(gains))
        return int(splits[best]), float(gains[best])


def binary_segmentation(y: np.ndarray, w: np.ndarray, penalty: float) -> list[int]:
    """Breakpoints of `y` (weights `w`): each segment is split where that lowers the weighted squared error most,
    while the gain exceeds `penalty`. Each level of splitting costs O(n) (prefix sums, one vectorized pass per
    segment): O(n log n) for a series whose changes split it evenly, O(n k) for k changes at worst."""
    sums = PrefixSums(y, w)
    found, pending = [], [(0, len(y))]
    while pending:
        start, end = pending.pop()
        split, gain = sums.best_split(start, end)
        if gain > penalty:
            found.append(split)
            pending += [(start, split), (split, end)]
    return sorted(found)


def _segment_stats(y: np.ndarray, se: np.ndarray) -> tuple[float, float]:
    """Inverse-variance mean of a segment and its variance in units of the CIs' variances."""
    w = 1.0 / se**2
    return float(np.sum(w * y) / np.sum(w)), 1.0 / float(np.sum(w))


def residual_scale(y: np.ndarray, se: np.ndarray, bounds: list[int]) -> tuple[float, int]:
    """How much the points scatter around their segments' means in units of their CIs' variances (chi-square over
    its degrees of freedom: 1 when the CIs say it right, 4 when the points spread twice as wide, 0.05 when CIs of
    medians of few samples are far wider than the points' real scatter), and those degrees of freedom (points
    less segments). Estimated around the segments, a step is never counted as scatter."""
    chi2 = 0.0
    for start, stop in zip(bounds, bounds[1:]):
        mean, _ = _segment_stats(y[start:stop], se[start:stop])
        chi2 += float(np.sum(((y[start:stop] - mean) / se[start:stop]) ** 2))
    df = len(y) - (len(bounds) - 1)
    return max(chi2 / df, MIN_SCALE), df


def _test(y: np.ndarray, se: np.ndarray, start: int, split: int, stop: int, scale: float, df: int
          ) -> tuple[float, float, float]:
    """(p value, mean before, mean after) of the change at `split` between segments [start, split), [split, stop):
    a t-test of the inverse-variance means, the variance scaled by the series' `residual_scale` (`df`)."""
    m1, v1 = _segment_stats(y[start:split], se[start:split])
    m2, v2 = _segment_stats(y[split:stop], se[split:stop])
    t = abs(m2 - m1) / math.sqrt((v1 + v2) * scale)
    return float(2 * scipy_stats.t.sf(t, df)), m1, m2


def dispersion(y: np.ndarray, se: np.ndarray) -> float:
    """How much more (or less, down to MIN_DISPERSION) the points scatter than their CIs say: the robust spread
    (MAD) of successive differences in units of their standard errors. A step moves one difference only, so it
    does not count as scatter. It scales the weights of the breakpoint search only."""
    d = np.diff(y) / np.sqrt(se[1:] ** 2 + se[:-1] ** 2)
    return max(MIN_DISPERSION, 1.4826 * float(np.median(np.abs(d))))


def series_alpha(n: int) -> float:
    """The level each candidate is confirmed at in a series of `n` commits: SERIES_ALPHA over the splits the
    search chooses among, so a series without a change gives a false one with probability SERIES_ALPHA or less,
    whatever its length (6 commits: 3.3e-3; 60: 1.8e-4)."""
    return SERIES_ALPHA / max(1, n - 2 * MIN_SIZE + 1)


def change_points(y: np.ndarray, se: np.ndarray, min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
                  alpha: float | None = None) -> list[Segmented]:
    """Confirmed changes of log values `y` with standard errors `se` (both in log space), in order; `alpha`:
    the level of each confirmation (default `series_alpha`)."""
    n = len(y)
    if n < 2 * MIN_SIZE:
        return []
    alpha = series_alpha(n) if alpha is None else alpha
    # the search's cost is in units of the points' scatter (their CIs' variance scaled by the robust spread of
    # successive differences): a breakpoint costs a BIC-like penalty; the t-test below decides
    splits = binary_segmentation(y, 1 / (se * dispersion(y, se)) ** 2, penalty=3.0 * math.log(n))
    while True:
        bounds = [0, *splits, n]
        scale, df = residual_scale(y, se, bounds)
        tested = []
        for i, split in enumerate(splits):
            p, m1, m2 = _test(y, se, bounds[i], split, bounds[i + 2], scale, df)
            big = abs(math.exp(m2 - m1) - 1.0) >= min_magnitude
            tested.append((p if big else 1.0, split, m1, m2, split - bounds[i], bounds[i + 2] - split))
        failing = [t for t in tested if t[0] >= alpha]
        if not failing:
            return [Segmented(index=split, before=math.exp(m1), after=math.exp(m2), p_value=p, n_before=nb,
                              n_after=na) for p, split, m1, m2, nb, na in tested]
        splits.remove(max(failing)[1])  # the weakest goes; its neighbours are tested again, merged


class Change(BaseModel):
    """A change point of a stored series, as reported."""

    key: SeriesKey
    before: float
    after: float
    size: float
    p_value: float
    sha_before: str
    sha_after: str
    order_before: int
    order_after: int
    commits_before: int
    commits_after: int
    folder_after: str

    def line(self) -> str:
        """One line: what moved, from what to what, between which commits, by how much and how surely."""
        unit = " ms" if self.key.family == "median" else "x"
        what = {"speedup": "speed-up", "median": "median", "ab": "head/base"}[self.key.family]
        metric = self.key.metric.replace("_ms", "").upper()
        return (f"{self.key.plan} {metric} {what} {self.before:.2f}{unit} -> {self.after:.2f}{unit} between "
                f"{self.sha_before[:10]} and {self.sha_after[:10]} ({self.size:+.1%}, p={self.p_value:.1g}, "
                f"{self.commits_before} commits before, {self.commits_after} after)")

    def where(self) -> str:
        return f"{self.key.scenario} · {self.key.shape} · {self.key.machine_key} · {self.key.software_key}" + (
            " · emulated" if self.key.emulated else "")


def usable(p: SeriesPoint) -> bool:
    """A point on the commit axis with a proper CI around it (a stored point that is not, from a store older than
    ingest's checks, is left out of its series without breaking it or any other)."""
    return (p.commit_order is not None and p.low is not None and p.high is not None
            and 0 < p.low <= p.value <= p.high < math.inf and p.high > p.low and 0 < p.level < 1
            and (p.df is None or p.df >= 1))


def _per_commit(points: list[SeriesPoint]) -> list[tuple[SeriesPoint, float, float]]:
    """(last point, pooled log value, its standard error) per commit, in commit order; points without a CI
    cannot be weighted and are left out. Each standard error comes from its CI's half-width on the log scale and
    the quantile of that CI: t with its df for a t interval, normal for a bootstrap one."""
    by_order: dict[int, list[SeriesPoint]] = {}
    for p in points:
        if usable(p):
            by_order.setdefault(p.commit_order, []).append(p)  # type: ignore[arg-type]
    out = []
    for order in sorted(by_order):
        group = by_order[order]
        weights = [log_se_of_interval(p.low, p.high, p.level, p.df) ** -2 for p in group]  # type: ignore[arg-type]
        total = math.fsum(weights)
        mean = math.fsum(w * math.log(p.value) for w, p in zip(weights, group)) / total
        out.append((group[-1], mean, 1 / math.sqrt(total)))
    return out


def series_changes(series: Series, min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
                   since_order: int | None = None) -> list[Change]:
    if series.key.family not in CHANGE_FAMILIES:
        return []
    commits = _per_commit([p for p in series.points if since_order is None or (p.commit_order or -1) >= since_order])
    if not commits:
        return []
    y = np.array([c[1] for c in commits])
    se = np.array([c[2] for c in commits])
    out = []
    for seg in change_points(y, se, min_magnitude):
        before, after = commits[seg.index - 1][0], commits[seg.index][0]
        out.append(Change(key=series.key, before=seg.before, after=seg.after, size=seg.size, p_value=seg.p_value,
                          sha_before=before.sha or "", sha_after=after.sha or "",
                          order_before=before.commit_order or 0, order_after=after.commit_order or 0,
                          commits_before=seg.n_before, commits_after=seg.n_after, folder_after=after.folder))
    return out
