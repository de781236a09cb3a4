"""A world_size 2 scenario through the real CLI: torchrun launch, per-rank traces, numerics vs the all-off
model at the same layout, results written once (rank 0), MoE expert load per EP rank."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from model.modeling import Qwen3_5MoeForCausalLM
from perfbench.analysis.expert_load import layer_loads
from perfbench.measure.run_steps import make_workload
from perfbench.report import build_report
from perfbench.results import RunSpec


def single_rank_counts(spec: dict) -> dict[str, dict[int, list[int]]]:
    """The all-off model's routing counts at world_size 1 for the run's workload (same seeded weights)."""
    model = Qwen3_5MoeForCausalLM.from_pretrained(spec["model"], num_layers=spec["num_layers"], dummy_weights=True,
                                                  seed=spec["seed"])
    workload = make_workload(RunSpec.from_dict(spec), model.config.vocab_size)
    with model.expert_counts.recording():
        model.generate(workload.prompts, max_new_tokens=workload.output_len)
    return model.expert_counts.totals()


@pytest.mark.slow
def test_expert_parallel_scenario_runs_under_torchrun(tmp_path):
    out = tmp_path / "ep2"
    run = subprocess.run([sys.executable, "-m", "perfbench.cli", "run", "cpu_ep2", "--out", str(out), "--no-report"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 and all(r["status"] == "ok" for r in results)
    for r in results:
        assert r["spec"]["parallel"]["world_size"] == 2
        assert r["numerics"]["tokens_match"] is True and r["numerics"]["max_abs_logit_diff"] <= 1e-4
        assert r["samples"]["tpot_ms"] and r["trace"].get("decode_ops_per_step")
    # every rank's trace feeds the per-rank table; the slower rank is the one with the longer mean step
    for r in results:
        steps = pd.read_csv(out / "runs" / r["run_id"] / "tables" / "per_rank_steps.csv")
        assert set(steps["rank"]) == {0, 1}
        mean_step = steps.dropna(subset=["step"]).groupby("rank")["step_us"].mean()
        assert r["trace"]["cluster"]["slowest_rank"] == mean_step.idxmax()
        assert r["trace"]["plan_check"] and r["trace"]["plan_mismatches"] == []
    report = build_report(out).read_text()
    assert "slowest rank" in report and "per_rank_steps.csv" in report
    assert "MoE expert load" in report
    # each EP rank's experts' assignments add up to the tokens x top_k of the step; the all-off run routes
    # exactly as the same model on one rank
    for r in results:
        load = r["expert_load"]
        assert load["ep_size"] == 2 and load["experts_by_rank"] == [[0, 8], [8, 16]]
        spec = r["spec"]
        tokens = {"prefill": spec["batch_size"] * spec["input_len"],  # padded positions are routed too
                  "decode": spec["batch_size"] * (spec["output_len"] - 1)}
        loads = layer_loads(load)
        assert {(x.phase, x.layer) for x in loads} == {(p, i) for p in tokens for i in range(spec["num_layers"])}
        for x in loads:
            assert sum(x.rank_totals) == x.assignments == tokens[x.phase] * load["top_k"]
    plain = next(r for r in results if r["plan"]["moe_dispatch_combine"]["state"] == "off")
    expected = single_rank_counts(plain["spec"])
    got = {(c["phase"], c["layer"]): c["experts"] for c in plain["expert_load"]["counts"]}
    assert got == {(phase, layer): hits for phase, by_layer in expected.items() for layer, hits in by_layer.items()}
    fused = next(r for r in results if r["plan"]["moe_dispatch_combine"]["state"] == "on")
    assert fused["plan"]["graph_mode"]["state"] == "off"
    assert (out / "runs" / fused["run_id"] / "trace" / "rank1").is_dir()
