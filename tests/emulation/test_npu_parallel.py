"""Multi-rank NPU paths under the emulator through `perfbench run`: torchrun ranks on emulated HCCL (gloo),
TP2 with npu_mm_all_reduce_base (Ascend 950) and EP2 with MC2 dispatch_v2/combine_v2 (Atlas A2, A3).
Each run's logits are compared by the harness with the all-off model of the same layout and weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbench.results import load_results
from tests.emulation.helpers import perfbench, write_npu_scenario

pytestmark = [pytest.mark.npu_emulated, pytest.mark.slow]
TP2 = "{world_size: 2, attn_tp_size: 2, moe_tp_size: 2, embed_tp_size: 2, lmhead_tp_size: 2, shared_tp_size: 2}"
EP2 = "{world_size: 2, attn_tp_size: 2, moe_tp_size: 1, embed_tp_size: 2, lmhead_tp_size: 2, shared_tp_size: 1}"
LOGIT_TOL = 0.25  # bf16 logits of the fused vs the unfused path, same layout


@pytest.mark.parametrize(("platform", "layout", "toggle"), [
    ("950", TP2, "mm_all_reduce"), ("910b", EP2, "moe_dispatch_combine"), ("910_93", EP2, "moe_dispatch_combine")])
def test_multi_rank_npu_toggle(tmp_path: Path, platform: str, layout: str, toggle: str) -> None:
    toggles = {"fused_rope": True, "fused_attention": True, "fused_rmsnorm": False, "chunk_gdr": False,
               "grouped_moe": True, "merged_projections": False, "graph_mode": False, "mm_all_reduce": False,
               "moe_dispatch_combine": False, toggle: True}
    # A3 documents the MC2 hidden size in [1024, 8192]
    scenario = write_npu_scenario(tmp_path, toggles, parallel=layout, profile=False,
                                  hidden_size=1024 if platform == "910_93" else 256)
    out = tmp_path / "out"
    proc = perfbench("run", str(scenario), "--emulate-npu", platform, "--out", str(out), "--no-report")
    assert (out / "results.jsonl").is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    (result,) = load_results(out)
    assert result.status == "ok", (result.error or "") + proc.stderr[-2000:]
    assert result.plan.state(toggle) == "on"
    assert result.env.emulation == f"emulated npu ({platform})"
    assert result.numerics.max_abs_logit_diff <= LOGIT_TOL
