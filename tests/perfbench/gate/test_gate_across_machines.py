"""The committed CI smoke baseline gates a run made on another CPU model or torch build: deterministic rules
compare, timing rules do not, and a planted deterministic regression still fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from perfbench.cli import main

ROOT = Path(__file__).resolve().parents[3]
BASELINE = ROOT / "baselines" / "ci_smoke"
SMOKE_GATE = ROOT / "gates" / "ci_smoke_gate.yaml"


def current_from_baseline(tmp_path: Path, edit=None) -> Path:
    """The baseline's own runs, as if recorded on another machine (another CPU, torch without '+cpu')."""
    out = tmp_path / "current"
    shutil.copytree(BASELINE, out)
    (out / "baseline.json").unlink()
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for r in records:
        assert r["env"]["device_name"] != "Another CPU model"
        r["env"]["device_name"] = r["env"]["cpu_model"] = "Another CPU model"
        r["env"]["torch"] = r["env"]["torch"].split("+")[0]
        if edit is not None:
            edit(r)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def gate(current: Path, *rules: str):
    return CliRunner().invoke(main, ["gate", "--no-confirm", "--baseline", str(BASELINE), "--current",
                                     str(current), *rules])


def test_smoke_gate_passes_on_another_cpu_model(tmp_path):
    result = gate(current_from_baseline(tmp_path), "--rules", str(SMOKE_GATE))
    assert result.exit_code == 0, result.output
    assert "different environment" not in result.output
    for kind in ("toggles", "numerics", "op_count"):
        assert f"PASS {kind} run=" in result.output


def test_planted_op_count_regression_fails_on_another_cpu_model(tmp_path):
    def grow(record: dict) -> None:
        if record["trace"].get("decode_ops_per_step"):
            record["trace"]["decode_ops_per_step"] += 10
            record["trace"]["op_counts_per_decode_step"]["aten::mul"] = 10.0 + float(
                record["trace"]["op_counts_per_decode_step"].get("aten::mul", 0))

    result = gate(current_from_baseline(tmp_path, grow), "--rules", str(SMOKE_GATE))
    assert result.exit_code == 1, result.output
    assert "FAIL op_count" in result.output and "decode ops per step grew" in result.output


def test_planted_lost_toggle_fails_on_another_cpu_model(tmp_path):
    def lose_graph_mode(record: dict) -> None:
        decision = record["plan"]["graph_mode"]
        if decision["state"] == "on":
            decision.update(state="inactive", reason="planted", impl="")

    result = gate(current_from_baseline(tmp_path, lose_graph_mode), "--rules", str(SMOKE_GATE))
    assert result.exit_code == 1, result.output
    assert "FAIL toggles" in result.output and "graph_mode was on in the baseline, now inactive" in result.output


def test_timing_rules_do_not_compare_across_machines(tmp_path):
    current = current_from_baseline(tmp_path)
    default = gate(current)  # timing, toggles and numerics: only the deterministic ones decide
    assert default.exit_code == 0, default.output
    assert "SKIP machine run=" in default.output and "device_name" in default.output
    assert "PASS timing" not in default.output and "tpot_ms run=" not in default.output
    timing_only = tmp_path / "timing.yaml"
    timing_only.write_text("rules:\n  - kind: timing\n    metric: tpot_ms\n")
    result = gate(current, "--rules", str(timing_only))
    assert result.exit_code == 3, result.output
    assert "INCONCLUSIVE comparable" in result.output and "PASS " not in result.output


def test_another_torch_version_is_not_compared_at_all(tmp_path):
    def newer_torch(record: dict) -> None:
        record["env"]["torch"] = "2.99.0"

    result = gate(current_from_baseline(tmp_path, newer_torch), "--rules", str(SMOKE_GATE))
    assert "different environment (torch 2.13.0+cpu -> 2.99.0)" in result.output
    assert result.exit_code == 1  # a gate whose baseline rules compared nothing cannot pass
