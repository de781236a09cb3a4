"""The host's own speed during timing: a fixed CPU kernel timed between the timed iterations.

A shared VM can change speed by tens of percent from one ten-second stretch to the next while every counter
Linux exposes (other processes' CPU time, steal, load average, clock) stays flat: other tenants compete for the
host's caches and memory bandwidth. The model's timings then spread or jump, and nothing says why. The probe
times the same small matmul loop before every timed iteration (best of a few repeats, so a single interrupt
does not count). Its spread inside a run is recorded (`host_speed_change`) but does not judge the run; its level
does decide whether two runs can be compared (perfbench/analysis/stability.py `host_speed_differs` says why).

The probe runs on the CPU with the run's intra-op threads: what the model's CPU kernels see. On an accelerator
the device's speed is not what it measures, so runs there skip it.
"""

from __future__ import annotations

import time

import torch

from perfbench.analysis import stats

SIZE = 192  # a [SIZE, SIZE] fp32 matmul: operands small enough to stay in a core's cache
MATMULS = 4
REPEATS = 3


class HostProbe:
    """Call it to time the fixed kernel once: milliseconds, best of REPEATS."""

    def __init__(self, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.a = torch.randn(SIZE, SIZE, generator=gen)
        self.b = torch.randn(SIZE, SIZE, generator=gen)
        self.out = torch.empty(SIZE, SIZE)

    def __call__(self) -> float:
        best = float("inf")
        for _ in range(REPEATS):
            start = time.perf_counter()
            for _ in range(MATMULS):
                torch.mm(self.a, self.b, out=self.out)
            best = min(best, time.perf_counter() - start)
        return best * 1e3


def speed_change(probe_ms: list[float]) -> float | None:
    """How much slower the host ran at its slow readings than at its fast ones: the 90th over the 10th
    percentile of the probe times, minus one (0.25: a quarter slower). None for fewer than 3 readings."""
    if len(probe_ms) < 3:
        return None
    fast, slow = stats.percentile(probe_ms, 10.0), stats.percentile(probe_ms, 90.0)
    return slow / fast - 1.0 if fast > 0 else None
