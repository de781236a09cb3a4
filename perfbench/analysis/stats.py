"""Statistics over raw timing samples: point estimates, confidence intervals and one-sided regression tests.

Pure functions over sequences of floats (numpy, no torch, no I/O, no formatting). Every docstring names its
estimator so that a number in a report can be traced to how it was computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ALTERNATIVES = ("two-sided", "greater", "less")
# Beyond this many pairs the exact U distribution costs more than it is worth; the normal approximation is
# then within ~1e-3 of it (asv uses the same split between exact and asymptotic).
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


def summarize(values: Sequence[float]) -> dict[str, float]:
    """count, mean, median, p90, p99 (linear interpolation), min, max, stdev (sample, ddof=1; 0.0 for one
    value), iqr (p75 - p25, linear interpolation)."""
    arr = _as_array(values)
    p25, p50, p75, p90, p99 = np.percentile(arr, [25, 50, 75, 90, 99], method="linear")
    return {
        "count": float(arr.size),
        "mean": float(arr.mean()),
        "median": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "stdev": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "iqr": float(p75 - p25),
    }


def _resampled_stat(arr: np.ndarray, stat: Callable[..., float], rng: np.random.Generator,
                    n_boot: int) -> np.ndarray:
    """`stat` of `n_boot` resamples (with replacement, same size) of `arr`."""
    resamples = arr[rng.integers(0, arr.size, size=(n_boot, arr.size))]
    # Vectorised paths for the common statistics; any other callable is applied row by row.
    if stat is median or stat is np.median:
        return np.median(resamples, axis=1)
    if stat is np.mean:
        return resamples.mean(axis=1)
    return np.array([stat(row) for row in resamples], dtype=float)


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level!r}")


def bootstrap_ci(values: Sequence[float], stat: Callable[..., float] = median, level: float = 0.95,
                 n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of `stat` (Efron): resample with replacement `n_boot` times
    and take the (1-level)/2 and (1+level)/2 quantiles (linear interpolation) of the resampled statistic.
    Deterministic for a given seed."""
    _check_level(level)
    arr = _as_array(values)
    boot = _resampled_stat(arr, stat, np.random.default_rng(seed), n_boot)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(boot, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _binom_half_cdf(n: int) -> np.ndarray:
    """P(B <= k) for B ~ Binomial(n, 1/2), k = 0..n, computed in log space (no underflow for large n)."""
    k = np.arange(1, n + 1)
    log_pmf = np.concatenate([[0.0], np.cumsum(np.log((n - k + 1) / k))]) - n * math.log(2.0)
    return np.cumsum(np.exp(log_pmf))


def median_ci(values: Sequence[float], level: float = 0.99) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The interval is [x_(k), x_(n-k+1)] (1-based order statistics) with the largest k such that
    2 * P(Binomial(n, 1/2) <= k-1) <= 1 - level, so its coverage is at least `level` for any continuous
    distribution. Fallback: when n is too small for any k to reach `level` (n < 8 at 99 %, n < 6 at 95 %) the
    interval is the sample range [min, max], whose coverage is only 1 - 2**(1-n); callers that need the
    stated level must collect more samples.
    """
    _check_level(level)
    arr = np.sort(_as_array(values))
    n = arr.size
    tail = (1.0 - level) / 2.0
    cdf = _binom_half_cdf(n)
    # k-1 must satisfy cdf[k-1] <= tail; the largest such k-1 is the count of cdf entries <= tail, minus one.
    k = int(np.searchsorted(cdf, tail, side="right"))
    if k < 1:
        return float(arr[0]), float(arr[-1])
    return float(arr[k - 1]), float(arr[n - k])


def ratio_ci(before: Sequence[float], after: Sequence[float], level: float = 0.95, n_boot: int = 2000,
             seed: int = 0, stat: Callable[..., float] = median) -> tuple[float, float, float]:
    """Ratio stat(after) / stat(before) (default: ratio of medians) with a percentile-bootstrap CI, both
    samples resampled independently `n_boot` times. Deterministic for a given seed.

    Returns:
        (ratio, ci_low, ci_high).
    """
    _check_level(level)
    a = _as_array(before, "before")
    b = _as_array(after, "after")
    point_before = float(stat(a))
    if point_before == 0.0:
        raise ValueError("before: statistic is 0, the ratio is undefined")
    rng = np.random.default_rng(seed)
    boot_before = _resampled_stat(a, stat, rng, n_boot)
    boot_after = _resampled_stat(b, stat, rng, n_boot)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = boot_after / boot_before
    ratios = ratios[np.isfinite(ratios)]  # a resample whose median is 0 has no ratio
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(ratios, [tail, 1.0 - tail])
    return float(stat(b)) / point_before, float(lo), float(hi)


def _exact_u_counts(m: int, n: int) -> list[int]:
    """Number of orderings of m a's and n b's giving U = 0..m*n: the coefficients of the Gaussian binomial
    [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i), built one exact polynomial factor at a
    time (power series truncated at degree m*n, which leaves the lower coefficients exact)."""
    coeffs = [1] + [0] * (m * n)
    for i in range(1, m + 1):
        step = n + i
        for u in range(m * n, step - 1, -1):  # multiply by (1 - q^(n+i))
            coeffs[u] -= coeffs[u - step]
        for u in range(i, m * n + 1):  # divide by (1 - q^i), i.e. multiply by 1 + q^i + q^2i + ...
            coeffs[u] += coeffs[u - i]
    return coeffs


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _rank_with_ties(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mid-ranks (1-based, ties get the mean of their ranks) and the size of each tie group."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_vals[1:] != sorted_vals[:-1]]))
    sizes = np.diff(np.append(starts, values.size))
    mid = starts + (sizes + 1) / 2.0  # mean of ranks starts+1 .. starts+sizes
    ranks = np.empty(values.size)
    ranks[order] = np.repeat(mid, sizes)
    return ranks, sizes


def mann_whitney_u(a: Sequence[float], b: Sequence[float], alternative: str = "two-sided",
                   method: str = "auto") -> tuple[float, float]:
    """Mann-Whitney U test (Wilcoxon rank-sum) of a against b.

    U is the statistic of `a`: the number of pairs (x in a, y in b) with x > y, ties counting 1/2.
    "greater" tests whether a tends to be larger than b, "less" smaller, "two-sided" either.

    p-value: exact null distribution of U when there are no ties and len(a) * len(b) <= 2500
    (`method="auto"`), two-sided = min(1, 2 * smaller tail); otherwise the normal approximation with the tie
    correction of the variance and a 0.5 continuity correction (two-sided uses max(U, n_a*n_b - U)), as in
    scipy.stats.mannwhitneyu. `method` may force "exact" (no ties only) or "asymptotic".

    Returns:
        (U, p_value).
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")
    if method not in ("auto", "exact", "asymptotic"):
        raise ValueError(f"method must be auto, exact or asymptotic, got {method!r}")
    x = _as_array(a, "a")
    y = _as_array(b, "b")
    m, n = x.size, y.size
    ranks, tie_sizes = _rank_with_ties(np.concatenate([x, y]))
    u = float(ranks[:m].sum() - m * (m + 1) / 2.0)
    has_ties = bool(np.any(tie_sizes > 1))
    if method == "exact" and has_ties:
        raise ValueError("exact Mann-Whitney p-values need samples without ties")
    if method == "exact" or (method == "auto" and not has_ties and m * n <= _EXACT_MAX_PAIRS):
        counts = _exact_u_counts(min(m, n), max(m, n))  # the distribution is symmetric in m and n
        total = sum(counts)
        k = int(round(u))
        p_greater = sum(counts[k:]) / total
        p_less = sum(counts[: k + 1]) / total
        p = {"greater": p_greater, "less": p_less, "two-sided": min(1.0, 2.0 * min(p_greater, p_less))}
        return u, float(p[alternative])
    total_n = m + n
    mu = m * n / 2.0
    tie_term = float(np.sum(tie_sizes**3 - tie_sizes)) / (total_n * (total_n - 1))
    sigma = math.sqrt(m * n / 12.0 * ((total_n + 1) - tie_term))
    if sigma == 0.0:  # every value tied: no evidence either way
        return u, 1.0
    if alternative == "greater":
        p = _normal_sf((u - mu - 0.5) / sigma)
    elif alternative == "less":
        p = _normal_sf((mu - u - 0.5) / sigma)
    else:
        p = min(1.0, 2.0 * _normal_sf((max(u, m * n - u) - mu - 0.5) / sigma))
    return u, float(p)


@dataclass(frozen=True)
class SlowdownVerdict:
    """One-sided regression verdict of `after` against `before`.

    ratio: slowdown factor (> 1 is worse): median(after)/median(before) for latencies, the inverse for
    higher-is-better metrics. regressed = significant and exceeds_threshold.
    """

    ratio: float
    p_value: float
    significant: bool
    exceeds_threshold: bool
    method: str  # "mann-whitney" or "no-overlap" (too few samples for U to reach alpha)

    @property
    def regressed(self) -> bool:
        return self.significant and self.exceeds_threshold


def min_one_sided_p(m: int, n: int) -> float:
    """Smallest one-sided Mann-Whitney p-value samples of sizes m and n can reach: 1 / C(m+n, m)."""
    return 1.0 / math.comb(m + n, m)


def is_slower(before: Sequence[float], after: Sequence[float], threshold: float, alpha: float,
              higher_is_better: bool = False) -> SlowdownVerdict:
    """Is `after` worse than `before` by more than `threshold` (relative), and not by chance?

    One-sided: only a slowdown can regress (after larger for latencies; after smaller when
    `higher_is_better`, e.g. tokens/s). Estimator: ratio of medians. Test: one-sided Mann-Whitney U
    (`mann_whitney_u`), significant when p < alpha. When the samples are too small for any outcome to reach
    alpha (1 / C(m+n, m) >= alpha), significance falls back to complete separation of the two samples
    (every after value worse than every before value), the conservative check asv uses for tiny samples.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    x = _as_array(before, "before")
    y = _as_array(after, "after")
    med_before, med_after = float(np.median(x)), float(np.median(y))
    worse_num, worse_den = (med_before, med_after) if higher_is_better else (med_after, med_before)
    ratio = worse_num / worse_den if worse_den > 0 else math.inf
    alternative = "less" if higher_is_better else "greater"
    _, p_value = mann_whitney_u(y, x, alternative=alternative)
    if min_one_sided_p(x.size, y.size) < alpha:
        significant, method = p_value < alpha, "mann-whitney"
    else:
        separated = y.max() < x.min() if higher_is_better else y.min() > x.max()
        significant, method = bool(separated), "no-overlap"
    return SlowdownVerdict(ratio=ratio, p_value=p_value, significant=bool(significant),
                           exceeds_threshold=ratio > 1.0 + threshold, method=method)


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
