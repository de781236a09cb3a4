"""The NPU emulator: torch_npu / torchair / torch.npu / HCCL stand-ins that run NPU code paths on CPU.

    from perfbench.emulation import npu
    npu.activate("910b")          # Atlas A2; "910_93" = A3, "950" = Ascend 950
    caps = detect_capabilities("npu")   # device "npu", platform A2, every op present
    # build the model with caps and tensors on npu.tensor_device("npu") == "cpu"

What it tells you and what it cannot: docs/npu_emulator.md. Everything it produces is labelled
"emulated npu (<platform>)"; its timings are CPU timings.

`ENV_VAR` carries the platform to child processes: perfbench's runner sets it, the worker calls
`activate_from_env()` before importing the model.
"""

from __future__ import annotations

import os
from typing import Any

from perfbench.emulation.npu.platforms import PLATFORMS, Platform, PlatformError, active, platform, set_active

# torch is imported on first use (activate, tensor_device, NpuRuleError): the CLI imports this package for the
# platform names only.
__all__ = ["ENV_VAR", "PLATFORMS", "NpuRuleError", "Platform", "PlatformError", "activate", "active",
           "activate_from_env", "deactivate", "label", "tensor_device"]

ENV_VAR = "PERFBENCH_EMULATE_NPU"


def activate(key: str) -> Platform:
    """Install the emulator for platform `key` ("910b", "910_93", "950") in this process (and its children)."""
    import torch

    from perfbench.emulation.npu import compiler, faults, hccl, modules, registry

    p = platform(key)
    faults.load_from_env()  # PERFBENCH_VERIFY_FAULT, a test hook (faults.py); before the modules list the ops
    set_active(p)
    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
        # Renaming makes torch.accelerator report "npu", and dynamo would then ask it for a current stream,
        # which this CPU build cannot give. Emulated tensors live on the CPU: there is no accelerator.
        torch.accelerator.is_available = _no_accelerator
    registry.register()
    hccl.install()
    compiler.register_backends()
    modules.install(p)
    os.environ[ENV_VAR] = p.key
    return p


def _no_accelerator() -> bool:
    return False


def deactivate() -> None:
    """Remove the fake modules and torch.npu (the op registrations and the 'npu' device name stay)."""
    from perfbench.emulation.npu import faults, modules

    modules.uninstall()
    faults.install(())
    set_active(None)
    os.environ.pop(ENV_VAR, None)


def activate_from_env() -> Platform | None:
    key = os.environ.get(ENV_VAR, "")
    return activate(key) if key else None


def label() -> str | None:
    """"emulated npu (<platform>)" while active, else None."""
    p = active()
    return p.label if p else None


def tensor_device(device: str) -> str:
    from perfbench.emulation.npu.runtime import tensor_device as mapped

    return mapped(device)


def __getattr__(name: str) -> Any:
    if name == "NpuRuleError":
        from perfbench.emulation.npu.rules import NpuRuleError

        return NpuRuleError
    raise AttributeError(name)
