"""As many OpenMP threads as the host has free cores, when other processes hold some at the start of a job.

torch's CPU ops run on an OpenMP team of one thread per core. When another process keeps a core busy, the team's
thread on that core waits for the scheduler at every parallel region, and the whole team waits for it: on a
2-core VM with one core spun by another process, the tiny model's TTFT went from 68 ms to 7.3 s (ci_smoke, the
CPU-hog pair of docs/measurements_log.md), while one thread ran as fast as it does on a quiet host. A run timed so is
not a measurement of the code. So the worker reads how many cores other processes kept busy over a short window
before it builds anything, and takes fewer threads when they leave fewer cores free; the result records the
choice (`Environment.torch_threads` and `threads_note`), and the terminal table and report warn.

A user's OMP_NUM_THREADS is theirs: then nothing is changed. Off Linux (no /proc) nothing is read or changed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from perfbench.measure.host_load import host_load, snapshot

WINDOW_S = 0.5  # long enough for a few scheduler ticks of a busy neighbour, short beside a model build
_note: str | None = None  # the current job's choice, for the result's environment (measure/environment.py)
_default: int | None = None  # torch's own count, read before the first change (a worker serves many jobs)


def busy_other_cores(window_s: float = WINDOW_S) -> float | None:
    """Cores other processes kept busy over `window_s` while this process slept; None off Linux."""
    before = snapshot()
    time.sleep(window_s)
    load = host_load(before, snapshot(), run_threads=0)
    return None if load is None else load.other_cores


def threads_for(configured: int, cpus: int, other_cores: float) -> int:
    """The threads to time with: `configured`, or fewer when other processes leave less than configured - 1/2
    cores free (then the free cores, rounded, at least 1)."""
    free = cpus - other_cores
    if free >= configured - 0.5:
        return configured
    return max(1, min(configured, int(free + 0.5)))


def fit_threads_to_host(device: str, measure: Callable[[], float | None] = busy_other_cores) -> str | None:
    """Set torch's thread count for a job on `device` from the host's load now; the note that says so when the
    count was lowered (also kept for the result's environment), else None."""
    global _note, _default  # noqa: PLW0603 - one job at a time per worker process
    _note = None
    if device != "cpu" or "OMP_NUM_THREADS" in os.environ:
        return None
    import torch  # the worker has it loaded already

    other = measure()
    if other is None:
        return None
    if _default is None:
        _default = torch.get_num_threads()
    cpus = os.cpu_count() or 1
    configured = _default
    threads = threads_for(configured, cpus, other)
    torch.set_num_threads(threads)  # back to the default when an earlier job of this worker had lowered it
    if threads < configured:
        _note = (f"timed with {threads} of {configured} threads: other processes kept {other:.1f} of {cpus} cores "
                 f"busy when the job started (a busy core stalls every OpenMP region)")
        print(f"perfbench: {_note}", flush=True)
    return _note


def threads_note() -> str | None:
    """The current job's note from `fit_threads_to_host`, if it lowered the thread count."""
    return _note
