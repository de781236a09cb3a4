"""CI outputs of `gate` and `ab`: the step summary appended, JUnit test cases, and the "what changed" comment only
when something regressed."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from model.toggles import TOGGLE_NAMES
from perfbench.cli import main
from perfbench.results import RunPlan, RunResult, write_results
from tests.records_kit import run_result

AB_RECORD = {
    "kind": "perfbench ab", "scenario": "ci_smoke", "emulation": None, "base": {"ref": "main", "sha": "a" * 40},
    "head": {"ref": "HEAD", "sha": "b" * 40, "dirty": True}, "exit_code": 1,
    "verdicts": {"r1": {"ttft_ms": {"ratio": 1.12, "ci_low": 1.08, "ci_high": 1.16, "pairs": 20, "processes": 3,
                                    "band": 0.03, "verdict": "slower"},
                        "tpot_ms": {"ratio": 1.0, "ci_low": 0.99, "ci_high": 1.01, "pairs": 20, "processes": 3,
                                    "band": 0.03, "verdict": "same"}}}}


def _run(tpot: float) -> RunResult:
    plan = {t: {"requested": False, "state": "off"} for t in TOGGLE_NAMES}
    return run_result("r1", plan=RunPlan.from_dict(plan),
                      samples={"tpot_ms": [tpot * (1 + 0.001 * i) for i in range(20)]}, env={"torch": "2.13.0"},
                      numerics={"max_rel_error": 1e-7, "worst_phase": "prefill", "worst_layer": 0,
                                "worst_branch": "moe"})


def _folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    for name, tpot in (("base", 5.0), ("slow", 6.0), ("same", 5.0)):
        write_results(tmp_path / name, [_run(tpot)])
    return tmp_path / "base", tmp_path / "slow", tmp_path / "same"


def test_gate_appends_the_summary_and_writes_junit_and_the_comment(tmp_path):
    base, slow, same = _folders(tmp_path)
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n")
    junit, comment = tmp_path / "junit.xml", tmp_path / "comment.md"
    result = CliRunner().invoke(main, ["gate", "--no-confirm", "--baseline", str(base), "--current", str(slow),
                                       "--junit", str(junit), "--comment", str(comment)],
                                      env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1, result.output
    text = summary.read_text()
    assert text.startswith("# earlier step\n") and "## perfbench gate: FAIL" in text
    checks = [line for line in result.stdout.splitlines() if line.split(" ", 1)[0] in ("PASS", "FAIL", "SKIP",
                                                                                         "INCONCLUSIVE")]
    cases = ET.parse(junit).getroot().findall(".//testcase")
    assert len(cases) == len(checks)
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["tpot_ms [r1]"]
    assert "tpot_ms [r1]" in comment.read_text() and "1 regression" in comment.read_text()

    again = CliRunner().invoke(main, ["gate", "--no-confirm", "--baseline", str(base), "--current", str(same),
                                      "--junit", str(junit), "--comment", str(comment)],
                                      env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert again.exit_code in (0, 3), again.output
    assert not comment.exists()  # nothing regressed: no comment, and the stale one is gone
    assert summary.read_text().count("## perfbench gate") == 2
    assert not ET.parse(junit).getroot().findall(".//failure")


def test_gate_without_the_variable_writes_no_summary(tmp_path, monkeypatch):
    base, slow, _ = _folders(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = CliRunner().invoke(main, ["gate", "--no-confirm", "--baseline", str(base), "--current", str(slow)])
    assert result.exit_code == 1 and "step summary" not in result.output


def test_ab_writes_its_ci_outputs_from_the_record_it_returned(tmp_path, monkeypatch):
    out = tmp_path / "ab"

    def fake_ab_job(base, head, scenario, overrides, out_dir, settings, report=None, cap_from_noise=False):
        from perfbench.results.ab_record import ABRecord
        from perfbench.run.ab import ABOutcome

        return ABOutcome(ABRecord.model_validate(AB_RECORD), Path(out_dir), 1)

    monkeypatch.setattr("perfbench.run.ab.ab_job", fake_ab_job)
    summary, junit, comment = tmp_path / "summary.md", tmp_path / "junit.xml", tmp_path / "comment.md"
    result = CliRunner().invoke(main, ["ab", "main", "--out", str(out), "--junit", str(junit), "--comment",
                                       str(comment)], env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1, result.output
    text = summary.read_text()
    assert "## perfbench ab: REGRESSION" in text and "| r1 | ttft_ms | 1.120x | [1.080, 1.160] | slower | 20 |" in text
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().findall(".//testcase")}
    assert set(cases) == {"r1 ttft_ms", "r1 tpot_ms"}
    assert cases["r1 ttft_ms"].find("failure") is not None and cases["r1 tpot_ms"].find("failure") is None
    assert comment.read_text().startswith("**perfbench ab: 1 regression**")
