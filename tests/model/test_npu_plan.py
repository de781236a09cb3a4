"""NPU plan rules (docs/npu_rules.md) with fake capabilities: every requirement, its reason, and every NPU
branch of `build_ops`, per platform. Pure Python: no torch_npu, no compile."""

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

PLATFORMS = ("910b", "910_93", "950")
EP2 = ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=1, embed_tp_size=2, lmhead_tp_size=2)
TP2 = ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=2, embed_tp_size=2, lmhead_tp_size=2)


def npu_caps(platform: str = "910b", torchair: bool = True, ops: frozenset[str] | None = None) -> Capabilities:
    return Capabilities(device="npu", device_name=f"Ascend {platform} (fake)", torch_npu=True, torchair=torchair,
                        npu_ops=frozenset(NPU_OPS) if ops is None else ops, npu_platform=platform)


def with_dims(**dims: int) -> Qwen3_5MoeTextConfig:
    return Qwen3_5MoeTextConfig(**{**Qwen3_5MoeTextConfig.qwen3_5_35b_a3b().__dict__, **dims})


def decision(plan, name):
    d = plan.decisions[name]
    return d.state, d.reason


@pytest.mark.parametrize(("device_name", "platform"), [
    ("Ascend910B3", "910b"), ("Ascend910B4", "910b"), ("Ascend910_9391", "910_93"), ("Ascend950PR", "950"),
])
def test_platform_names_follow_the_device_name(device_name, platform):
    assert _npu_platform(device_name) == platform


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize(("dtype", "state"), [("float32", "inactive"), ("bfloat16", "on"),
                                              ("float16", "on")])
def test_fused_attention_needs_half_precision(platform, dtype, state):
    plan = resolve_plan({"fused_attention": True}, npu_caps(platform), dtype=dtype)
    got_state, reason = decision(plan, "fused_attention")
    assert got_state == state
    if state == "inactive":
        assert reason == "npu_fused_infer_attention_score has no float32 (bfloat16 or float16 only)"


@pytest.mark.parametrize(("head_dim", "dtype", "tnd"), [
    (64, "bfloat16", False),   # not in the documented TND set (the audit's #7)
    (128, "bfloat16", True), (192, "bfloat16", True), (256, "bfloat16", False),
    (128, "float16", False),   # TND is bf16 only
])
def test_tnd_attention_only_for_documented_head_dims_and_bf16(head_dim, dtype, tnd):
    plan = resolve_plan({"fused_attention": True}, npu_caps(), model=with_dims(head_dim=head_dim), dtype=dtype)
    assert plan.attention_variant.startswith("fia_v2_tnd") is tnd
    if not tnd:
        assert plan.attention_variant.startswith("fia_v1_bsh (")


@pytest.mark.parametrize(("dims", "reason"), [
    ({}, ""),
    ({"linear_key_head_dim": 64, "linear_value_head_dim": 64},
     "npu_chunk_gated_delta_rule needs Dk = Dv = 128 (model has 64, 64)"),
    ({"linear_value_head_dim": 64}, "npu_chunk_gated_delta_rule needs Dk = Dv = 128 (model has 128, 64)"),
    ({"linear_num_value_heads": 128},
     "npu_chunk_gated_delta_rule needs Nk, Nv <= 64 per rank with Nv a multiple of Nk (got 16, 128)"),
    ({"linear_num_key_heads": 80, "linear_num_value_heads": 80},
     "npu_chunk_gated_delta_rule needs Nk, Nv <= 64 per rank with Nv a multiple of Nk (got 80, 80)"),
    ({"linear_num_key_heads": 64, "linear_num_value_heads": 64}, ""),
])
@pytest.mark.parametrize("platform", ("910b", "910_93"))
def test_chunk_gdr_only_for_documented_dims(dims, reason, platform):
    plan = resolve_plan({"chunk_gdr": True}, npu_caps(platform), model=with_dims(**dims), dtype="bfloat16")
    assert decision(plan, "chunk_gdr") == (("inactive", reason) if reason else ("on", ""))


def test_chunk_gdr_not_on_950_and_the_tiny_preset_is_refused():
    assert decision(resolve_plan({"chunk_gdr": True}, npu_caps("950"), model=with_dims()), "chunk_gdr") == (
        "inactive", "npu_chunk_gated_delta_rule is not used on Ascend 950 (recipe)")
    state, reason = decision(resolve_plan({"chunk_gdr": True}, npu_caps(), model=Qwen3_5MoeTextConfig.tiny()),
                             "chunk_gdr")
    assert state == "inactive" and "Dk = Dv = 128" in reason


@pytest.mark.parametrize(("platform", "state", "reason"), [
    ("910b", "on", ""), ("910_93", "on", ""),
    ("950", "inactive", "MC2 dispatch/combine are documented for Atlas A2 and A3 only (platform is 950)"),
])
def test_moe_dispatch_combine_per_platform(platform, state, reason):
    plan = resolve_plan({"moe_dispatch_combine": True}, npu_caps(platform), EP2)
    assert decision(plan, "moe_dispatch_combine") == (state, reason)


@pytest.mark.parametrize(("platform", "state", "reason"), [
    ("910b", "on", ""), ("950", "on", ""),
    ("910_93", "inactive", "documented for Atlas A2 and used on Ascend 950 only (platform is 910_93)"),
])
def test_mm_all_reduce_per_platform(platform, state, reason):
    assert decision(resolve_plan({"mm_all_reduce": True}, npu_caps(platform), TP2), "mm_all_reduce") == (
        state, reason)


def test_graph_mode_reads_grouped_moes_decision_not_its_request():
    # grouped_moe requested but inactive (this torch_npu lacks npu_grouped_matmul): the expert loop would run,
    # which a static graph cannot capture, so graph_mode must be inactive too.
    caps = npu_caps(ops=frozenset(NPU_OPS) - {"npu_grouped_matmul"})
    plan = resolve_plan({"grouped_moe": True, "graph_mode": True}, caps)
    assert decision(plan, "grouped_moe") == ("inactive", "torch_npu has no npu_grouped_matmul")
    assert decision(plan, "graph_mode") == ("inactive", "needs grouped_moe on (the expert loop syncs with the host)")
    assert plan.on("graph_mode") is False
    assert resolve_plan({"grouped_moe": True, "graph_mode": True}, npu_caps()).on("graph_mode")


def test_ge_graph_needs_torchair_but_npugraph_ex_does_not():
    request = {"grouped_moe": True, "graph_mode": True}
    assert decision(resolve_plan(request, npu_caps(torchair=False)), "graph_mode") == (
        "inactive", "torchair not available")
    assert resolve_plan(request, npu_caps(torchair=False), exe_mode="npugraph_ex").on("graph_mode")


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


@pytest.mark.parametrize("platform", ("910b", "910_93"))
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


@pytest.mark.parametrize(("platform", "state"), [("910b", "on"), ("910_93", "inactive")])
def test_mc2_on_a3_needs_hidden_size_in_its_range(platform, state):
    plan = resolve_plan({"moe_dispatch_combine": True}, npu_caps(platform), EP2, Qwen3_5MoeTextConfig.tiny())
    assert plan.decisions["moe_dispatch_combine"].state == state
    if state == "inactive":
        assert plan.decisions["moe_dispatch_combine"].reason == (
            "MC2 on Atlas A3 needs hidden_size in [1024, 8192] (model has 256)")


def test_mm_all_reduce_needs_a_tp_group_of_2_4_or_8():
    tp6 = ParallelConfig(world_size=6, attn_tp_size=6, moe_tp_size=6, embed_tp_size=6, lmhead_tp_size=6)
    assert decision(resolve_plan({"mm_all_reduce": True}, npu_caps("910b"), tp6), "mm_all_reduce") == (
        "inactive", "needs a TP group of 2, 4 or 8 ranks (attn_tp_size is 6)")
