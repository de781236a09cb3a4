"""Host signals read around the timed iterations: the 1-minute load average (with the kernel's decay undone),
the CPU clock, memory pressure and available memory, from /proc and /sys. Where Linux does not expose a counter
the signal is None. The verdicts over these figures live in perfbench/analysis/stability.py.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
SYS_CPU = Path("/sys/devices/system/cpu")

def _loadavg(proc: Path) -> float | None:
    try:
        return float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_mhz(sys_cpu: Path = SYS_CPU) -> float | None:
    """Mean current clock of the CPUs in MHz (scaling_cur_freq is in kHz); None where cpufreq is absent."""
    values = []
    for path in sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            values.append(int(path.read_text().split()[0]) / 1e3)
        except (OSError, ValueError, IndexError):
            continue
    return sum(values) / len(values) if values else None


def _mem_pressure(proc: Path) -> float | None:
    """"some avg10" of /proc/pressure/memory (percent); None without PSI."""
    try:
        for line in (proc / "pressure" / "memory").read_text().splitlines():
            if line.startswith("some"):
                return float(dict(kv.split("=") for kv in line.split()[1:])["avg10"])
    except (OSError, ValueError, KeyError):
        return None
    return None


def _mem_available(proc: Path) -> float | None:
    try:
        info = {}
        for line in (proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0])
        return info["MemAvailable"] / info["MemTotal"]
    except (OSError, ValueError, KeyError, IndexError, ZeroDivisionError):
        return None


@dataclass(frozen=True)
class HostSignals:
    loadavg_1m: float | None
    cpu_mhz: float | None
    mem_pressure_avg10: float | None
    mem_available_frac: float | None
    read_at_s: float = field(default=0.0, compare=False)  # time.monotonic() of the reading


# Linux's 1-minute load average: every 5 s, L <- L e^(-5/60) + n (1 - e^(-5/60)) for the current run-queue length n.
LOADAVG_TAU_S = 60.0
# Shorter than three updates, the two readings say too little about the interval itself: no verdict.
LOADAVG_MIN_INTERVAL_S = 15.0


def loadavg_during(before: float | None, after: float | None, seconds: float) -> float | None:
    """Mean run-queue length over an interval from the 1-minute load average at its start and end: the
    kernel's filter over the interval, L_after = L_before d + n (1 - d) with d = e^(-seconds/60), solved for n.
    Without it, a quiet run started within a minute of other work would read that work's load. None when a
    reading is missing or the interval is shorter than `LOADAVG_MIN_INTERVAL_S`."""
    if before is None or after is None or seconds < LOADAVG_MIN_INTERVAL_S:
        return None
    decay = math.exp(-seconds / LOADAVG_TAU_S)
    return (after - before * decay) / (1 - decay)


def read_signals(proc: Path = PROC, sys_cpu: Path = SYS_CPU) -> HostSignals:
    return HostSignals(_loadavg(proc), cpu_mhz(sys_cpu), _mem_pressure(proc), _mem_available(proc), time.monotonic())


def signals_summary(before: HostSignals, after: HostSignals, run_threads: int,
                    cpus: int | None = None) -> dict[str, float | None]:
    """The summary entries of two readings: the run queue while timing net of the run's own threads
    (`loadavg_during`; None for intervals too short to tell), clock min/max, the worse memory figures."""
    cpus = cpus or os.cpu_count() or 1
    loadavg = loadavg_during(before.loadavg_1m, after.loadavg_1m, after.read_at_s - before.read_at_s)
    clocks = [c for c in (before.cpu_mhz, after.cpu_mhz) if c is not None]
    pressures = [p for p in (before.mem_pressure_avg10, after.mem_pressure_avg10) if p is not None]
    avail = [a for a in (before.mem_available_frac, after.mem_available_frac) if a is not None]
    return {
        "host_loadavg_1m": None if loadavg is None else round(max(0.0, loadavg - run_threads), 3),
        "host_cpus": float(max(1, cpus - run_threads)),
        "host_cpu_mhz_min": round(min(clocks), 1) if clocks else None,
        "host_cpu_mhz_max": round(max(clocks), 1) if clocks else None,
        "host_mem_pressure_avg10": max(pressures) if pressures else None,
        "host_mem_available_frac": round(min(avail), 4) if avail else None,
    }
