"""The NPU implementations' device: a real Ascend device when torch_npu has one, else the NPU emulator.

Under the emulator an NPU op test checks our call sites (arguments, dtypes, layouts, how the ops are composed)
against the emulated ops' documented semantics and rules (torch_npu 2.14.0 schemas, docs/npu_emulator.md);
it says nothing about the real kernels' numerics. The emulator is active only while such a test runs: what
it leaves behind process-wide (the "npu" device name, the torch.ops.npu registrations) is what the
emulator tests in the same worker leave too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _compare import EMULATED_NPU_PLATFORM, real_npu_available


@pytest.fixture
def npu_device() -> Iterator[str]:
    """The device NPU inputs go to: "npu" on real hardware, else "cpu" with the emulator active for the test."""
    if real_npu_available():
        yield "npu"
        return
    from perfbench.emulation import npu

    npu.activate(EMULATED_NPU_PLATFORM)
    try:
        yield npu.tensor_device("npu")
    finally:
        npu.deactivate()


@pytest.fixture(autouse=True)
def _npu_impl_device(request: pytest.FixtureRequest) -> None:
    """Tests parametrized with an NPU `impl` get `npu_device` (the emulator when there is no Ascend device)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and str(callspec.params.get("impl", "")).startswith("npu"):
        request.getfixturevalue("npu_device")
