"""The fake `torch_npu` and `torchair` modules and `torch.npu`, installed into sys.modules by activate().

As with torch_npu 2.14.0, sys.modules["torchair"] is a lazy stand-in object (torch_npu.dynamo's
_LazyTorchair), not a module: attribute access reaches the real (here: emulated) torchair, but
`import torchair` inside a dynamo-traced function fails ("Bad import result"), as it does on hardware.
Submodules (torchair.configs.compiler_config, torchair.inference, torchair.ops) are real modules.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any

import torch

from perfbench.emulation.npu import compiler, profiler, runtime
from perfbench.emulation.npu.platforms import Platform
from perfbench.emulation.npu.registry import exposed_ops

TORCH_NPU_VERSION = "2.14.0"


def _module(name: str, doc: str) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module


class _LazyTorchair:
    """What torch_npu leaves in sys.modules["torchair"]: an object that forwards attribute access."""

    def __init__(self, real: types.ModuleType) -> None:
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_real"), name)


def build_modules(p: Platform) -> dict[str, Any]:
    """sys.modules entries: torch_npu (+ .profiler, .npu), torchair (lazy stand-in) and its submodules."""
    torch_npu = _module("torch_npu", f"torch_npu {TORCH_NPU_VERSION} API, {p.label}: ops run on CPU")
    torch_npu.__version__ = TORCH_NPU_VERSION  # type: ignore[attr-defined]
    torch_npu.__emulated__ = p.label  # type: ignore[attr-defined]
    for name in exposed_ops():
        setattr(torch_npu, name, getattr(torch.ops.npu, name))
    prof = profiler.build_module()
    torch_npu.profiler = prof  # type: ignore[attr-defined]

    inference_ex = _module("torch.npu.npugraph_ex.inference", "npugraph_ex cache_compile (emulated)")
    inference_ex.cache_compile = compiler.npugraph_ex_cache_compile  # type: ignore[attr-defined]
    npugraph_ex = _module("torch.npu.npugraph_ex", "npugraph_ex (emulated)")
    npugraph_ex.inference = inference_ex  # type: ignore[attr-defined]
    npu_runtime = runtime.build_module(npugraph_ex)
    torch_npu.npu = npu_runtime  # type: ignore[attr-defined]

    air = _module("torchair", f"torchair (bundled with torch_npu {TORCH_NPU_VERSION}), {p.label}")
    configs = _module("torchair.configs", "")
    compiler_config = _module("torchair.configs.compiler_config", "")
    compiler_config.CompilerConfig = compiler.CompilerConfig  # type: ignore[attr-defined]
    configs.compiler_config = compiler_config  # type: ignore[attr-defined]
    inference = _module("torchair.inference", "")
    inference.cache_compile = compiler.cache_compile  # type: ignore[attr-defined]
    ops = _module("torchair.ops", "")
    for name in ("npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2"):
        setattr(ops, name, getattr(torch.ops.air, name))
    air.CompilerConfig = compiler.CompilerConfig  # type: ignore[attr-defined]
    air.get_npu_backend = compiler.get_npu_backend  # type: ignore[attr-defined]
    air.configs, air.inference, air.ops = configs, inference, ops  # type: ignore[attr-defined]
    return {
        "torch_npu": torch_npu, "torch_npu.profiler": prof, "torch_npu.npu": npu_runtime,
        "torch.npu": npu_runtime, "torch.npu.npugraph_ex": npugraph_ex,
        "torch.npu.npugraph_ex.inference": inference_ex,
        "torchair": _LazyTorchair(air), "torchair.configs": configs,
        "torchair.configs.compiler_config": compiler_config, "torchair.inference": inference, "torchair.ops": ops,
    }


_installed: list[str] = []


def install(p: Platform) -> None:
    uninstall()
    entries = build_modules(p)
    sys.modules.update(entries)
    torch.npu = entries["torch.npu"]  # type: ignore[attr-defined]
    _installed.extend(entries)


def uninstall() -> None:
    for name in _installed:
        sys.modules.pop(name, None)
    if _installed and hasattr(torch, "npu"):
        delattr(torch, "npu")
    _installed.clear()
