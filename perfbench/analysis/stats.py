"""Statistics over raw timing samples: point estimates, confidence intervals and rank tests.

Pure functions over sequences of floats (numpy and scipy.stats, no torch, no I/O, no formatting). Every
docstring names its estimator so that a number in a report can be traced to how it was computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

CI_LEVEL = 0.95  # every interval perfbench reports, unless a rule asks for another level
N_BOOT = 2000  # resamples of every percentile bootstrap
ALTERNATIVES = ("two-sided", "greater", "less")
# Beyond this many pairs the exact U distribution costs more than it is worth; the normal approximation is
# then within ~1e-3 of it.
_EXACT_MAX_PAIRS = 2500


def _as_array(values: Sequence[float] | np.ndarray, what: str = "values") -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{what}: empty sample")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: contains NaN or infinity")
    return arr


def median(values: Sequence[float]) -> float:
    """Sample median (mean of the two middle order statistics when the count is even)."""
    return float(np.median(_as_array(values)))


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile, linear interpolation between closest ranks (Hyndman-Fan type 7, numpy default).

    Args:
        values: the sample.
        p: percent in [0, 100].
    """
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile p must be in [0, 100], got {p!r}")
    return float(np.percentile(_as_array(values), p, method="linear"))


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level!r}")


def _bootstrap_interval(samples: tuple[np.ndarray, ...], statistic: Callable[..., Any], vectorized: bool,
                        level: float, n_boot: int, seed: int) -> tuple[float, float]:
    """Percentile-bootstrap interval (Efron) by scipy.stats.bootstrap, each sample resampled independently."""
    result = scipy_stats.bootstrap(samples, statistic, vectorized=vectorized, paired=False, n_resamples=n_boot,
                                   confidence_level=level, method="percentile",
                                   rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def bootstrap_ci(values: Sequence[float], stat: Callable[..., float] = median, level: float = CI_LEVEL,
                 n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of `stat` (Efron): resample with replacement `n_boot` times
    and take the (1-level)/2 and (1+level)/2 quantiles of the resampled statistic (scipy.stats.bootstrap).
    Deterministic for a given seed."""
    _check_level(level)
    arr = _as_array(values)
    if stat is median or stat is np.median:
        return _bootstrap_interval((arr,), lambda x, axis: np.median(x, axis=axis), True, level, n_boot, seed)
    return _bootstrap_interval((arr,), stat, False, level, n_boot, seed)


def ratio_ci(before: Sequence[float] | np.ndarray, after: Sequence[float] | np.ndarray, level: float = CI_LEVEL,
             n_boot: int = N_BOOT, seed: int = 0, stat: Callable[..., float] = median) -> tuple[float, float, float]:
    """Ratio stat(after) / stat(before) (default: ratio of medians) with a percentile-bootstrap CI, both
    samples resampled independently `n_boot` times (scipy.stats.bootstrap). Deterministic for a given seed.

    Returns:
        (ratio, ci_low, ci_high).
    """
    _check_level(level)
    a = _as_array(before, "before")
    b = _as_array(after, "after")
    point_before = float(stat(a))
    if point_before == 0.0:
        raise ValueError("before: statistic is 0, the ratio is undefined")
    if stat is median or stat is np.median:
        def ratio(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.median(y, axis=axis) / np.median(x, axis=axis)
        lo, hi = _bootstrap_interval((a, b), ratio, True, level, n_boot, seed)
    else:
        def ratio_of_stats(x: np.ndarray, y: np.ndarray) -> float:
            den = float(stat(x))
            return float(stat(y)) / den if den else math.inf
        lo, hi = _bootstrap_interval((a, b), ratio_of_stats, False, level, n_boot, seed)
    return float(stat(b)) / point_before, lo, hi


def mann_whitney_u(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, alternative: str = "two-sided",
                   method: str = "auto") -> tuple[float, float]:
    """Mann-Whitney U test (Wilcoxon rank-sum) of a against b, by scipy.stats.mannwhitneyu.

    U is the statistic of `a`: the number of pairs (x in a, y in b) with x > y, ties counting 1/2.
    "greater" tests whether a tends to be larger than b, "less" smaller, "two-sided" either.

    p-value: exact null distribution of U when there are no ties and len(a) * len(b) <= 2500
    (`method="auto"`), two-sided = min(1, 2 * smaller tail); otherwise the normal approximation with the tie
    correction of the variance and a 0.5 continuity correction. `method` may force "exact" (no ties only) or
    "asymptotic". Every value tied: U = len(a) * len(b) / 2 and p = 1 (no evidence either way).

    Returns:
        (U, p_value).
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")
    if method not in ("auto", "exact", "asymptotic"):
        raise ValueError(f"method must be auto, exact or asymptotic, got {method!r}")
    x = _as_array(a, "a")
    y = _as_array(b, "b")
    both = np.concatenate([x, y])
    has_ties = np.unique(both).size < both.size
    if method == "exact" and has_ties:
        raise ValueError("exact Mann-Whitney p-values need samples without ties")
    if np.all(both == both[0]):
        return x.size * y.size / 2.0, 1.0
    if method == "auto":
        method = "exact" if not has_ties and x.size * y.size <= _EXACT_MAX_PAIRS else "asymptotic"
    result = scipy_stats.mannwhitneyu(x, y, alternative=alternative, method=method, use_continuity=True)
    return float(result.statistic), float(result.pvalue)


def min_one_sided_p(m: int, n: int) -> float:
    """Smallest one-sided Mann-Whitney p-value samples of sizes m and n can reach: 1 / C(m+n, m)."""
    return 1.0 / math.comb(m + n, m)


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values (family-wise error control, any dependence): sorted
    ascending, the i-th (0-based) of m becomes max over j <= i of min(1, (m - j) * p_(j)); returned in input
    order. Rejecting adjusted p < alpha keeps the chance of any false alarm in the family <= alpha."""
    p = np.asarray(p_values, dtype=float)
    if p.size == 0:
        return []
    if np.any((p < 0) | (p > 1)) or not np.all(np.isfinite(p)):
        raise ValueError("p-values must lie in [0, 1]")
    order = np.argsort(p, kind="mergesort")
    scaled = np.minimum(1.0, (p.size - np.arange(p.size)) * p[order])
    adjusted = np.empty(p.size)
    adjusted[order] = np.maximum.accumulate(scaled)
    return [float(v) for v in adjusted]


def geometric_mean(values: Sequence[float]) -> float:
    """Geometric mean exp(mean(log x)) of strictly positive values (the mean of speed-up ratios)."""
    arr = _as_array(values)
    if np.any(arr <= 0):
        raise ValueError("geometric mean needs strictly positive values")
    return float(np.exp(np.log(arr).mean()))
