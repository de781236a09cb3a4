"""Every NPU branch of `build_ops` per platform and exe mode, with fake capabilities and fake op objects
(the plan's requirements are in test_npu_plan.py). Pure Python: no torch_npu, no compile."""

from __future__ import annotations

import functools
import sys
import types

import pytest
import torch

from model.backend import NPU_OPS, Capabilities, _npu_platform
from model.config import Qwen3_5MoeTextConfig
from model.ops import attention, build_ops, comm, graph
from model.optimizations import resolve_plan
from model.parallel_config import ParallelConfig

pytestmark = pytest.mark.npu_emulated

PLATFORMS = ("A2", "A3", "950")
EP2 = ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=1, embed_tp_size=2, lmhead_tp_size=2)


def npu_caps(platform: str = "A2", torchair: bool = True, ops: frozenset[str] | None = None) -> Capabilities:
    return Capabilities(device="npu", device_name=f"Ascend {platform} (fake)", torch_npu=True, torchair=torchair,
                        npu_ops=frozenset(NPU_OPS) if ops is None else ops, npu_platform=platform)


def with_dims(**dims: int) -> Qwen3_5MoeTextConfig:
    return Qwen3_5MoeTextConfig(**{**Qwen3_5MoeTextConfig.qwen3_5_35b_a3b().__dict__, **dims})


def decision(plan, name):
    d = plan.decisions[name]
    return d.state, d.reason


@pytest.mark.parametrize(("device_name", "platform"), [
    ("Ascend910B3", "A2"), ("Ascend910B4", "A2"), ("Ascend910_9391", "A3"), ("Ascend950PR", "950"),
])
def test_platform_names_follow_the_device_name(device_name, platform):
    assert _npu_platform(device_name) == platform


def test_grouped_moe_on_cuda_needs_bf16():
    cuda = Capabilities(device="cuda", device_name="fake gpu")
    assert decision(resolve_plan({"grouped_moe": True}, cuda, dtype="float32"), "grouped_moe") == (
        "inactive", "grouped matmul on cuda needs bfloat16 (model dtype is float32)")
    assert resolve_plan({"grouped_moe": True}, cuda, dtype="bfloat16").on("grouped_moe")


# ---- build_ops: which FIA op each mode binds ------------------------------------------------------------

def _fake_fia(tag: str):
    def op(*args, **kwargs):
        return tag, None
    op.tag = tag
    return op


class FakeTorchair:
    """Like torch_npu's lazy torchair proxy: an object in sys.modules that is not a module."""

    def __init__(self) -> None:
        self.ops = types.SimpleNamespace(npu_fused_infer_attention_score=_fake_fia("air_v1"),
                                         npu_fused_infer_attention_score_v2=_fake_fia("air_v2"))


@pytest.fixture
def fake_npu_ops(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch.ops, "npu", types.SimpleNamespace(
        npu_fused_infer_attention_score=_fake_fia("npu_v1"),
        npu_fused_infer_attention_score_v2=_fake_fia("npu_v2")), raising=False)
    monkeypatch.setitem(sys.modules, "torchair", FakeTorchair())


GRAPH_CASES = [  # (exe_mode, graph_mode requested, graph_mode on, decode op is torchair.ops with Tensor lengths)
    ("ge_graph", True, True, True),
    ("npugraph_ex", True, False, False),  # npugraph_ex cannot capture FIA's host lengths: graph_mode inactive
    ("ge_graph", False, False, False),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize(("head_dim", "variant"), [(256, "v1"), (128, "v2")])
@pytest.mark.parametrize(("exe_mode", "graph_requested", "graph_on", "air"), GRAPH_CASES)
def test_build_ops_binds_fia_per_exe_mode(fake_npu_ops, platform, head_dim, variant, exe_mode, graph_requested,
                                          graph_on, air):
    request = {"fused_attention": True, "grouped_moe": True, "graph_mode": graph_requested}
    plan = resolve_plan(request, npu_caps(platform), model=with_dims(head_dim=head_dim), exe_mode=exe_mode,
                        dtype="bfloat16")
    assert plan.on("graph_mode") is graph_on
    if graph_requested and not graph_on:
        assert plan.decisions["graph_mode"].reason.startswith("npugraph_ex cannot capture fused attention")
    ops = build_ops(plan)
    tnd = variant == "v2"
    assert ops.attention_decode.func is (attention.attention_decode_npu_tnd if tnd else attention.attention_decode_npu)
    assert ops.attention_decode.keywords["fia"].tag == ("air_" if air else "npu_") + variant
    assert ops.attention_decode.keywords["tensor_lengths"] is air
    assert ops.attention_prefill is attention.ATTENTION_PREFILL["npu_tnd" if tnd else "npu"]
    if graph_on:
        assert ops.compile_decode.func is graph.compile_npu_ge
        # TND FIA does not support tiling_schedule_optimize (the audit's #10 / #30)
        assert ops.compile_decode.keywords == {"tnd_attention": tnd}
    else:
        assert ops.compile_decode is graph.eager


def test_npugraph_ex_without_fused_attention_binds_graph_ex():
    plan = resolve_plan({"grouped_moe": True, "graph_mode": True}, npu_caps(), exe_mode="npugraph_ex")
    assert build_ops(plan).compile_decode is graph.compile_npu_graph_ex


@pytest.mark.parametrize("platform", ("A2", "A3"))
@pytest.mark.parametrize("graph_on", (True, False))
def test_build_ops_binds_mc2_with_platform_and_graph(platform, graph_on):
    plan = resolve_plan({"moe_dispatch_combine": True, "grouped_moe": True, "graph_mode": graph_on},
                        npu_caps(platform), EP2)
    bound = build_ops(plan).moe_ep_decode
    assert isinstance(bound, functools.partial) and bound.func is comm.ep_dispatch_combine_npu
    assert bound.keywords == {"platform": platform, "in_graph": graph_on}


def test_no_fused_attention_binds_the_reference():
    ops = build_ops(resolve_plan({"fused_attention": False}, npu_caps(), dtype="bfloat16"))
    assert ops.attention_decode is attention.ATTENTION_DECODE["ref"]

