"""Plan resolution under the emulator: the capabilities an emulated platform reports drive the same
per-platform choices as a real one: npu_mm_all_reduce_base is documented for Atlas A2 and run by the recipe on
950 (npu_ops.md 2.9, npu_recipe.md 2.1), the chunked GDN op is not used on 950 (recipe), MC2 dispatch/combine
contracts exist for A2 and A3 only (npu_ops.md 2.14)."""

from __future__ import annotations

import pytest

from model.backend import detect_capabilities
from model.config import Qwen3_5MoeTextConfig
from model.optimizations import resolve_plan
from model.parallel_config import ParallelConfig

pytestmark = pytest.mark.npu_emulated
TP2 = ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=2, embed_tp_size=2, lmhead_tp_size=2)
EP2 = ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=1, embed_tp_size=2, lmhead_tp_size=2)


def test_platform_choices(platform: str) -> None:
    caps = detect_capabilities("npu")
    plan = resolve_plan("all", caps, TP2, Qwen3_5MoeTextConfig.qwen3_5_35b_a3b(), dtype="bfloat16")
    state = {n: d.state for n, d in plan.decisions.items()}
    assert plan.device == "npu"
    assert state["mm_all_reduce"] == ("inactive" if platform == "910_93" else "on")
    assert state["chunk_gdr"] == ("inactive" if platform == "950" else "on")
    assert state["fused_rope"] == state["fused_attention"] == "on"
    assert plan.decisions["graph_mode"].impl == "torchair ge_graph"
    # Qwen3.5's head_dim 256 is outside TND's documented head dims: FIA v1 BSH
    assert "fia_v1_bsh" in plan.decisions["fused_attention"].impl
    ep = resolve_plan("all", caps, EP2, Qwen3_5MoeTextConfig.qwen3_5_35b_a3b(), dtype="bfloat16")
    assert ep.decisions["moe_dispatch_combine"].state == ("inactive" if platform == "950" else "on")


def test_without_torchair_graph_mode_is_inactive(platform: str) -> None:
    import sys

    lazy = sys.modules.pop("torchair")
    try:
        caps = detect_capabilities("npu")
    finally:
        sys.modules["torchair"] = lazy
    assert caps.torch_npu and not caps.torchair
    plan = resolve_plan({"graph_mode": True, "grouped_moe": True}, caps)
    assert plan.decisions["graph_mode"].reason == "torchair not available"
