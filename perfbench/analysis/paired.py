"""Paired differences: the statistics of interleaved measurement (a sweep's blocks, an `ab` job's pairs).

A pair is two arms timed back to back: one timed iteration of each, seconds apart, in one block of one process
(a sweep) or in two live workers of one generation (`perfbench ab`). Host drift that lasts longer than a block
cancels in the pair's log ratio log(after / before); what is left is the code's effect plus the noise of two
iterations. Pairs are grouped by the process (or worker generation) they came from: a process carries its own
memory layout and thread placement, so it stays a unit of variation.

- Estimate: the trimmed mean (`TRIM` of each tail: 20%, since single iterations on a shared VM spread
  heavy-tailed) of the pairs' log ratios, as a ratio: a geometric-mean ratio
  robust to the single iterations a VM spike hits.
- CI: a two-level (clustered) percentile bootstrap: each replicate draws the processes with replacement, then,
  within each drawn process, its pairs with replacement. Processes that disagree widen the CI even when each
  process alone is tight.
- Verdict (`decide`), against an equivalence band `band` (relative): "same" when the CI lies inside
  [1 / (1 + band), 1 + band]; "slower" / "faster" when the CI excludes 1 and the estimate lies beyond half the
  band; else "inconclusive". A change smaller than half the band is never called a change: with a tight CI it
  is "same", otherwise the evidence has not decided yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from perfbench.analysis.stats import CI_LEVEL

TRIM = 0.2
# the equivalence band of sweep verdicts: a speed-up within 3% either way, with its whole CI, is "no change"
DEFAULT_BAND = 0.03
SLOWER, FASTER, SAME, INCONCLUSIVE = "slower", "faster", "same", "inconclusive"
VERDICTS = (SLOWER, FASTER, SAME, INCONCLUSIVE)


@dataclass(frozen=True)
class PairedRatio:
    """after / before of a latency over paired samples: value, CI, counts and the verdict against `band`."""

    value: float
    low: float
    high: float
    pairs: int
    processes: int
    band: float
    verdict: str

    def speedup(self) -> tuple[float, float, float]:
        """before / after (> 1 faster), with its CI."""
        return 1.0 / self.value, 1.0 / self.high, 1.0 / self.low

    def to_dict(self) -> dict[str, float | int | str]:
        return {"ratio": self.value, "ci_low": self.low, "ci_high": self.high, "pairs": self.pairs,
                "processes": self.processes, "band": self.band, "verdict": self.verdict}


def log_ratios(before: Sequence[float], after: Sequence[float]) -> np.ndarray:
    """log(after / before) of aligned samples; pairs with a non-finite or non-positive side are left out."""
    a = np.asarray(before, dtype=float)
    b = np.asarray(after, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} before, {b.size} after")
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    return np.log(b[keep] / a[keep])


def _estimate(values: np.ndarray) -> float:
    return float(scipy_stats.trim_mean(values, TRIM))


def clustered_ci(clusters: Sequence[np.ndarray], level: float = CI_LEVEL, n_boot: int = 2000,
                 seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high) of the trimmed mean of log ratios grouped in `clusters` (one array per process),
    by the two-level percentile bootstrap of the module docstring. Deterministic for a given seed."""
    groups = [np.asarray(c, dtype=float) for c in clusters if len(c)]
    if not groups:
        raise ValueError("no pairs")
    point = _estimate(np.concatenate(groups))
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    for i in range(n_boot):
        drawn = rng.integers(0, len(groups), size=len(groups))
        boot[i] = _estimate(np.concatenate([groups[k][rng.integers(0, groups[k].size, size=groups[k].size)]
                                            for k in drawn]))
    low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return point, float(low), float(high)


def decide(value: float, low: float, high: float, band: float) -> str:
    """The verdict on a latency ratio after / before with CI [low, high] (see the module docstring)."""
    if not band > 0:
        raise ValueError(f"band must be positive, got {band!r}")
    if 1.0 / (1.0 + band) <= low and high <= 1.0 + band:
        return SAME
    if low > 1.0 and value > 1.0 + band / 2:
        return SLOWER
    if high < 1.0 and value < 1.0 / (1.0 + band / 2):
        return FASTER
    return INCONCLUSIVE


def paired_ratio(clusters: Mapping[object, tuple[Sequence[float], Sequence[float]]], band: float,
                 level: float = CI_LEVEL, n_boot: int = 2000, seed: int = 0) -> PairedRatio | None:
    """after / before over paired samples, `clusters` mapping a process to its aligned (before, after) samples;
    None when fewer than two pairs remain."""
    logs = [log_ratios(b, a) for b, a in clusters.values()]
    logs = [x for x in logs if x.size]
    pairs = sum(x.size for x in logs)
    if pairs < 2:
        return None
    point, low, high = clustered_ci(logs, level, n_boot, seed)
    value, lo, hi = math.exp(point), math.exp(low), math.exp(high)
    return PairedRatio(value, lo, hi, pairs, len(logs), band, decide(value, lo, hi, band))
