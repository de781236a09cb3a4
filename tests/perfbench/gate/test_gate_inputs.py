"""Gate input side: numbers in gate.yaml checked at load (finite, in range), a baseline run missing from the
current folder fails by default (`missing_runs`), and every input problem exits 2 with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from model.toggles import TOGGLE_NAMES
from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.gate.engine import EXIT_FAIL, EXIT_PASS
from perfbench.gate.rules import load_rules
from perfbench.results import RunPlan, RunResult, RunSpec, write_results
from tests.cli_helpers import one_error_line
from tests.records_kit import run_result


def make_run(run_id: str, on: tuple[str, ...] = (), status: str = "ok") -> RunResult:
    spec = RunSpec(run_id=run_id, scenario="s", toggles={t: t in on for t in TOGGLE_NAMES},
                   parallel={"world_size": 1})
    plan = RunPlan.from_dict({t: {"requested": t in on, "state": "on" if t in on else "off"} for t in TOGGLE_NAMES}
                             if status == "ok" else {})
    samples = {"tpot_ms": [5.0, 5.1, 4.9, 5.0, 5.2, 4.8, 5.0, 5.1], "ttft_ms": [40.0, 41.0, 39.0, 40.5, 40.2]}
    return run_result(run_id, status=status, spec=spec, plan=plan, samples=samples if status == "ok" else {},
                      numerics={"max_rel_error": 1e-6, "max_abs_logit_diff": 1e-6, "tokens_match": True},
                      error=None if status == "ok" else "killed", env={"torch": "2.13.0"})


def folder(path: Path, runs: list[RunResult]) -> Path:
    write_results(path, runs)
    return path


def gate(*args: str) -> Result:
    return CliRunner().invoke(main, ["gate", *args])



# ---- numbers refused at load ---------------------------------------------------------------------

BAD_NUMBERS = {
    "nan-threshold": ("rules: [{kind: timing, metric: tpot_ms, threshold: .nan}]",
                      "rules[0].threshold: expected a finite number, got nan"),
    "inf-threshold": ("rules: [{kind: timing, metric: tpot_ms, threshold: .inf}]",
                      "rules[0].threshold: expected a finite number, got inf"),
    "percent-threshold": ("rules: [{kind: timing, metric: tpot_ms, threshold: 10}]",
                          "rules[0].threshold: expected a fraction of the baseline in [0, 1]"),
    "nan-alpha": ("rules: [{kind: timing, metric: tpot_ms, alpha: .nan}]",
                  "rules[0].alpha: expected a finite number, got nan"),
    "alpha-one": ("rules: [{kind: timing, metric: tpot_ms, alpha: 1.0}]",
                  "rules[0].alpha: expected a number in (0, 1), got 1.0"),
    "nan-tolerance": ("rules: [{kind: op_count, tolerance: .nan}]",
                      "rules[0].tolerance: expected a finite number, got nan"),
    "big-tolerance": ("rules: [{kind: op_count, tolerance: 3}]",
                      "rules[0].tolerance: expected a fraction of the baseline in [0, 1]"),
    "inf-ratio-min": ("rules: [{kind: ratio, metric: tpot_ms, numerator: {}, denominator: {}, min: .inf}]",
                      "rules[0].min: expected a finite number, got inf"),
    "nan-ratio-max": ("rules: [{kind: ratio, metric: tpot_ms, numerator: {}, denominator: {}, max: .nan}]",
                      "rules[0].max: expected a finite number, got nan"),
    "min-above-max": ("rules: [{kind: ratio, metric: tpot_ms, numerator: {}, denominator: {}, min: 2, max: 1}]",
                      "rules[0]: min 2 is above max 1"),
    "nan-logit-bound": ("rules: [{kind: numerics, max_abs_logit_diff: .nan}]",
                        "rules[0].max_abs_logit_diff: expected a finite number, got nan"),
    "inf-logit-bound-per-dtype": ("rules: [{kind: numerics, max_abs_logit_diff: {float32: .inf}}]",
                                  "rules[0].max_abs_logit_diff.float32: expected a finite number, got inf"),
    "nan-range": ("rules: [{kind: toggles, where: {batch_size: {min: .nan}}}]",
                  "rules[0].where.batch_size.min: expected a finite number, got nan"),
    "empty-range": ("rules: [{kind: toggles, where: {input_len: {min: 512, max: 128}}}]",
                    "rules[0].where.input_len: min 512 is above max 128"),
    "missing-runs-value": ("rules: [{kind: toggles}]\nmissing_runs: ignore",
                           "missing_runs: expected one of fail, skip, got 'ignore'"),
    # one of my own: non-string top-level keys of mixed types used to crash the sort of unknown keys
    "mixed-type-keys": ("rules: [{kind: toggles}]\n1: x\nzz: y",
                        "unknown top-level key '1'; allowed: rules, correction, missing_runs"),
}


@pytest.mark.parametrize("text,expected", BAD_NUMBERS.values(), ids=BAD_NUMBERS.keys())
def test_bad_numbers_are_refused_when_the_rules_load(tmp_path: Path, text: str, expected: str) -> None:
    rules = tmp_path / "gate.yaml"
    rules.write_text(text + "\n")
    with pytest.raises(UserError) as info:
        load_rules(rules)
    assert str(info.value).startswith(f"gate.yaml: {expected}"), str(info.value)
    run = folder(tmp_path / "r", [make_run("r1")])
    line = one_error_line(gate("--baseline", str(run), "--current", str(run), "--rules", str(rules)))
    assert line.startswith(f"error: gate.yaml: {expected}")


# ---- a baseline run missing from the current folder ----------------------------------------------

def _truncated_sweep(tmp_path: Path) -> tuple[Path, Path]:
    """The baseline's only graph_mode run is missing from current (a sweep cut short)."""
    base = folder(tmp_path / "base", [make_run("off"), make_run("graph", on=("graph_mode",)),
                                      make_run("broken", status="error")])
    cur = folder(tmp_path / "cur", [make_run("off")])
    return base, cur


def test_a_baseline_run_missing_from_current_fails_the_gate(tmp_path: Path) -> None:
    base, cur = _truncated_sweep(tmp_path)
    result = gate("--baseline", str(base), "--current", str(cur))
    assert result.exit_code == EXIT_FAIL, result.output
    assert "FAIL missing run=graph: in the baseline, missing from current" in result.output
    # a run that failed in the baseline measured nothing: its absence is reported, not failed
    assert "SKIP missing run=broken: in the baseline, missing from current" in result.output
    assert "FAIL missing run=broken" not in result.output


def test_missing_runs_skip_in_the_rules_reports_them_as_not_compared(tmp_path: Path) -> None:
    base, cur = _truncated_sweep(tmp_path)
    rules = tmp_path / "gate.yaml"
    rules.write_text("rules: [{kind: timing, metric: tpot_ms}, {kind: toggles}]\nmissing_runs: skip\n")
    result = gate("--baseline", str(base), "--current", str(cur), "--rules", str(rules))
    assert result.exit_code == EXIT_PASS, result.output
    assert "SKIP missing run=graph: in the baseline, missing from current" in result.output
    assert load_rules(rules).missing_runs == "skip"


def test_the_default_is_fail_in_a_rules_file_too(tmp_path: Path) -> None:
    base, cur = _truncated_sweep(tmp_path)
    rules = tmp_path / "gate.yaml"
    rules.write_text("rules: [{kind: toggles}]\n")
    assert load_rules(rules).missing_runs == "fail"
    assert gate("--baseline", str(base), "--current", str(cur), "--rules", str(rules)).exit_code == EXIT_FAIL


# ---- input problems exit 2 -----------------------------------------------------------------------

@pytest.mark.parametrize("line,expected", [
    ('{"run_id": "r1", "status": "ok", "spec": {"run_id": "r1", "scenario": "s", "batch_size": "1"}}',
     "results.jsonl:1.spec.batch_size: expected an integer"),
    ('{"run_id": "r1", "status": "ok", "spec": {"run_id": "r1", "scenario": "s"}, "samples": {"tpot_ms": 5}}',
     "results.jsonl:1.samples.tpot_ms: expected a list"),
    ('[1, 2, 3]', "results.jsonl:1: expected an object"),
], ids=["spec-type", "samples-type", "not-an-object"])
def test_records_of_wrong_types_exit_2_not_1(tmp_path: Path, line: str, expected: str) -> None:
    good = folder(tmp_path / "good", [make_run("r1")])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.jsonl").write_text(line + "\n")
    for args in (("--baseline", str(good), "--current", str(bad)), ("--baseline", str(bad), "--current", str(good))):
        assert expected in one_error_line(gate(*args))


def test_a_good_pair_still_passes(tmp_path: Path) -> None:
    """The control: the folders above, without the hostile part, pass."""
    base = folder(tmp_path / "base", [make_run("off"), make_run("graph", on=("graph_mode",))])
    cur = folder(tmp_path / "cur", [make_run("off"), make_run("graph", on=("graph_mode",))])
    result = gate("--baseline", str(base), "--current", str(cur))
    assert result.exit_code == EXIT_PASS, result.output
