"""Plans bind the op the device can actually run, and say which one."""

from __future__ import annotations

import pytest

from model.backend import Capabilities
from model.ops import gdn
from model.ops.opset import build_ops
from model.optimizations import resolve_plan


@pytest.mark.parametrize(("fla", "impl", "words"), [
    (True, gdn.gdr_prefill_cuda, "fla"),
    (False, gdn.gdr_prefill_chunked, "fla not installed"),
])
def test_chunk_gdr_on_cuda_binds_fla_only_when_installed(fla: bool, impl, words: str) -> None:
    plan = resolve_plan("all", Capabilities(device="cuda", device_name="test GPU", fla=fla, triton=fla))
    decision = plan.decisions["chunk_gdr"]
    assert decision.state == "on" and words in decision.impl
    assert build_ops(plan).gdr_prefill is impl


def test_chunk_gdr_on_cpu_binds_the_chunked_kernel() -> None:
    plan = resolve_plan({"chunk_gdr": True}, Capabilities(device="cpu", device_name="cpu"))
    assert build_ops(plan).gdr_prefill is gdn.gdr_prefill_cpu
    off = resolve_plan("none", Capabilities(device="cpu", device_name="cpu"))
    assert build_ops(off).gdr_prefill is gdn.gdr_prefill_ref
