"""Result records are type-checked on load: valid JSON with the wrong types is a one-line input error (exit 2
in every command that reads a folder), naming the file, the line and the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.results import RunPlan, RunResult, RunSpec, load_results, write_results
from tests.records_kit import run_result


def a_record() -> dict[str, Any]:
    spec = RunSpec(run_id="r1", scenario="s", toggles={"chunk_gdr": True})
    plan = RunPlan.from_dict({"chunk_gdr": {"requested": True, "state": "on"}})
    result = run_result("r1", spec=spec, plan=plan,
                        samples={"tpot_ms": [1.0, 1.2, 1.1], "ttft_ms": [10.0, 11.0, 12.0]},
                        summary={"tpot_ms_median": 1.1, "compile_s": None}, env={"torch": "2.13.0"})
    return result.to_dict()


def write_records(folder: Path, *records: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


WRONG_TYPES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "spec-int-as-string": (lambda r: r["spec"].update(batch_size="4"),
                           "spec.batch_size: expected an integer, got a string '4'"),
    "spec-bool-for-int": (lambda r: r["spec"].update(input_len=True), "spec.input_len: expected an integer"),
    "toggle-not-bool": (lambda r: r["spec"]["toggles"].update(chunk_gdr="yes"),
                        "spec.toggles.chunk_gdr: expected true or false"),
    "samples-not-a-list": (lambda r: r["samples"].update(tpot_ms="1.0,1.2"),
                           "samples.tpot_ms: expected a list, got a string"),
    "sample-not-a-number": (lambda r: r["samples"]["tpot_ms"].append("slow"),
                            "samples.tpot_ms[3]: expected a number, got a string 'slow'"),
    "summary-text": (lambda r: r["summary"].update(tpot_ms_median="1.1 ms"),
                     "summary.tpot_ms_median: expected a number"),
    "trace-a-list": (lambda r: r.update(trace=[1, 2]), "trace: expected an object, got a list"),
    "env-a-string": (lambda r: r.update(env="torch 2.13"), "env: expected an object"),
    "wall-s-text": (lambda r: r.update(wall_s="3 s"), "wall_s: expected a number"),
    "error-a-number": (lambda r: r.update(error=3), "error: expected a string, got an integer 3"),
    "plan-state": (lambda r: r["plan"]["chunk_gdr"].update(state="maybe"),
                   "plan.chunk_gdr.state: expected one of on, off, inactive, got 'maybe'"),
    "plan-requested": (lambda r: r["plan"]["chunk_gdr"].update(requested="true"),
                       "plan.chunk_gdr.requested: expected true or false"),
    "status": (lambda r: r.update(status="great"), "status: expected one of ok, error, timeout, killed"),
    "run-id-number": (lambda r: r.update(run_id=7), "run_id: expected a string"),
    # the typed parts of a result: unknown keys and wrong types anywhere inside them
    "summary-unknown-key": (lambda r: r["summary"].update(ttft_median=1.0),
                            "summary: unknown key 'ttft_median' (known keys: ttft_ms_median,"),
    "numerics-tokens-text": (lambda r: r["numerics"].update(tokens_match="yes"),
                             "numerics.tokens_match: expected true or false, got a string 'yes'"),
    "trace-plan-check-entry": (lambda r: r["trace"].update(plan_check=[{"toggle": "chunk_gdr", "state": "on",
                                                                        "ok": "fine", "line": ""}]),
                               "trace.plan_check[0].ok: expected true or false"),
    "env-count-text": (lambda r: r["env"].update(device_count="2"), "env.device_count: expected an integer"),
    "failure-kind": (lambda r: r.update(failure={"kind": "crashed", "reason": ""}),
                     "failure.kind: expected one of startup_fail, plan_refused, benchmark_fail, timeout, oom, "
                     "numerics_fail, got 'crashed'"),
}


@pytest.mark.parametrize("change,message", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_wrong_types_are_refused_naming_file_line_and_field(tmp_path: Path, change: Callable[[dict], None],
                                                             message: str) -> None:
    bad = a_record()
    change(bad)
    good = a_record()
    good["run_id"] = good["spec"]["run_id"] = "r0"
    folder = write_records(tmp_path / "res", good, bad)  # the bad record is on line 2
    with pytest.raises(ValueError) as info:
        load_results(folder)
    assert str(info.value).startswith(f"{folder / 'results.jsonl'}:2.{message}"), str(info.value)


def test_an_unknown_top_level_key_is_refused_naming_it(tmp_path: Path) -> None:
    bad = a_record()
    bad["comment"] = "x"
    folder = write_records(tmp_path / "res", bad)
    with pytest.raises(ValueError) as info:
        load_results(folder)
    assert str(info.value).startswith(f"{folder / 'results.jsonl'}:1: unknown key 'comment' (known keys: run_id,")


def test_right_types_load_including_non_finite_samples_and_null_summaries(tmp_path: Path) -> None:
    record = a_record()
    record["samples"]["tpot_ms"] = [1.0, float("nan"), float("inf"), 2]  # a broken timer: kept, not refused
    (back,) = load_results(write_records(tmp_path / "res", record))
    assert back.samples["tpot_ms"][3] == 2 and back.summary.compile_s is None
    assert back.finite_samples("tpot_ms") == [1.0, 2.0]


def _bad_folder(tmp_path: Path, name: str) -> Path:
    record = a_record()
    record["summary"]["tpot_ms_median"] = "fast"
    return write_records(tmp_path / name, record)


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_gate_on_wrong_types_exits_2_not_1(tmp_path: Path) -> None:
    good = tmp_path / "good"
    write_results(good, [RunResult.from_dict(a_record())])
    bad = _bad_folder(tmp_path, "bad")
    for args in (["--baseline", str(good), "--current", str(bad)], ["--baseline", str(bad), "--current", str(good)]):
        line = _one_error_line(CliRunner().invoke(main, ["gate", *args]))
        assert "results.jsonl:1.summary.tpot_ms_median: expected a number" in line


def test_report_and_compare_on_wrong_types_print_one_line(tmp_path: Path) -> None:
    bad = _bad_folder(tmp_path, "bad")
    line = _one_error_line(CliRunner().invoke(main, ["report", str(bad)]))
    assert "results.jsonl:1.summary.tpot_ms_median" in line
    assert not (bad / "report.html").exists()
    good = tmp_path / "good"
    write_results(good, [RunResult.from_dict(a_record())])
    assert "tpot_ms_median" in _one_error_line(CliRunner().invoke(main, ["compare", str(good), str(bad)]))
