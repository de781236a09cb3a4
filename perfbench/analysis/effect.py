"""The effect of a change on one metric between two matched runs: ratio, confidence interval, p-value.

The one engine behind `perfbench compare` (two-sided: did it change?) and the gate's timing and ratio checks
(one-sided: did it get worse?). Which runs are matched is `perfbench/analysis/compare.py`'s `match_runs`; which
samples are tested (per-round medians or iterations) is each caller's `paired` reading of the two runs.

Estimators: the ratio stat(after) / stat(before) (default: ratio of medians) with its percentile-bootstrap CI
(`stats.ratio_ci`), and the Mann-Whitney U test of after against before (`stats.mann_whitney_u`). A one-sided
test on samples too small for any outcome to reach alpha (1 / C(m+n, m) >= alpha) falls back to complete
separation of the two samples in the tested direction, the conservative check asv uses for tiny samples; a
two-sided test that cannot reach alpha is simply not significant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from perfbench.analysis import stats


@dataclass(frozen=True)
class Effect:
    """after against before. ratio and the CI are stat(after) / stat(before); `significant` is the test's
    verdict alone (callers add their thresholds and run-to-run bands)."""

    ratio: float
    ci_low: float | None
    ci_high: float | None
    ci_level: float | None
    p_value: float
    alternative: str  # "two-sided" | "greater" (after larger) | "less" (after smaller)
    method: str  # "mann-whitney", or "no-overlap" (too few samples for U to reach alpha)
    significant: bool

    @property
    def ci_excludes_one(self) -> bool | None:
        """Does the CI lie beyond 1 in the tested direction (either side for two-sided)? None without a CI."""
        if self.ci_low is None or self.ci_high is None:
            return None
        if self.alternative == "greater":
            return self.ci_low > 1.0
        if self.alternative == "less":
            return self.ci_high < 1.0
        return not self.ci_low <= 1.0 <= self.ci_high


def effect(before: Sequence[float], after: Sequence[float], alternative: str = "two-sided", alpha: float = 0.05,
           ci_level: float | None = stats.CI_LEVEL, stat: Callable[..., float] = stats.median,
           n_boot: int = stats.N_BOOT) -> Effect:
    """Ratio, CI (at `ci_level`; none when None) and Mann-Whitney test of `after` against `before`."""
    if alternative not in stats.ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(stats.ALTERNATIVES)}, got {alternative!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    x, y = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    _, p_value = stats.mann_whitney_u(y, x, alternative=alternative)
    if alternative != "two-sided" and stats.min_one_sided_p(x.size, y.size) >= alpha:
        method = "no-overlap"
        significant = bool(y.min() > x.max() if alternative == "greater" else y.max() < x.min())
    else:
        method, significant = "mann-whitney", p_value < alpha
    low = high = None
    if ci_level is None:
        den = float(stat(x))
        ratio = float(stat(y)) / den if den else math.inf
    else:
        ratio, low, high = stats.ratio_ci(x, y, level=ci_level, stat=stat, n_boot=n_boot)
    return Effect(ratio, low, high, ci_level, p_value, alternative, method, bool(significant))
