"""Device detection and capabilities: the only place that probes torch_npu, torchair, CUDA or fla.

Everything here is read once (`detect_capabilities`) and handed to the plan; layers never probe.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

DEVICES = ("cpu", "cuda", "npu")

# torch_npu ops each toggle calls (docs/npu_ops.md); a torch_npu build lacking one makes that toggle inactive.
NPU_OPS = (
    "npu_rotary_mul", "npu_rms_norm", "npu_add_rms_norm", "npu_fused_infer_attention_score",
    "npu_fused_infer_attention_score_v2", "npu_chunk_gated_delta_rule", "npu_recurrent_gated_delta_rule",
    "npu_mm_all_reduce_base", "npu_moe_distribute_dispatch_v2", "npu_moe_distribute_combine_v2",
    "npu_grouped_matmul", "npu_swiglu", "npu_moe_gating_top_k_softmax", "npu_moe_init_routing_v2",
    "npu_moe_finalize_routing", "npu_moe_re_routing",
)


@dataclass(frozen=True)
class Capabilities:
    """What this process can run. `npu_platform` is "950", "A3", "A2" or "" (no NPU)."""

    device: str
    device_name: str
    torch_npu: bool = False
    torchair: bool = False
    npu_platform: str = ""
    npu_ops: frozenset[str] = field(default_factory=frozenset)
    fla: bool = False
    triton: bool = False
    # inductor's CPU code generation builds C++ at run time; without a compiler every inductor-based CPU
    # implementation fails on first use, so the plan marks them inactive instead
    inductor: bool = True

    def has_npu_op(self, name: str) -> bool:
        return name in self.npu_ops


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def cpp_compiler() -> str | None:
    """Path of the C++ compiler inductor would use on CPU (`$CXX`, else g++), None when there is none."""
    return shutil.which(os.environ.get("CXX") or "g++")


def _npu_platform(name: str) -> str:
    # Same mapping as the recipe's auto-detect (npu_recipe.md section 7).
    if "950" in name:
        return "950"
    if "910_93" in name:
        return "A3"
    if "910B" in name:
        return "A2"
    return "A3"


def detect_capabilities(device: str = "auto") -> Capabilities:
    """Probe the process once. `device` "auto" picks npu, then cuda, then cpu."""
    npu_available = False
    npu_ops: frozenset[str] = frozenset()
    torchair = False
    if _importable("torch_npu"):
        try:
            torch_npu = importlib.import_module("torch_npu")
            npu_available = bool(torch.npu.is_available())  # type: ignore[attr-defined]
            npu_ops = frozenset(op for op in NPU_OPS if hasattr(torch_npu, op))
            torchair = _importable("torchair")
        except Exception:  # noqa: BLE001 - a broken torch_npu install means no NPU, not a crash
            npu_available = False
    if device == "auto":
        device = "npu" if npu_available else "cuda" if torch.cuda.is_available() else "cpu"
    if device not in DEVICES:
        raise ValueError(f"`device` must be one of auto, {', '.join(DEVICES)}; got {device!r}")
    if device == "npu" and not npu_available:
        raise RuntimeError("device npu requested but torch_npu is not available in this environment")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda requested but torch.cuda.is_available() is False")
    if device == "npu":
        name = torch.npu.get_device_name()  # type: ignore[attr-defined]
    elif device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        import platform

        name = platform.processor() or platform.machine() or "cpu"
    return Capabilities(
        device=device,
        device_name=name,
        torch_npu=npu_available,
        torchair=torchair,
        npu_platform=_npu_platform(name) if device == "npu" else "",
        npu_ops=npu_ops,
        fla=device == "cuda" and _importable("fla"),
        triton=_importable("triton"),
        inductor=device != "cpu" or cpp_compiler() is not None,
    )


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "npu":
        torch.npu.synchronize()  # type: ignore[attr-defined]


_T = TypeVar("_T")


def timed(device: str, fn: Callable[[], _T]) -> tuple[_T, float]:
    """Run `fn` bounded by device synchronization; returns (result, seconds). The one timer of the project."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def dist_backend(device: str) -> str:
    return {"npu": "hccl", "cuda": "nccl"}.get(device, "gloo")


PROC_SELF = Path("/proc/self")


def reset_peak_memory(device: str) -> None:
    """Start the peak of `peak_memory_mb` afresh (on CPU: Linux's peak RSS, so a process that measures several
    runs reports each one's own peak; elsewhere on CPU the process's lifetime peak stays)."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    elif device == "npu":
        torch.npu.reset_peak_memory_stats()  # type: ignore[attr-defined]
    else:
        with contextlib.suppress(OSError):
            (PROC_SELF / "clear_refs").write_text("5")  # 5: reset the peak resident set size (VmHWM)


def peak_memory_mb(device: str) -> float:
    """Peak device memory of this process since `reset_peak_memory` (CPU: peak resident set size)."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    if device == "npu":
        return torch.npu.max_memory_allocated() / 2**20  # type: ignore[attr-defined]
    try:
        for line in (PROC_SELF / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
