"""NPU plans without an NPU: every per-platform requirement and its reason, from the op documents' rules
(docs/npu_rules.md). Capabilities are built by hand, so these run anywhere in milliseconds."""

from __future__ import annotations

import dataclasses

import pytest

from model.backend import NPU_OPS, Capabilities
from model.config import Qwen3_5MoeTextConfig
from model.optimizations import npu_attention_variant, resolve_plan
from model.parallel_config import ParallelConfig

pytestmark = pytest.mark.npu_emulated

PLATFORMS = ("A2", "A3", "950")
QWEN35 = Qwen3_5MoeTextConfig.qwen3_5_35b_a3b()
TINY = Qwen3_5MoeTextConfig.tiny()
TP2 = ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=2, embed_tp_size=2, lmhead_tp_size=2)
EP2 = ParallelConfig(world_size=2, attn_tp_size=2, embed_tp_size=2, lmhead_tp_size=2)  # moe_tp 1: EP over 2


def npu(platform: str, *, torchair: bool = True, missing: tuple[str, ...] = ()) -> Capabilities:
    return Capabilities(device="npu", device_name=f"test {platform}", torch_npu=True, torchair=torchair,
                        npu_platform=platform, npu_ops=frozenset(NPU_OPS) - set(missing))


def decision(toggle: str, caps: Capabilities, parallel: ParallelConfig | None = None,
             model: Qwen3_5MoeTextConfig = QWEN35, dtype: str = "bfloat16", exe_mode: str = "ge_graph",
             request: str | dict[str, bool] = "all"):
    return resolve_plan(request, caps, parallel, model, exe_mode=exe_mode, dtype=dtype).decisions[toggle]


@pytest.mark.parametrize(("platform", "state", "words"), [
    ("A2", "on", ""), ("950", "on", ""), ("A3", "inactive", "documented for Atlas A2 and used on Ascend 950"),
])
def test_mm_all_reduce_platforms(platform: str, state: str, words: str) -> None:
    d = decision("mm_all_reduce", npu(platform), TP2)
    assert d.state == state and words in d.reason


def test_mm_all_reduce_needs_a_documented_tp_size() -> None:
    tp6 = ParallelConfig(world_size=6, attn_tp_size=6, moe_tp_size=6, embed_tp_size=6, lmhead_tp_size=6)
    d = decision("mm_all_reduce", npu("A2"), tp6, model=dataclasses.replace(QWEN35, num_attention_heads=12,
                                                                              num_key_value_heads=6))
    assert d.state == "inactive" and "2, 4 or 8 ranks" in d.reason


@pytest.mark.parametrize("platform", PLATFORMS)
def test_chunk_gdr_dims_and_platform(platform: str) -> None:
    full = decision("chunk_gdr", npu(platform))
    small = decision("chunk_gdr", npu(platform), model=TINY)
    if platform == "950":  # the recipe keeps the torch path on 950, whatever the dims
        assert full.state == small.state == "inactive" and "950" in full.reason
        return
    assert full.state == "on"
    assert small.state == "inactive" and "Dk = Dv = 128" in small.reason
    many_heads = dataclasses.replace(QWEN35, linear_num_value_heads=128, linear_num_key_heads=32)
    assert "Nk, Nv <= 64" in decision("chunk_gdr", npu(platform), model=many_heads).reason
    # per rank: TP2 halves the heads, which brings them within the documented bound
    assert decision("chunk_gdr", npu(platform), TP2, model=many_heads).state == "on"


@pytest.mark.parametrize("platform", PLATFORMS)
def test_fused_attention_has_no_fp32(platform: str) -> None:
    assert decision("fused_attention", npu(platform), dtype="bfloat16").state == "on"
    fp32 = decision("fused_attention", npu(platform), dtype="float32")
    assert fp32.state == "inactive" and "no float32" in fp32.reason
    assert decision("fused_attention", Capabilities(device="cpu", device_name="cpu"), dtype="float32").state == "on"


@pytest.mark.parametrize(("head_dim", "dtype", "variant"), [
    (256, "bfloat16", "fia_v1_bsh"), (64, "bfloat16", "fia_v1_bsh"), (128, "float16", "fia_v1_bsh"),
    (128, "bfloat16", "fia_v2_tnd_paged"), (192, "bfloat16", "fia_v2_tnd_paged"),
])
def test_tnd_only_for_documented_head_dims_in_bf16(head_dim: int, dtype: str, variant: str) -> None:
    model = dataclasses.replace(QWEN35, head_dim=head_dim)
    assert npu_attention_variant(model, dtype).startswith(variant)
    plan = resolve_plan("all", npu("A2"), None, model, dtype=dtype)
    assert plan.attention_variant.startswith(variant) and variant in plan.decisions["fused_attention"].impl


@pytest.mark.parametrize(("platform", "model", "state", "words"), [
    ("A2", TINY, "on", ""),
    ("A3", QWEN35, "on", ""),
    ("A3", TINY, "inactive", "hidden_size in [1024, 8192]"),
    ("950", QWEN35, "inactive", "documented for Atlas A2 and A3 only"),
])
def test_mc2_platforms(platform: str, model: Qwen3_5MoeTextConfig, state: str, words: str) -> None:
    d = decision("moe_dispatch_combine", npu(platform), EP2, model=model)
    assert d.state == state and words in d.reason


def test_graph_mode_reads_the_grouped_moe_decision_not_the_request() -> None:
    # grouped_moe requested but inactive (this torch_npu lacks npu_grouped_matmul): the host-syncing expert loop
    # stays, so a static decode graph cannot capture it
    caps = npu("A2", missing=("npu_grouped_matmul",))
    plan = resolve_plan("all", caps, None, QWEN35, dtype="bfloat16")
    assert plan.decisions["grouped_moe"].state == "inactive"
    assert plan.decisions["graph_mode"].state == "inactive"
    assert "needs grouped_moe on" in plan.decisions["graph_mode"].reason


@pytest.mark.parametrize("platform", PLATFORMS)
def test_ep_graph_mode_needs_the_mc2_exchange(platform: str) -> None:
    # a perfbench verify full run (--emulate-npu 950) found EP2 + graph mode failing its capture without MC2
    graph = decision("graph_mode", npu(platform), EP2)
    if platform == "950":  # MC2 is not documented there: the double-routing exchange would sync with the host
        assert graph.state == "inactive" and "needs moe_dispatch_combine on" in graph.reason
    else:
        assert graph.state == "on"
    no_mc2 = decision("graph_mode", npu(platform), EP2, request={"graph_mode": True, "grouped_moe": True})
    assert no_mc2.state == "inactive" and "double routing syncs split sizes" in no_mc2.reason
    assert decision("graph_mode", npu(platform), TP2).state == "on"


def test_npugraph_ex_cannot_capture_fused_attention() -> None:
    with_fia = decision("graph_mode", npu("A2"), exe_mode="npugraph_ex")
    assert with_fia.state == "inactive" and "npugraph_ex" in with_fia.reason
    without = decision("graph_mode", npu("A2"), exe_mode="npugraph_ex",
                       request={"graph_mode": True, "grouped_moe": True})
    assert without.state == "on" and without.impl == "torchair npugraph_ex"
    assert decision("graph_mode", npu("A2"), exe_mode="ge_graph").impl == "torchair ge_graph"


def test_ge_graph_needs_torchair() -> None:
    d = decision("graph_mode", npu("A2", torchair=False))
    assert d.state == "inactive" and d.reason == "torchair not available"


def test_dtype_rules_apply_only_when_the_dtype_is_known() -> None:
    assert decision("fused_attention", npu("A2"), dtype="").state == "on"
