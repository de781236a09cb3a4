"""A result folder has one owner: the lock, the stored sweep identity on --resume, and killed runs retried."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner, Result

from model.backend import Capabilities
from perfbench.cli import main
from perfbench.config.scenario import load_scenario
from perfbench.config.sweep import plan_sweep
from perfbench.results import RunPlan, write_results
from perfbench.run import attempt, runner
from perfbench.run.folder_owner import check_identity, identity, owned
from perfbench.run.launcher import ProcessOutcome
from tests.cli_helpers import one_error_line
from tests.records_kit import run_result

CPU = Capabilities(device="cpu", device_name="cpu")


def _one_line_error(result: Result, needle: str) -> None:
    assert needle in one_error_line(result), result.stderr


def test_a_second_run_into_a_held_folder_is_refused_with_the_holders_pid(tmp_path: Path):
    out = tmp_path / "out"
    with owned(out):
        result = CliRunner().invoke(main, ["run", "ci_smoke", "--out", str(out)])
    _one_line_error(result, f"another perfbench run (pid {os.getpid()}) is writing this folder")
    assert not (out / "results.jsonl").exists()
    with owned(out):  # released: the next owner gets it
        pass


def test_resume_with_a_changed_measuring_setting_is_refused_naming_the_key(tmp_path: Path):
    out = tmp_path / "out"
    check_identity(out, load_scenario("ci_smoke", []).as_dict(), resume=False)
    for setting, key in (("perfbench.measure.iterations=7", "perfbench.measure.iterations: 5 -> 7"),
                         ("data_config.temperature=0.5", "data_config.temperature: 0.0 -> 0.5"),
                         ("perfbench.env.OMP_NUM_THREADS=1", "perfbench.env.OMP_NUM_THREADS: '<absent>' -> '1'")):
        result = CliRunner().invoke(main, ["run", "ci_smoke", "--out", str(out), "--resume", "--set", setting])
        _one_line_error(result, key)
    # the stored identity is untouched by the refusals
    assert check_identity(out, load_scenario("ci_smoke", []).as_dict(), resume=True) is None


def test_supervision_settings_are_not_part_of_the_identity():
    plain = identity(load_scenario("ci_smoke", []).as_dict())
    longer = identity(load_scenario("ci_smoke", ["perfbench.measure.timeout_s=900"]).as_dict())
    assert plain == longer
    assert identity(load_scenario("ci_smoke", ["perfbench.seed=1"]).as_dict()) != plain


class _Recorder:
    """An executor that records which runs it was asked to measure and reports them ok."""

    name = "local"
    started_word = "running"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def run(self, runs, out, env, announce):
        for planned in runs:
            self.asked.append(planned.spec.run_id)
            yield planned, run_result(planned.spec.run_id, spec=planned.spec,
                                      plan=RunPlan.of(planned.plan)), 0.0


def test_resume_measures_killed_and_timed_out_runs_again_and_keeps_the_rest(tmp_path: Path):
    sweep = plan_sweep(load_scenario("ci_smoke", []), CPU)
    specs = [p.spec for p in sweep.runs]
    ended = [("killed", "killed by SIGKILL without a result"), ("timeout", "timed out"),
             ("error", "RuntimeError: a bug"), ("ok", None)]
    previous = [run_result(spec.run_id, status=status, spec=spec, error=error)
                for spec, (status, error) in zip(specs, ended)]
    write_results(tmp_path, previous)
    executor = _Recorder()
    results = runner.run_sweep(sweep, tmp_path, previous, executor)
    assert executor.asked == [specs[0].run_id, specs[1].run_id]
    assert {r.run_id: r.status for r in results} == {specs[0].run_id: "ok", specs[1].run_id: "ok",
                                                     specs[2].run_id: "error", specs[3].run_id: "ok"}


def test_a_killed_shared_worker_reports_the_signal_not_its_banner(tmp_path: Path):
    sweep = plan_sweep(load_scenario("ci_smoke", []), CPU)
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "worker.log").write_text("perfbench worker pid 123: run 2 of this process\n")
    result = attempt.classify(sweep.runs[0], ProcessOutcome(-9, False, 1.0, 9), run_dir, "now", {})
    assert result.status == "killed"
    assert result.error.strip().splitlines()[-1] == "killed by SIGKILL without a result"
