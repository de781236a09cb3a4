"""Change points of a series over commits: where a plan's speed-up, a run's median or an ab ratio moved, and by how
much.

Each point is a log value with a standard error read from its CI (the CI's level, and the t quantile of its
degrees of freedom where it is a t interval over clusters or rounds: `perfbench.analysis.paired.log_se_of_interval`;
several points of one commit are pooled by inverse variance). Where the points scatter more than their CIs say (CIs
that understate the variation between processes), every standard error is widened by the robust spread of
successive differences (`dispersion`), and the tests below use that estimate's degrees of freedom. Binary
segmentation proposes breakpoints under an inverse-variance weighted squared-error cost (a point with a narrow CI
counts more), from prefix sums: each level of splitting is one vectorized pass, O(n log n) per series. Each
candidate is then confirmed between the segments either side of it: the inverse-variance means of the two segments
differ by a z-test whose standard errors are those of the CIs; where the points scatter more than their CIs say (a
segment's chi-square over its degrees of freedom above 1), the variance is inflated by that ratio and the test
becomes a t-test on the segments' points. A candidate that is not significant at `ALPHA`, or whose size is below
`min_magnitude` (default: the equivalence band, 5%), is dropped and the segments merged, weakest first, until
every remaining change passes both. Rates on synthetic series shaped like real ones are tested in
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
ALPHA = 1e-4  # per candidate: a few candidates per series, and at most 1 false change per 100 series
MIN_SIZE = 2  # points (commits) a segment needs on each side of a change
MAD_EFFICIENCY = 0.37  # of the median absolute deviation against the standard deviation, for normal data
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


def _segment_stats(y: np.ndarray, se: np.ndarray) -> tuple[float, float, bool]:
    """Inverse-variance mean, its variance, and whether over-dispersion inflated it (then estimated, not known)."""
    w = 1.0 / se**2
    mean = float(np.sum(w * y) / np.sum(w))
    var = 1.0 / float(np.sum(w))
    dispersion = float(np.sum(w * (y - mean) ** 2)) / (len(y) - 1) if len(y) > 1 else 1.0
    return mean, var * max(1.0, dispersion), dispersion > 1.0


def _test(y: np.ndarray, se: np.ndarray, start: int, split: int, stop: int, df: float | None
          ) -> tuple[float, float, float]:
    """(p value, mean before, mean after) of the change at `split` between segments [start, split), [split, stop).
    `df`: the degrees of freedom of a series-wide dispersion estimate (None: the CIs were taken as they are)."""
    m1, v1, estimated1 = _segment_stats(y[start:split], se[start:split])
    m2, v2, estimated2 = _segment_stats(y[split:stop], se[split:stop])
    t = abs(m2 - m1) / math.sqrt(v1 + v2)
    dfs = [d for d in (df, float(stop - start - 2) if estimated1 or estimated2 else None) if d is not None]
    if dfs:
        return float(2 * scipy_stats.t.sf(t, max(min(dfs), 1.0))), m1, m2
    return float(2 * scipy_stats.norm.sf(t)), m1, m2


def dispersion(y: np.ndarray, se: np.ndarray) -> float:
    """How much more the points scatter than their CIs say (1 when they do not): the robust spread (MAD) of
    successive differences in units of their standard errors. A step moves one difference only, so it does not
    count as scatter."""
    d = np.diff(y) / np.sqrt(se[1:] ** 2 + se[:-1] ** 2)
    return max(1.0, 1.4826 * float(np.median(np.abs(d))))


def change_points(y: np.ndarray, se: np.ndarray, min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
                  alpha: float = ALPHA) -> list[Segmented]:
    """Confirmed changes of log values `y` with standard errors `se` (both in log space), in order."""
    n = len(y)
    if n < 2 * MIN_SIZE:
        return []
    # CIs that understate the scatter between commits would make every wiggle a change: widen them, and test with
    # the degrees of freedom of that estimate (a MAD is about 37% efficient)
    factor = dispersion(y, se)
    se = se * factor
    df = MAD_EFFICIENCY * (n - 2) if factor > 1.0 else None
    # the cost is in units of the CIs' variance: a breakpoint costs a BIC-like penalty; the t-test below decides
    splits = binary_segmentation(y, 1 / se**2, penalty=3.0 * math.log(n))
    while True:
        bounds = [0, *splits, n]
        tested = []
        for i, split in enumerate(splits):
            p, m1, m2 = _test(y, se, bounds[i], split, bounds[i + 2], df)
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
