"""The emulator's fault hook (PERFBENCH_VERIFY_FAULT): its grammar, and each fault's effect on an op kernel, a
graph backend and the emulated torch_npu, checked in this process without killing or registering anything."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from perfbench.emulation.npu import faults
from perfbench.emulation.npu.faults import Fault, FaultSpecError, InjectedFault

pytestmark = pytest.mark.npu_emulated


@pytest.fixture
def injected() -> Iterator[object]:
    """Call injected(faults...) in a test; no fault is active after it."""
    yield lambda *found: faults.install(tuple(found))
    faults.install(())


def test_parse_reads_every_kind():
    assert faults.parse(" op_raises:npu_rms_norm, graph_capture:ge,rank_dies:1,op_missing:npu_swiglu") == (
        Fault("op_raises", "npu_rms_norm"), Fault("graph_capture", "ge"), Fault("rank_dies", "1"),
        Fault("op_missing", "npu_swiglu"))
    assert faults.parse("") == () and str(Fault("graph_capture")) == "graph_capture"


@pytest.mark.parametrize(("text", "message"), [
    ("op_explodes:npu_rms_norm", "unknown fault 'op_explodes'"),
    ("op_raises:npu_rms_nrom", "names no torch_npu 2.14.0 op"),
    ("graph_capture:inductor", "graph_capture takes no target or one of ge, npugraph_ex"),
    ("rank_dies:one", "rank_dies needs a rank number"),
])
def test_parse_names_the_bad_part(text: str, message: str):
    with pytest.raises(FaultSpecError, match=message):
        faults.parse(text)


def test_op_raises_names_the_call(injected):
    kernel = faults.guarded_kernel("npu_rms_norm", lambda x, gamma, epsilon=1e-6: (x, x))
    x, gamma = torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(8, dtype=torch.bfloat16)
    assert kernel(x, gamma)[0] is x  # no fault: the kernel as is
    injected(Fault("op_raises", "npu_rms_norm"))
    with pytest.raises(InjectedFault) as err:
        kernel(x, gamma, epsilon=1e-5)
    assert "npu_rms_norm(self=bfloat16[2, 8], gamma=bfloat16[8], epsilon=1e-05)" in str(err.value)
    other = faults.guarded_kernel("npu_swiglu", lambda x, dim=-1: x)
    assert other(x) is x  # only the named op


def test_op_numerics_doubles_the_first_output(injected):
    injected(Fault("op_numerics", "npu_rms_norm"))
    kernel = faults.guarded_kernel("npu_rms_norm", lambda x, gamma, epsilon=1e-6: (x.clone(), torch.ones(1)))
    y, rstd = kernel(torch.full((2,), 3.0), torch.ones(2))
    assert y.tolist() == [6.0, 6.0] and rstd.tolist() == [1.0]


def test_graph_capture_and_missing_ops(injected):
    faults.check_graph_capture("ge")  # nothing injected: no error
    injected(Fault("graph_capture", "npugraph_ex"), Fault("op_missing", "npu_swiglu"))
    faults.check_graph_capture("ge")
    with pytest.raises(InjectedFault, match="npugraph_ex graph capture"):
        faults.check_graph_capture("npugraph_ex")
    assert faults.missing_ops() == {"npu_swiglu"}
    from perfbench.emulation.npu.registry import exposed_ops

    assert "npu_swiglu" not in exposed_ops() and "npu_rms_norm" in exposed_ops()
    faults.check_rank_alive(0)  # rank_dies is not injected: this process lives on
