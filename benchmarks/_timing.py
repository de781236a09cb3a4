"""Side-by-side timing for benchmarks: alternate the candidates (A B A B ...) in one process, report medians.

Alternating keeps slow drifts of a shared, noisy machine from favouring whichever candidate ran last.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from model.backend import timed  # noqa: E402
from perfbench.analysis import stats  # noqa: E402


def interleaved(candidates: dict[str, Callable[[], object]], reps: int = 7, warmup: int = 1,
                device: str = "cpu") -> dict[str, list[float]]:
    """Seconds per call of each candidate, `reps` samples each, taken in alternation after `warmup` calls."""
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(reps):
        for name, fn in candidates.items():
            samples[name].append(timed(device, fn)[1])
    return samples


def median_ms(values: list[float]) -> float:
    return stats.median(values) * 1e3


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(lines)
