"""A world_size 2 scenario through the real CLI: torchrun launch, per-rank traces, numerics vs the all-off
model at the same layout, results written once (rank 0)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from perfbench.report import build_report


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
    fused = next(r for r in results if r["plan"]["moe_dispatch_combine"]["state"] == "on")
    assert fused["plan"]["graph_mode"]["state"] == "off"
    assert (out / "runs" / fused["run_id"] / "trace" / "rank1").is_dir()
