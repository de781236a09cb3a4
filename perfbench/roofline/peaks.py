"""Peak rates a roofline is drawn against: documented ones per accelerator (device_peaks.yaml, each figure
with its public source), or, for this CPU, measured on the spot by two short micro-benchmarks and cached per
machine.

Rates are per device as the model's ranks see it (a package seen as two devices is halved) and per
direction for links.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import yaml

from perfbench.config.key_value import parse_key_number
from perfbench.errors import UserError
from perfbench.results.host_kind import cpu_model

PEAKS_FILE = Path(__file__).with_name("device_peaks.yaml")
DTYPES = ("float32", "bfloat16", "float16", "float8")
PEAK_KEYS = tuple(f"{d}_tflops" for d in DTYPES) + ("memory_GBps", "interconnect_GBps")
CPU_DEVICE = "cpu"


@dataclass(frozen=True)
class DevicePeaks:
    """Peak rates of one device (rank). Missing rates are absent from `flops` / None, never guessed."""

    name: str
    title: str
    kind: str  # cuda | npu | cpu
    flops: dict[str, float] = field(default_factory=dict)  # dtype -> FLOP/s
    memory_Bps: float | None = None
    link_Bps: float | None = None  # one direction
    sources: dict[str, str] = field(default_factory=dict)
    platform: str = ""
    note: str = ""
    measured: bool = False  # True: measured on this machine (CPU), not documented

    def flops_for(self, dtype: str) -> float:
        if dtype not in self.flops:
            have = ", ".join(sorted(self.flops)) or "none"
            raise UserError(f"device {self.name} has no sourced {dtype} peak (has: {have}); give one with "
                            f"--peak {dtype}_tflops=VALUE")
        return self.flops[dtype]

    def require_memory(self) -> float:
        if self.memory_Bps is None:
            raise UserError(f"device {self.name} has no sourced memory bandwidth; give one with "
                            f"--peak memory_GBps=VALUE")
        return self.memory_Bps


def _entry(name: str, raw: dict[str, Any]) -> DevicePeaks:
    per_device = 1.0 / float(raw.get("devices_per_package", 1))
    flops: dict[str, float] = {}
    sources: dict[str, str] = {}
    for dtype in DTYPES:
        item = raw.get(f"{dtype}_tflops")
        if item is not None:
            flops[dtype] = float(item["value"]) * 1e12 * per_device
            sources[f"{dtype}_tflops"] = str(item["source"])
    memory = raw.get("memory_GBps")
    link = raw.get("interconnect_GBps")
    if memory is not None:
        sources["memory_GBps"] = str(memory["source"])
    link_bps = None
    if link is not None:
        sources["interconnect_GBps"] = str(link["source"])
        # bidirectional totals and unspecified figures are priced per direction at half
        share = 1.0 if link.get("direction") == "unidirectional" else 0.5
        link_bps = float(link["value"]) * 1e9 * share * per_device
    if "devices_per_package" in raw:
        sources["devices_per_package"] = str(raw.get("devices_per_package_source", ""))
    return DevicePeaks(
        name=name, title=str(raw.get("title", name)), kind=str(raw.get("kind", "")), flops=flops,
        memory_Bps=float(memory["value"]) * 1e9 * per_device if memory is not None else None, link_Bps=link_bps,
        sources=sources, platform=str(raw.get("platform", "")), note=str(raw.get("note", "")))


def load_peaks(path: Path = PEAKS_FILE) -> dict[str, DevicePeaks]:
    raw = yaml.safe_load(Path(path).read_text())
    return {name: _entry(name, entry) for name, entry in raw["devices"].items()}


def raw_entries(path: Path = PEAKS_FILE) -> dict[str, dict[str, Any]]:
    return dict(yaml.safe_load(Path(path).read_text())["devices"])


def parse_overrides(items: tuple[str, ...] | list[str]) -> dict[str, float]:
    """`KEY=VALUE` pairs (keys of device_peaks.yaml: bfloat16_tflops, memory_GBps, ...) -> {key: value}."""
    return dict(parse_key_number(item, "--peak", PEAK_KEYS, "KEY=VALUE", lambda number: number > 0,
                                 "must be positive") for item in items)


def with_overrides(peaks: DevicePeaks, overrides: dict[str, float]) -> DevicePeaks:
    """The device with user-given rates (per device; links per direction), each marked as user-given."""
    if not overrides:
        return peaks
    flops, sources = dict(peaks.flops), dict(peaks.sources)
    memory, link = peaks.memory_Bps, peaks.link_Bps
    for key, value in overrides.items():
        sources[key] = "given on the command line (--peak)"
        if key == "memory_GBps":
            memory = value * 1e9
        elif key == "interconnect_GBps":
            link = value * 1e9
        else:
            flops[key.removesuffix("_tflops")] = value * 1e12
    return DevicePeaks(peaks.name, peaks.title, peaks.kind, flops, memory, link, sources, peaks.platform,
                       peaks.note, peaks.measured)


def device_peaks(name: str, overrides: dict[str, float] | None = None) -> DevicePeaks:
    """A documented device by name, or `cpu` (measured here, cached)."""
    if name == CPU_DEVICE:
        peaks = cpu_peaks()
    else:
        table = load_peaks()
        if name not in table:
            raise UserError(f"unknown device {name!r}; devices: {', '.join([*table, CPU_DEVICE])}")
        peaks = table[name]
    return with_overrides(peaks, overrides or {})


# ---- CPU: measured ------------------------------------------------------------------------------------
def read_bandwidth(reps: int = 5, nbytes: int = 2 * 2**30) -> float:
    """Streaming read bandwidth (B/s): torch.sum over an fp32 buffer far beyond the caches, best of reps."""
    import torch

    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    return buf.numel() * 4 / best


def matmul_flops(reps: int = 5, n: int = 2048, dtype: str = "float32") -> float:
    """GEMM throughput (FLOP/s): an n^3 torch.matmul, best of reps after one warm-up."""
    import torch

    a = torch.randn(n, n).to(getattr(torch, dtype))
    b = torch.randn(n, n).to(getattr(torch, dtype))
    a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def cpu_cache_key() -> str:
    import torch


    raw = f"{cpu_model()}|{os.cpu_count()}|torch {torch.__version__}|threads {torch.get_num_threads()}"
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in raw)[:200]


def cache_dir() -> Path:
    """The per-user cache folder: PERFBENCH_CACHE, else the platform's user cache dir (measured CPU peaks, the
    compile cache of `perfbench ab`)."""
    return Path(os.environ.get("PERFBENCH_CACHE") or platformdirs.user_cache_dir("perfbench"))


def cpu_peaks(refresh: bool = False, reps: int = 5) -> DevicePeaks:
    """This CPU's measured peaks (fp32 and bf16 GEMM, read bandwidth), cached per CPU model, core count,
    torch version and thread count; `refresh` measures again."""
    key = cpu_cache_key()
    path = cache_dir() / f"cpu_peaks-{key}.json"
    data: dict[str, Any] | None = None
    if path.is_file() and not refresh:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = None
    if data is None:
        # bf16 GEMMs on a CPU without bf16 matrix units are slow: a smaller one keeps the measurement short
        data = {"key": key, "float32_flops": matmul_flops(reps),
                "bfloat16_flops": matmul_flops(reps, n=1024, dtype="bfloat16"), "memory_Bps": read_bandwidth(reps),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
    how = f"measured on this machine ({path.name})"
    return DevicePeaks(
        name=CPU_DEVICE, title=f"this CPU ({key})", kind="cpu",
        flops={"float32": float(data["float32_flops"]), "bfloat16": float(data["bfloat16_flops"])},
        memory_Bps=float(data["memory_Bps"]), link_Bps=None,
        sources={"float32_tflops": how, "bfloat16_tflops": how, "memory_GBps": how}, measured=True)
