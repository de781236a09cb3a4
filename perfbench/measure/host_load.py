"""How busy the rest of the machine was while a run was timed, read from Linux's /proc.

A run's timings are only as good as the cores it had. The meter takes two snapshots around the timed
iterations and reports how many cores other processes kept busy on average (CPU time of every process outside
the run's process group, divided by the wall time) and the share stolen by the hypervisor. The launcher
starts each run in its own process group, so the ranks of a torchrun job count as the run, not as "other".

`perfbench/analysis/stability.py` `contention(summary)` turns the recorded figures into a verdict. Off Linux
nothing is recorded.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    busy_ticks: int  # all CPUs: user + nice + system + irq + softirq (guest time is inside user)
    steal_ticks: int
    own_ticks: int  # CPU time of this process group's processes and of the children they reaped


@dataclass(frozen=True)
class HostLoad:
    """Averages over the metered interval, in cores (1.0 = one core kept busy the whole time)."""

    other_cores: float
    steal_cores: float
    spare_cores: float  # cores the run did not need: CPUs - run threads

    def as_summary(self) -> dict[str, float]:
        return {"host_other_cores": round(self.other_cores, 3), "host_steal_cores": round(self.steal_cores, 3),
                "host_spare_cores": round(self.spare_cores, 3)}


def _ticks_per_s() -> int:
    return os.sysconf("SC_CLK_TCK")


def _read_cpu_totals(proc: Path) -> tuple[int, int]:
    fields = (proc / "stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return user + nice + system + irq + softirq, steal


def _group_ticks(proc: Path, pgrp: int) -> int:
    total = 0
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended between listing and reading
            continue
        # the command name (field 2) may hold spaces and parentheses: split after its closing ')'
        rest = text[text.rindex(")") + 2:].split()
        # rest[0] is field 3 (state); pgrp is field 5; utime, stime, cutime, cstime are fields 14-17.
        # A process that ends moves its time into its parent's cutime/cstime when reaped; counting those
        # keeps the group's total from dropping when one of its processes exits while a run is timed.
        if int(rest[2]) == pgrp:
            total += sum(int(v) for v in rest[11:15])
    return total


def snapshot(proc: Path = PROC) -> CpuSnapshot | None:
    """The counters now; None where /proc is not Linux's."""
    try:
        busy, steal = _read_cpu_totals(proc)
        own = _group_ticks(proc, os.getpgrp())
    except (OSError, ValueError, IndexError):
        return None
    return CpuSnapshot(time.perf_counter(), busy, steal, own)


def host_load(before: CpuSnapshot | None, after: CpuSnapshot | None, run_threads: int,
              cpus: int | None = None) -> HostLoad | None:
    """Average other-process and steal load between two snapshots; None when either is missing."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    tick_s = (after.wall_s - before.wall_s) * _ticks_per_s()
    other = max(0, (after.busy_ticks - before.busy_ticks) - (after.own_ticks - before.own_ticks))
    cpus = cpus or os.cpu_count() or 1
    return HostLoad(other_cores=other / tick_s, steal_cores=(after.steal_ticks - before.steal_ticks) / tick_s,
                    spare_cores=max(0.0, float(cpus - run_threads)))
