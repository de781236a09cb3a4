"""Which kind of host a measurement came from: the CPU model, its last-level cache and the cores.

Hosts of one cloud offering differ 2x in speed under one model name ("AMD EPYC", "Intel Xeon Processor"), and
the L3 size tells them apart where the name does not; a noise file (perfbench calibrate) is valid only on the
kind of host it was recorded on, and the shared compile cache is kept per kind.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

from pydantic import BaseModel, ConfigDict

CPUINFO = Path("/proc/cpuinfo")
CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


class HostKind(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_model: str = "unknown"
    l3: str = "unknown"  # the largest cache level cpu0 sees, as sysfs writes it ("32768K")
    cores: int = 0

    def key(self) -> str:
        """A short stable name for file names: a hash of the three fields."""
        return hashlib.sha256(f"{self.cpu_model}|{self.l3}|{self.cores}".encode()).hexdigest()[:12]

    def describe(self) -> str:
        return f"{self.cpu_model}, L3 {self.l3}, {self.cores} cores"


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo), else what the platform module says."""
    try:
        for line in CPUINFO.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def last_level_cache() -> str:
    """The size of the highest cache level cpu0 has (sysfs), or "unknown"."""
    try:
        levels = sorted(CACHES.glob("index*"), key=lambda p: int((p / "level").read_text().strip()))
        return (levels[-1] / "size").read_text().strip() if levels else "unknown"
    except (OSError, ValueError):
        return "unknown"


def this_host() -> HostKind:
    return HostKind(cpu_model=cpu_model(), l3=last_level_cache(), cores=os.cpu_count() or 0)
