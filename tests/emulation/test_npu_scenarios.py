"""The shipped NPU scenarios and the recipe's own YAML: they dry-run as shipped, and run end to end under the
emulator with a layer override, small dims and a world size this machine allows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.results import REL_ERROR_TOLERANCE
from tests.cli_helpers import one_error_line
from tests.emulation.helpers import perfbench

pytestmark = pytest.mark.npu_emulated

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SHIPPED = ["qwen3_5_35b_ep8", "qwen3_5_122b_tp8", "qwen3_5_397b_tp16",
           str(SCENARIOS / "recipe" / "qwen3_5_35b_ep8.yaml")]
SMALL = ["perfbench.model=tiny", "perfbench.num_layers=4", "parallel_config.world_size=2",
         "parallel_config.attn_tp_size=2", "parallel_config.embed_tp_size=2", "parallel_config.lmhead_tp_size=2",
         "parallel_config.shared_tp_size=1", "perfbench.workload.batch_sizes=[2]", "perfbench.workload.input_lens=[16]",
         "perfbench.workload.output_len=3", "perfbench.measure.warmup=1", "perfbench.measure.iterations=2",
         "perfbench.sweep.design=none", "perfbench.cluster.nnodes=1"]  # one node here
# EP scenarios keep expert parallelism (moe_tp 1: EP over both ranks); TP scenarios shard experts by TP
LAYOUT = {"qwen3_5_35b_ep8": "parallel_config.moe_tp_size=1", "qwen3_5_122b_tp8": "parallel_config.moe_tp_size=2",
          "qwen3_5_397b_tp16": "parallel_config.moe_tp_size=2", SHIPPED[3]: "parallel_config.moe_tp_size=1"}
PLATFORM = {"qwen3_5_35b_ep8": "910b", "qwen3_5_122b_tp8": "950", "qwen3_5_397b_tp16": "910_93", SHIPPED[3]: "910_93"}


# the preset of each shipped scenario's checkpoint, for a dry run without the checkpoint
PRESET = {"qwen3_5_35b_ep8": "qwen3.5-35b-a3b", "qwen3_5_122b_tp8": "qwen3.5-122b-a10b",
          "qwen3_5_397b_tp16": "qwen3.5-397b-a17b", SHIPPED[3]: "qwen3.5-35b-a3b"}


@pytest.mark.parametrize("scenario", SHIPPED, ids=lambda s: Path(s).stem)
def test_dry_runs_as_shipped(scenario: str) -> None:
    # without its checkpoint a dry run fails as the real run would; with the preset of that model it plans
    # (the recipe YAML's device is auto: npu is named so the plan is the device's, not this host's)
    # in-process: a dry run starts no worker (the console entry point is covered by the wheel-install test's
    # subprocess `run --dry-run`, tests/perfbench/config/test_scenario.py)
    missing = CliRunner().invoke(main, ["run", scenario, "--dry-run"])
    assert "/data/models/" in one_error_line(missing)
    planned = CliRunner().invoke(main, ["run", scenario, "--dry-run", "--set", f"perfbench.model={PRESET[scenario]}",
                                        "--set", "perfbench.device=npu"])
    assert planned.exit_code == 0, planned.output[-2000:]
    assert "b" in planned.stdout and "run id" in planned.stdout


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SHIPPED, ids=lambda s: Path(s).stem)
def test_runs_under_the_emulator(tmp_path: Path, scenario: str) -> None:
    platform = PLATFORM[scenario]
    sets = [arg for kv in (*SMALL, LAYOUT[scenario]) for arg in ("--set", kv)]
    out = tmp_path / "out"
    proc = perfbench("run", scenario, "--emulate-npu", platform, *sets, "--out", str(out), "--no-report",
                     timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [result] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert result["status"] == "ok", result.get("error")
    assert result["env"]["emulation"] == f"emulated npu ({platform})"
    assert result["spec"]["device"] == "npu" and result["spec"]["parallel"]["world_size"] == 2
    on = [name for name, d in result["plan"].items() if d["state"] == "on"]
    assert "fused_attention" in on and "npu_fused_infer_attention_score" in result["plan"]["fused_attention"]["impl"]
    assert result["numerics"]["max_rel_error"] <= REL_ERROR_TOLERANCE["bfloat16"], result["numerics"]
    # the profiled iteration's trace (npu::npu_* ops on the host) is checked against the plan's npu signatures;
    # the recipe YAML keeps its profiler off
    assert result["spec"]["profile"] == (scenario != SHIPPED[3])
    if result["spec"]["profile"]:
        assert result["trace"].get("plan_check") and result["trace"]["plan_mismatches"] == [], result["trace"]
