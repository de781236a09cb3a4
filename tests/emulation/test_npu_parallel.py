"""Multi-rank NPU paths under the emulator through `perfbench run`: torchrun ranks on emulated HCCL (gloo),
TP2 with npu_mm_all_reduce_base (Ascend 950) and EP2 with MC2 dispatch_v2/combine_v2 (Atlas A2, A3).
Each run's logits are compared by the harness with the all-off model of the same layout and weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbench.results import REL_ERROR_TOLERANCE, load_results
from tests.emulation.helpers import perfbench, plant_in_every_process, write_npu_scenario

pytestmark = [pytest.mark.npu_emulated, pytest.mark.slow]
TP2 = "{world_size: 2, attn_tp_size: 2, moe_tp_size: 2, embed_tp_size: 2, lmhead_tp_size: 2, shared_tp_size: 2}"
EP2 = "{world_size: 2, attn_tp_size: 2, moe_tp_size: 1, embed_tp_size: 2, lmhead_tp_size: 2, shared_tp_size: 1}"
BOUND = REL_ERROR_TOLERANCE["bfloat16"]


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
    # every row and step compared (2 prompts x 3 tokens), replaying the reference's experts on each rank's tokens
    assert result.numerics.compared == 2 * 3 and result.numerics.max_rel_error <= BOUND, result.numerics


@pytest.mark.parametrize(("platform", "layout", "toggle"), [("950", TP2, "mm_all_reduce"),
                                                            ("910b", EP2, "moe_dispatch_combine")])
def test_a_planted_multi_rank_fault_is_caught_in_bf16(tmp_path: Path, platform: str, layout: str, toggle: str
                                                      ) -> None:
    """The fused multi-rank op 3 % off in every rank (the all-off reference's exchange is the unfused one): the
    run's numerics fail, and the gate names the run, the phase and the layer branch."""
    toggles = {"fused_rope": False, "fused_attention": False, "fused_rmsnorm": False, "chunk_gdr": False,
               "grouped_moe": False, "merged_projections": False, "graph_mode": False, "mm_all_reduce": False,
               "moe_dispatch_combine": False, toggle: True}
    scenario = write_npu_scenario(tmp_path, toggles, parallel=layout, profile=False)
    out = tmp_path / "out"
    plant = plant_in_every_process(tmp_path / "plant", toggle, 1.03)
    proc = perfbench("run", str(scenario), "--emulate-npu", platform, "--out", str(out), "--no-report",
                     first_on_path=plant)
    (result,) = load_results(out)
    assert result.status == "ok" and result.plan.state(toggle) == "on", (result.error or "") + proc.stderr[-2000:]
    assert result.numerics.max_rel_error > BOUND, result.numerics
    assert result.failure.kind == "numerics_fail"
    gate = perfbench("gate", "--current", str(out), "--baseline", str(out))
    assert gate.returncode == 1 and f"FAIL numerics run={result.run_id}: relative error" in gate.stdout, gate.stdout

