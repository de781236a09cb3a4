"""The emulator through perfbench: `doctor --emulate-npu`, `run --emulate-npu` end to end with a profiler
capture, and the gate refusing to compare emulated results with others."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.results import REL_ERROR_TOLERANCE, RunResult, RunSpec, load_results, write_results
from tests.emulation.helpers import perfbench, write_npu_scenario
from tests.records_kit import run_result

pytestmark = pytest.mark.npu_emulated
PLATFORMS = ("910b", "910_93", "950")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_doctor_says_emulated(platform: str) -> None:
    proc = perfbench("doctor", "--emulate-npu", platform)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("device: npu (") and f"emulated npu ({platform})" in first
    assert "torch_npu yes; torchair yes" in first


def test_unknown_platform_is_one_line() -> None:
    result = CliRunner().invoke(main, ["doctor", "--emulate-npu", "910c"])
    assert result.exit_code == 2 and "'910c' is not one of" in result.output


def _run(env_label: str | None) -> RunResult:
    spec = RunSpec.from_dict({"run_id": "r", "scenario": "s", "device": "npu", "dtype": "bfloat16", "model": "tiny",
                              "batch_size": 1, "input_len": 8, "output_len": 2, "toggles": {},
                              "parallel": {"world_size": 1}})
    return run_result("r", spec=spec, env={"emulation": env_label})


@pytest.mark.parametrize("labels", [("emulated npu (910b)", None), (None, "emulated npu (950)"),
                                    ("emulated npu (910b)", "emulated npu (950)")])
def test_gate_refuses_emulated_against_other_results(tmp_path: Path, labels: tuple) -> None:
    write_results(tmp_path / "base", [_run(labels[0])])
    write_results(tmp_path / "cur", [_run(labels[1])])
    result = CliRunner().invoke(main, ["gate", "--baseline", str(tmp_path / "base"), "--current",
                                       str(tmp_path / "cur")])
    assert result.exit_code == 2
    assert "emulated npu results (CPU timings) compare only with results of the same emulation" in result.output


@pytest.mark.slow
def test_run_emulated_npu_scenario_end_to_end(tmp_path: Path) -> None:
    scenario = write_npu_scenario(tmp_path, {
        "fused_rope": True, "fused_attention": True, "fused_rmsnorm": False, "chunk_gdr": True, "grouped_moe": True,
        "merged_projections": False, "graph_mode": False, "mm_all_reduce": False, "moe_dispatch_combine": False})
    out = tmp_path / "out"
    proc = perfbench("run", str(scenario), "--emulate-npu", "910b", "--out", str(out), "--no-report")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = load_results(out)
    assert result.status == "ok", result.error
    assert result.env.emulation == "emulated npu (910b)"
    assert "emulated npu (910b)" in result.env.device_name and result.env.device == "npu"
    assert result.plan.state("fused_attention") == "on" and result.plan.state("chunk_gdr") == "on"
    assert result.numerics.max_rel_error <= REL_ERROR_TOLERANCE["bfloat16"] and result.numerics.compared == 2 * 3
    (trace_dir,) = (out / "runs" / result.run_id / "trace").glob("*_ascend_pt")
    assert "emulated npu (910b)" in (trace_dir / "EMULATED.txt").read_text()
    per_op = (out / "runs" / result.run_id / "tables" / "per_op.csv").read_text()
    assert "npu::npu_fused_infer_attention_score" in per_op and "npu::npu_chunk_gated_delta_rule" in per_op
