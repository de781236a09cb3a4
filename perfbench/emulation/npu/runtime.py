"""`torch.npu` under the emulator, and the device mapping.

Device mapping: the model and the plan see device "npu" (Capabilities.device == "npu", plans pick the NPU
ops), but tensors live on the CPU: an emulated process never allocates on "npu". `tensor_device("npu")` is
"cpu"; perfbench maps the device it hands to tensor constructors through it. torch.device("npu") still
parses (PrivateUse1 is renamed "npu") because torch_npu's own API takes it, e.g.
`group._get_backend(torch.device("npu"))`; a tensor moved to it fails loudly, which is the point.
"""

from __future__ import annotations

import os
import resource
import types

import torch

from perfbench.emulation.npu.platforms import require_active


def tensor_device(device: str) -> str:
    """Where this process puts the tensors of `device`: "npu"/"npu:N" -> "cpu" while the emulator is active,
    `device` unchanged otherwise (on real hardware too)."""
    from perfbench.emulation.npu.platforms import active

    return "cpu" if active() is not None and device.split(":", 1)[0] == "npu" else device


class _Runtime:
    current = 0


def is_available() -> bool:
    return True


def device_count() -> int:
    # one emulated device per local rank: torchrun starts one process per NPU
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def set_device(device: int | str | torch.device) -> None:
    index = device.index if isinstance(device, torch.device) else int(str(device).rsplit(":", 1)[-1])
    if not 0 <= (index or 0) < device_count():
        raise RuntimeError(f"set_device: invalid device {device!r} ({device_count()} emulated npu devices)")
    _Runtime.current = index or 0


def current_device() -> int:
    return _Runtime.current


def synchronize(device: object = None) -> None:
    """CPU kernels finish before they return: nothing to wait for."""


def get_device_name(device_name: object = None) -> str:
    return require_active().device_name


def max_memory_allocated(device: object = None) -> int:
    """Peak resident set size of this process in bytes (emulated: host memory, not device memory)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_allocated(device: object = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: object = None) -> None:
    """ru_maxrss cannot be reset; the emulated peak is the process's."""


def empty_cache() -> None:
    """No caching allocator under the emulator."""


def build_module(npugraph_ex: types.ModuleType) -> types.ModuleType:
    module = types.ModuleType("torch.npu", "torch.npu runtime calls, emulated on CPU (perfbench NPU emulator)")
    for fn in (is_available, device_count, set_device, current_device, synchronize, get_device_name,
               max_memory_allocated, memory_allocated, reset_peak_memory_stats, empty_cache):
        setattr(module, fn.__name__, fn)
    module.npugraph_ex = npugraph_ex  # type: ignore[attr-defined]
    return module
