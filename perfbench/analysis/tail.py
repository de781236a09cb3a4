"""Tail latency of one run: the p50 and p99 of its timed decode steps, each with a percentile-bootstrap CI.

Every timed decode step is one value (`samples.tpot_steps_ms`), unlike TPOT, whose unit is the iteration
(the mean of its steps): a tail lives in single steps, and an iteration's mean hides it. The steps of one
iteration are not independent draws (they share the iteration's cache and host state), so the CIs are
somewhat narrower than they should be; and a p99 from fewer than 100 steps is close to the largest step, its
bootstrap CI then spanning the few largest ones. Statistics come from `stats` (percentile, bootstrap_ci).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfbench.analysis import stats

STEP_KEYS = ("decode_step_ms_p50", "decode_step_ms_p99")


def _p99(values: Sequence[float]) -> float:
    return stats.percentile(values, 99.0)


def decode_step_summary(steps_ms: Sequence[float]) -> dict[str, float | None]:
    """`decode_step_ms_p50` / `_p99` of the steps, each with `_ci_low` / `_ci_high` (95%, seeded, so a
    run's record is reproducible); all None without steps, CIs None with fewer than two."""
    steps = [float(s) for s in steps_ms if s is not None and math.isfinite(s)]
    out: dict[str, float | None] = {}
    for key, estimator in (("decode_step_ms_p50", stats.median), ("decode_step_ms_p99", _p99)):
        out[key] = estimator(steps) if steps else None
        low = high = None
        if len(steps) >= 2:
            if min(steps) == max(steps):  # every resample is the same value: the bootstrap is degenerate
                low = high = steps[0]
            else:
                low, high = stats.bootstrap_ci(steps, stat=estimator, level=stats.CI_LEVEL)
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = low, high
    return out
