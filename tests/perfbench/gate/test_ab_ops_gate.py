"""A gate FAIL on an `ab --ops` folder names the op groups behind it; a cost shift and a pass name none."""

from __future__ import annotations

from pathlib import Path

from perfbench.analysis.op_ab import op_verdicts
from perfbench.analysis.sequential import DecisionRule
from perfbench.gate.ab_folder import evaluate_ab
from perfbench.gate.checks import FAIL, PASS
from perfbench.gate.rules import GateRules, TimingRule
from perfbench.results import write_results
from perfbench.results.op_group import OpGroup
from tests.perfbench.profiling.op_profiles import Profile, op_pairs, profile
from tests.records_kit import ab_record, run_result

SLOWED = OpGroup("moe", "aten::mm", "decode", "full_attention").label


def _folder(tmp_path: Path, head: Profile, verdict: str, regression: bool) -> Path:
    folder = tmp_path / f"ab-{verdict}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    write_results(folder, [run_result("r0@base"), run_result("r0@head")])
    ratio, low, high = {"slower": (1.04, 1.02, 1.06), "same": (1.0, 0.99, 1.01)}[verdict]
    ops = op_verdicts(op_pairs(profile(), head, epochs=20), DecisionRule())
    record = ab_record(mode="one process", ops=ops, verdicts={"r0": {"tpot_ms": {
        "ratio": ratio, "ci_low": low, "ci_high": high, "pairs": 60, "clusters": 10, "verdict": verdict,
        "regression": regression}}})
    (folder / "ab.json").write_text(record.model_dump_json())
    return folder


RULES = GateRules((TimingRule(metric="tpot_ms"),), "test rules")


def test_a_fail_names_the_op_group_and_branch_that_moved(tmp_path: Path) -> None:
    folder = _folder(tmp_path, profile({("full_attention", "moe", "aten::mm"): 1.10}), "slower", True)
    _, checks = evaluate_ab(folder, RULES)
    (check,) = [c for c in checks if c.kind == "timing"]
    assert check.status == FAIL
    assert "ops that moved (ab --ops): moe (branch)" in check.message and SLOWED in check.message


def test_a_fail_whose_ops_only_shifted_names_no_group(tmp_path: Path) -> None:
    folder = _folder(tmp_path, profile(fused_norm=True), "slower", True)
    _, checks = evaluate_ab(folder, RULES)
    (check,) = [c for c in checks if c.kind == "timing"]
    assert check.status == FAIL and "ops that moved" not in check.message


def test_a_pass_names_no_group_even_when_one_moved(tmp_path: Path) -> None:
    folder = _folder(tmp_path, profile({("full_attention", "moe", "aten::mm"): 1.10}), "same", False)
    _, checks = evaluate_ab(folder, RULES)
    (check,) = [c for c in checks if c.kind == "timing"]
    assert check.status == PASS and "ops that moved" not in check.message
