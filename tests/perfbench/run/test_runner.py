"""Runner, launcher and worker: fault drills with real worker processes, timeouts, torchrun teardown, resume.

Each run's behaviour comes from PERFBENCH_FAULT (perfbench/measure/worker.py), set per run through explicit runs' env,
so these tests never load a model.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from model.backend import detect_capabilities
from model.toggles import TOGGLE_NAMES
from perfbench.cli import main
from perfbench.config.scenario import SCENARIOS_DIR, load_scenario
from perfbench.config.sweep import plan_sweep
from perfbench.measure import worker
from perfbench.measure.code_origin import BOOTSTRAP
from perfbench.results import RunSpec, load_results
from perfbench.run.launcher import PROJECT_DIR, child_env, ending_signal, worker_command
from perfbench.run.runner import run_scenario

TWO_RANKS = {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2, "embed_tp_size": 2, "lmhead_tp_size": 2}


def fault_scenario(tmp_path: Path, faults: list[str], timeout_s: float = 60,
                   parallel: dict[str, int] | None = None, timing: str = "blocks") -> Path:
    """An explicit sweep with one run per fault (toggles differ so each run is its own combination)."""
    toggles = ["chunk_gdr", "fused_rope", "fused_rmsnorm", "grouped_moe", "merged_projections"]
    runs = [{toggles[i]: True, "env": {worker.FAULT_ENV: fault}} for i, fault in enumerate(faults)]
    doc = {"perfbench": {"device": "cpu", "toggles": {t: False for t in toggles},
                         "measure": {"timeout_s": timeout_s, "profile": False, "numerics_check": False},
                         "sweep": {"design": "explicit", "runs": runs, "timing": timing}}}
    if parallel:
        doc["parallel_config"] = parallel
    path = tmp_path / "faults.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def by_fault(out: Path) -> dict[str, object]:
    return {r.spec.env[worker.FAULT_ENV]: r for r in load_results(out)}


def alive_with(text: str) -> list[int]:
    """Pids whose command line mentions `text` (a run's spec path): leftovers of a run."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def cli_output(result) -> str:
    return result.output  # click >= 8.2: stdout and stderr as the terminal shows them


# ---- fault drills ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_failed_runs_are_recorded_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "out"
    rc = run_scenario(str(fault_scenario(tmp_path, ["raise", "kill", "exit"])), str(out), [], dry_run=False,
                      resume=False, report=None)
    assert rc == 1  # a failed run is not a usage error
    results = by_fault(out)
    assert set(results) == {"raise", "kill", "exit"}
    assert results["raise"].status == "error"
    assert "RuntimeError: injected fault" in results["raise"].error and "Traceback" in results["raise"].error
    assert results["kill"].status == "killed" and "SIGKILL" in results["kill"].error
    assert results["exit"].status == "error" and "exited with code 3" in results["exit"].error
    # the injected exception comes before anything is measured; the other two leave no result to read
    assert {f: r.failure.kind for f, r in results.items()} == {"raise": "startup_fail", "kill": "benchmark_fail",
                                                              "exit": "benchmark_fail"}
    assert results["raise"].failure.reason == "RuntimeError: injected fault"
    csv_rows = list(csv.DictReader((out / "results.csv").open()))
    assert {row["failure_kind"] for row in csv_rows} == {"startup_fail", "benchmark_fail"}
    for r in results.values():
        assert r.plan.state("chunk_gdr") in ("on", "off") and r.env.device == "cpu"
        run_dir = out / "runs" / r.run_id
        assert (run_dir / "spec.json").is_file() and (run_dir / "worker.log").is_file()
    assert json.loads((out / "scenario.json").read_text())["name"] == "faults"
    assert len((out / "results.csv").read_text().strip().splitlines()) == 4  # header + 3 runs


@pytest.mark.slow
def test_hanging_run_times_out_and_leaves_no_process(tmp_path):
    out = tmp_path / "out"
    rc = run_scenario(str(fault_scenario(tmp_path, ["hang"], timeout_s=3)), str(out), [], dry_run=False,
                      resume=False, report=None)
    (result,) = load_results(out)
    assert rc == 1 and result.status == "timeout" and "timed out after 3 s" in result.error
    assert result.failure.kind == "timeout" and result.failure.reason.startswith("timed out after 3 s")
    assert alive_with(str(out / "runs" / result.run_id / "spec.json")) == []


@pytest.mark.slow
def test_torchrun_tears_down_the_group_when_a_rank_fails(tmp_path):
    # rank 0 fails (rank 1 hangs), then rank 1 is SIGKILLed (rank 0 hangs): torchrun must stop the survivor
    out = tmp_path / "out"
    rc = run_scenario(str(fault_scenario(tmp_path, ["0:raise,1:hang", "0:hang,1:kill"], timeout_s=60,
                                         parallel=TWO_RANKS)), str(out), [], dry_run=False, resume=False,
                      report=None)
    results = by_fault(out)
    assert rc == 1
    assert results["0:raise,1:hang"].status == "error" and "injected fault" in results["0:raise,1:hang"].error
    assert results["0:hang,1:kill"].status == "killed" and "SIGKILL" in results["0:hang,1:kill"].error
    for r in results.values():
        run_dir = out / "runs" / r.run_id
        assert list((run_dir / "ranks").glob("*/attempt_0/1/stderr.log")), "per-rank logs under ranks/"
        assert alive_with(str(run_dir / "spec.json")) == []


@pytest.mark.slow
def test_killed_sweep_resumes_without_redoing_or_duplicating_runs(tmp_path):
    # timed separately: each run is its own job, so the runner can be killed between two of them
    path = fault_scenario(tmp_path, ["raise"] * 4, timing="separate")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR.absolute())}
    proc = subprocess.Popen([sys.executable, "-m", "perfbench.cli", "run", str(path), "--out", str(out),
                             "--no-report"], cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    jsonl = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while not (jsonl.is_file() and jsonl.read_text().strip()) and proc.poll() is None:
        assert time.monotonic() < deadline, "the first run never finished"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {r.run_id: r.to_dict() for r in load_results(out)}
    assert 1 <= len(before) < 4, "killed mid-way"
    while alive_with(str(out)):  # the run in flight dies with its runner (it would race the resumed sweep)
        assert time.monotonic() < deadline, "a worker outlived its killed runner"
        time.sleep(0.05)

    rc = run_scenario(str(path), str(out), [], dry_run=False, resume=True, report=None)
    assert rc == 1  # every run here is an injected error
    ids = [json.loads(line)["run_id"] for line in jsonl.read_text().splitlines() if line.strip()]
    assert len(ids) == 4 and len(set(ids)) == 4
    after = {r.run_id: r.to_dict() for r in load_results(out)}
    assert all(after[i] == before[i] for i in before), "finished runs were not redone"

    # a second resume has nothing left to do
    assert run_scenario(str(path), str(out), [], dry_run=False, resume=True, report=None) == 1
    assert len(jsonl.read_text().strip().splitlines()) == 4


@pytest.mark.slow
def test_terminated_runner_stops_the_run_in_flight(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR.absolute())}
    path = fault_scenario(tmp_path, ["hang"])
    proc = subprocess.Popen([sys.executable, "-m", "perfbench.cli", "run", str(path), "--out", str(out),
                             "--no-report"], cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("runs/*/worker.log")):
        assert time.monotonic() < deadline and proc.poll() is None, "the run never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "--resume" in err and "Traceback" not in err  # SIGTERM: 128 + 15
    assert alive_with(str(out)) == []


# ---- CLI behaviour -----------------------------------------------------------------------------------------
def test_dry_run_prints_the_plans_and_runs_nothing(tmp_path):
    out = tmp_path / "never"
    result = CliRunner().invoke(main, ["run", "default_cpu", "--dry-run", "--out", str(out)])
    text = cli_output(result)
    assert result.exit_code == 0, text
    assert "+chunk_gdr" in text and "b1-i128-o8-" in text and "effective toggles" in text
    assert not out.exists()


def test_recipe_yaml_names_the_missing_model_in_a_dry_run_as_in_a_real_run(tmp_path):
    recipe = str(SCENARIOS_DIR / "recipe" / "qwen3_5_35b_ep8.yaml")
    # a CI check that validates with --dry-run must fail where the real run would
    for extra in (["--dry-run"], ["--out", str(tmp_path / "out")]):
        real = CliRunner().invoke(main, ["run", recipe, *extra])
        text = cli_output(real)
        assert real.exit_code == 2 and "Traceback" not in text
        assert "model_config.model_path: /data/models/Qwen3.5-35B-A3B not found" in text
        assert "--set perfbench.model=tiny" in text and len(text.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    # with a preset of the same model (on the absent npu: no host-memory check), the plans print
    dry = CliRunner().invoke(main, ["run", recipe, "--dry-run", "--set", "perfbench.model=qwen3.5-35b-a3b",
                                    "--set", "perfbench.device=npu"])
    assert dry.exit_code == 0 and "b4-i2048-o128-" in cli_output(dry)


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed here")
def test_absent_device_real_run_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(main, ["run", "ci_smoke", "--set", "perfbench.device=npu", "--out",
                                       str(tmp_path / "out")])
    text = cli_output(result)
    assert result.exit_code == 2 and "perfbench.device" in text and "Traceback" not in text
    dry = CliRunner().invoke(main, ["run", "ci_smoke", "--set", "perfbench.device=npu", "--dry-run"])
    assert dry.exit_code == 0 and "torch_npu not available" in cli_output(dry)


def test_out_folder_with_results_needs_resume(tmp_path):
    (tmp_path / "results.jsonl").write_text("")
    result = CliRunner().invoke(main, ["run", "ci_smoke", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--resume" in cli_output(result)
    result = CliRunner().invoke(main, ["run", "ci_smoke", "--resume"])
    assert result.exit_code == 2 and "--resume needs --out" in cli_output(result)


# ---- launcher and worker pieces ----------------------------------------------------------------------------
def test_worker_command_single_process_and_torchrun(tmp_path):
    spec = RunSpec(run_id="r", scenario="s")
    cmd = worker_command(spec, tmp_path / "spec.json", tmp_path)
    # `python -c BOOTSTRAP ROOT MODULE ...`: this checkout's code, whatever folder the worker starts in
    assert cmd == [sys.executable, "-c", BOOTSTRAP, str(PROJECT_DIR), "perfbench.measure.worker",
                   f"--spec={tmp_path / 'spec.json'}", f"--out={tmp_path}"]
    spec.parallel = dict(TWO_RANKS)
    cmd = worker_command(spec, tmp_path / "spec.json", tmp_path, port=29999)
    joined = " ".join(cmd)
    assert cmd[1:5] == ["-c", BOOTSTRAP, str(PROJECT_DIR), "torch.distributed.run"]
    rank = f"--no-python {sys.executable} -c {BOOTSTRAP} {PROJECT_DIR} perfbench.measure.worker --spec="
    for part in ("--nnodes 1", "--nproc-per-node 2", "--master-addr 127.0.0.1", "--master-port 29999",
                 f"--log-dir={tmp_path / 'ranks'}", "--redirects 3", rank):
        assert part in joined


def test_child_env_adds_the_spec_env_and_leaves_threads_alone():
    spec = RunSpec(run_id="r", scenario="s", env={"HCCL_DETERMINISTIC": "true"})
    env = child_env(spec, base={"PATH": "/bin", "PYTHONPATH": "/x"})
    assert env["HCCL_DETERMINISTIC"] == "true" and env["PATH"] == "/bin"
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == "/x" and "OMP_NUM_THREADS" not in env


def test_ending_signal_reads_torchrun_root_cause(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text(textwrap.dedent("""\
        Root Cause (first observed failure):
        [0]:
          rank      : 1 (local_rank: 1)
          exitcode  : -9 (pid: 123)  (SIGKILL)
    """))
    assert ending_signal(1, log) == signal.SIGKILL
    assert ending_signal(-15, log) == signal.SIGTERM and ending_signal(137, log) == signal.SIGKILL
    log.write_text("Traceback ...\nValueError: x\n")
    assert ending_signal(1, log) is None and ending_signal(0, log) is None


def test_fault_values_per_rank():
    assert worker.fault_for_rank("raise", 3) == "raise"
    assert worker.fault_for_rank("0:raise,1:hang", 1) == "hang"
    assert worker.fault_for_rank("1:kill", 0) is None and worker.fault_for_rank("", 0) is None
    with pytest.raises(ValueError, match="unknown fault 'boom'"):
        worker.fault_for_rank("boom", 0)


def test_worker_records_an_exception_as_an_error_result(tmp_path, monkeypatch):
    monkeypatch.setenv(worker.FAULT_ENV, "raise")
    spec = RunSpec(run_id="r1", scenario="s")
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    assert worker.main(["--spec", str(spec_path), "--out", str(tmp_path)]) == 1
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "error" and result["run_id"] == "r1" and "injected fault" in result["error"]
    assert result["env"]["torch_threads"] >= 1 and result["started_at"]


@pytest.mark.parametrize("rank_env", [{"RANK": "1", "LOCAL_RANK": "1"},
                                      {"RANK": "0", "LOCAL_RANK": "0", "PERFBENCH_NODE_RANK": "1"}],
                         ids=["rank 1", "local rank 0 of node 1"])
def test_only_local_rank_zero_of_node_zero_writes_the_result(tmp_path, monkeypatch, rank_env):
    monkeypatch.setenv(worker.FAULT_ENV, "raise")
    for name, value in rank_env.items():
        monkeypatch.setenv(name, value)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(RunSpec(run_id="r1", scenario="s").to_dict()))
    assert worker.main(["--spec", str(spec_path), "--out", str(tmp_path)]) == 1
    assert not (tmp_path / "result.json").exists()


def test_worker_refuses_a_plan_other_than_the_runners(tmp_path):
    """The runner labels a run with its plan; a worker whose own detection resolves another plan must not
    measure under that label."""
    expected = dict.fromkeys(TOGGLE_NAMES, "off")
    expected["chunk_gdr"] = "on"  # the worker is asked for everything off, so it resolves chunk_gdr off
    spec = RunSpec(run_id="r1", scenario="s", num_layers=1, input_len=8, output_len=2, iterations=1,
                   profile=False, numerics_check=False, expected_plan=expected)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    assert worker.main(["--spec", str(spec_path), "--out", str(tmp_path)]) == 1
    result = json.loads((tmp_path / "result.json").read_text())
    last_line = result["error"].splitlines()[-1]
    assert result["status"] == "error" and "PlanMismatchError" in last_line
    assert "different plan than the runner (chunk_gdr on -> off)" in last_line
    assert result["failure"]["kind"] == "plan_refused" and "chunk_gdr on -> off" in result["failure"]["reason"]
    assert result["plan"]["chunk_gdr"]["state"] == "off"  # the worker's own plan is kept for the record


def test_sweep_hands_each_run_its_resolved_plan():
    sweep = plan_sweep(load_scenario("ci_smoke"), detect_capabilities("cpu"))
    for planned in sweep.runs:
        assert planned.spec.expected_plan == {n: d.state for n, d in planned.plan.decisions.items()}
