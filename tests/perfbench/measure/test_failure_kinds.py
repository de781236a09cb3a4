"""Each failure kind from what a run leaves: the exception and its stage, a lost process's log, or an ok run
whose numbers do not answer its question (numerics out of tolerance, a requested toggle that never ran)."""

from __future__ import annotations

import json

import pytest

from model.toggles import ToggleDecision
from perfbench.measure import failure_kinds, worker
from perfbench.measure import run_steps as measure
from perfbench.measure.failure_kinds import BENCHMARK, STARTUP, of_exception, of_lost_process, of_measured, stage
from perfbench.results import RunPlan, RunResult, RunSpec, load_results, write_results
from tests.records_kit import run_result


def _raised_in(*stages: str) -> BaseException:
    """The exception as it leaves nested stages (outermost first)."""
    def inner(level: int) -> None:
        if level == len(stages):
            raise RuntimeError("boom")
        with stage(stages[level]):
            inner(level + 1)
    with pytest.raises(RuntimeError) as info:
        inner(0)
    return info.value


@pytest.mark.parametrize("err,kind", [
    (MemoryError(), "oom"),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
    (ModuleNotFoundError("No module named 'torch_npu'"), "startup_fail"),
    (RuntimeError("boom"), "startup_fail"),  # no stage: raised before measuring began
    (measure.PlanMismatchError("run r1: the worker resolved a different plan", RunPlan()), "plan_refused"),
], ids=["MemoryError", "device oom text", "import", "no stage", "plan mismatch"])
def test_an_exception_gives_its_kind_and_its_last_line(err: BaseException, kind: str) -> None:
    failure = of_exception(err)
    assert failure.kind == kind
    assert failure.reason.startswith(type(err).__name__) and "\n" not in failure.reason


def test_the_innermost_stage_decides() -> None:
    assert of_exception(_raised_in(STARTUP)).kind == "startup_fail"
    assert of_exception(_raised_in(BENCHMARK)).kind == "benchmark_fail"
    assert of_exception(_raised_in(STARTUP, BENCHMARK)).kind == "benchmark_fail"


def test_a_lost_process_is_judged_by_its_timeout_and_its_log() -> None:
    assert of_lost_process("timed out after 3 s", "", timed_out=True).kind == "timeout"
    oom = of_lost_process("worker exited with code 1", "x = torch.empty(n)\nMemoryError", timed_out=False)
    assert oom.kind == "oom" and oom.reason.endswith("the log says: MemoryError")
    imp = of_lost_process("worker exited with code 1", "ModuleNotFoundError: No module named 'x'", False)
    assert imp.kind == "startup_fail"
    assert of_lost_process("killed by SIGKILL without a result", "step 3", False).kind == "benchmark_fail"


def _ok_run(dtype: str = "float32", error: float | None = 1e-6, not_compared: str | None = None,
            decisions: dict[str, ToggleDecision] | None = None, check: bool = True) -> RunResult:
    numerics = {"max_rel_error": error, "worst_phase": "prefill", "worst_layer": 1, "worst_branch": "moe",
                "max_abs_logit_diff": 1e-5, "not_compared": not_compared, "reference": "all off"}
    return run_result("r1", spec=RunSpec(run_id="r1", scenario="s", dtype=dtype, numerics_check=check),
                      plan=RunPlan(decisions or {}), numerics=numerics if error is not None or not_compared else {})


def test_an_ok_run_within_tolerance_with_every_requested_toggle_on_has_no_failure() -> None:
    on = {"chunk_gdr": ToggleDecision("chunk_gdr", True, "on", "", "chunked")}
    assert not of_measured(_ok_run(decisions=on))
    assert not of_measured(_ok_run(error=None, check=False))  # the check turned off: nothing to judge


@pytest.mark.parametrize("dtype,error", [("float32", 2e-3), ("bfloat16", 0.05), ("float32", float("nan"))])
def test_an_error_outside_the_dtype_tolerance_is_numerics_fail_naming_where(dtype, error) -> None:
    failure = of_measured(_ok_run(dtype, error))
    assert failure.kind == "numerics_fail"
    assert f"({dtype}) at prefill layer 1 moe" in failure.reason


def test_a_run_that_asked_for_numerics_and_has_none_is_numerics_fail() -> None:
    assert of_measured(_ok_run(error=None)).reason == "numerics not compared: nothing was recorded"
    failure = of_measured(_ok_run(error=None, not_compared="the reference cannot be replayed: x"))
    assert failure.kind == "numerics_fail" and failure.reason.endswith("cannot be replayed: x")


def test_a_requested_toggle_that_stayed_inactive_is_plan_refused_with_its_reason() -> None:
    decisions = {"mm_all_reduce": ToggleDecision("mm_all_reduce", True, "inactive", "needs world_size > 1", ""),
                 "fused_rmsnorm": ToggleDecision("fused_rmsnorm", False, "inactive", "not requested", "")}
    failure = of_measured(_ok_run(decisions=decisions))
    assert failure.kind == "plan_refused"
    assert failure.reason == "mm_all_reduce requested, inactive: needs world_size > 1"


def test_a_failure_in_the_timed_iterations_is_a_benchmark_fail(tmp_path, monkeypatch) -> None:
    def broken(run):  # the timing step of a built, warmed model
        raise RuntimeError("a kernel failed while timing")

    monkeypatch.setattr(measure, "time_iterations", broken)
    spec = RunSpec(run_id="r1", scenario="s", num_layers=1, input_len=8, output_len=2, iterations=1,
                   profile=False, numerics_check=False)
    result = worker.run(spec, tmp_path)
    assert result.status == "error" and result.plan  # the model was built: its plan is kept
    assert result.failure.kind == "benchmark_fail"
    assert result.failure.reason == "RuntimeError: a kernel failed while timing"


def test_kinds_reach_the_csv_and_records_of_schema_5_load_without_one(tmp_path) -> None:
    failed = run_result("r1", status="error", error="x",
                        failure=failure_kinds.Failure(kind="oom", reason="MemoryError"))
    write_results(tmp_path, [failed])
    assert "oom,MemoryError" in (tmp_path / "results.csv").read_text()
    raw = failed.to_dict()
    raw["schema_version"] = 5
    del raw["failure"]
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    (back,) = load_results(tmp_path)
    assert not back.failure and back.failure.kind is None


def test_the_reports_failures_table_lists_each_kind_with_its_reason() -> None:
    from perfbench.pages.table import Table
    from perfbench.report.runs import failures_section

    oom = run_result("r1", status="error", error="Traceback\nMemoryError",
                     failure=failure_kinds.Failure(kind="oom", reason="MemoryError"))
    refused = _ok_run(decisions={"mm_all_reduce": ToggleDecision("mm_all_reduce", True, "inactive", "needs TP", "")})
    refused.failure = of_measured(refused)
    fine = run_result("r3")
    (table,) = [b for b in failures_section([oom, refused, fine]).blocks if isinstance(b, Table)]
    assert [(row["run_id"], row["status"], row["kind"], row["reason"]) for row in table.rows] == [
        ("r1", "error", "oom", "MemoryError"),
        ("r1", "ok", "plan_refused", "mm_all_reduce requested, inactive: needs TP")]
