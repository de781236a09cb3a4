"""Registers the emulated ops under torch.ops.npu (and torchair's under torch.ops.air) with torch_npu 2.14.0's
exact schemas: a CPU kernel (kernels.py) and a fake kernel (meta.py) per op.

torch.ops.air.* (torchair.ops' attention ops) keep the real behaviour outside a GE graph: their CPU kernel
raises, as torchair's own does ("only support in max-autotune mode"); the emulated GE compiler
(compiler.py) swaps them for the torch.ops.npu op, as GE's converter does on hardware.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perfbench.emulation.npu import faults, kernels, meta
from perfbench.emulation.npu.schemas import schema_strings

_libraries: list[torch.library.Library] = []  # kept alive: a Library's registrations die with it


def _air_refusal(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"torch.ops.air.{name} only supports running in max-autotune mode (a torchair GE graph); "
            f"call torch.ops.npu.{name} outside one [emulated npu]")
    return refuse


def _air_fake(name: str) -> Callable[..., Any]:
    npu_fake = getattr(meta, name)

    def fake(*args: Any, **kwargs: Any) -> Any:
        return npu_fake(*args, **kwargs)
    return fake


def register() -> None:
    """Define every op of schemas.yaml once per process."""
    if _libraries:
        return
    strings = schema_strings()
    npu = torch.library.Library("npu", "DEF")
    for name, schema in strings["npu"].items():
        npu.define(schema)
        # faults (PERFBENCH_VERIFY_FAULT, a test hook) are looked up at call time; none: the kernel as is
        npu.impl(name, faults.guarded_kernel(name, getattr(kernels, name)), "CPU")
        torch.library.register_fake(f"npu::{name}", getattr(meta, name), lib=npu)
    air = torch.library.Library("air", "DEF")
    for name, schema in strings["air"].items():
        air.define(schema)
        air.impl(name, _air_refusal(name), "CPU")
        torch.library.register_fake(f"air::{name}", _air_fake(name), lib=air)
    _libraries.extend((npu, air))


def exposed_ops() -> list[str]:
    """The ops torch_npu exposes under the emulator: all of schemas.yaml but an injected op_missing."""
    missing = faults.missing_ops()
    return [name for name in schema_strings()["npu"] if name not in missing]
