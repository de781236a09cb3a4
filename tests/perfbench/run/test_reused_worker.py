"""The round's worker process: reused run after run, replaced per round and environment, and a run that
crashes or hangs takes it down alone (the next run gets a new one)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from perfbench.measure import worker
from perfbench.measure.node_launch import NodeLaunch
from perfbench.results import RunSpec, load_results
from perfbench.run.launcher import PROJECT_DIR, child_env
from perfbench.run.reused_worker import ReusedWorker, shares_a_worker
from perfbench.run.runner import run_scenario

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc")

# A stand-in for `perfbench.measure.worker --serve` that follows its protocol: the spec file says what to do.
FAKE_WORKER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    reply = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    for line in sys.stdin:
        job = json.loads(line)
        action = open(job["spec"]).read()
        if action == "kill":
            os.kill(os.getpid(), 9)
        if action == "kill, a child keeping the reply pipe":
            subprocess.Popen(["sleep", "60"], pass_fds=(reply.fileno(),))
            os.kill(os.getpid(), 9)
        if action == "hang":
            time.sleep(3600)
        open(os.path.join(job["out"], "pid"), "w").write(str(os.getpid()))
        reply.write("0\\n")
""")


class FakeWorker(ReusedWorker):
    def command(self, reply_fd: int) -> list[str]:
        return [self.python, "-c", FAKE_WORKER, str(reply_fd), str(self.sweep_dir)]


def job(tmp_path: Path, name: str, action: str = "ok") -> tuple[Path, Path]:
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "spec.json").write_text(action)
    return run_dir / "spec.json", run_dir


def pid_of(run_dir: Path) -> int:
    return int((run_dir / "pid").read_text())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_runs_of_a_round_share_the_worker_and_a_new_round_gets_a_new_one(tmp_path):
    pool = FakeWorker(tmp_path)
    env = dict(os.environ)
    try:
        outcomes = [pool.run(*job(tmp_path, name), env, round_number, 30)
                    for name, round_number in (("a", 1), ("b", 1), ("c", 2))]
        other_env = pool.run(*job(tmp_path, "d"), {**env, "PERFBENCH_TEST_OTHER_ENV": "1"}, 2, 30)
    finally:
        pool.close()
    assert all(o.returncode == 0 and not o.timed_out for o in [*outcomes, other_env])
    a, b, c, d = (pid_of(tmp_path / n) for n in "abcd")
    assert a == b and len({a, c, d}) == 3
    assert not any(alive(p) for p in (a, c, d)), "close() leaves no worker behind"


def test_a_killed_run_is_recorded_and_the_next_run_gets_a_fresh_worker(tmp_path):
    pool = FakeWorker(tmp_path)
    env = dict(os.environ)
    try:
        first = pool.run(*job(tmp_path, "a"), env, 1, 30)
        killed = pool.run(*job(tmp_path, "b", "kill"), env, 1, 30)
        after = pool.run(*job(tmp_path, "c"), env, 1, 30)
    finally:
        pool.close()
    assert first.returncode == 0 and after.returncode == 0
    assert killed.signal == signal.SIGKILL and not killed.timed_out
    assert pid_of(tmp_path / "a") != pid_of(tmp_path / "c")


def test_a_worker_that_dies_is_seen_though_its_child_holds_the_reply_pipe(tmp_path):
    # no EOF on the reply pipe while the child lives: the runner must notice the worker's death anyway
    pool = FakeWorker(tmp_path)
    try:
        killed = pool.run(*job(tmp_path, "a", "kill, a child keeping the reply pipe"), dict(os.environ), 1, 30)
    finally:
        pool.close()
    assert killed.signal == signal.SIGKILL and not killed.timed_out and killed.wall_s < 15


def test_a_hanging_run_times_out_and_its_worker_is_stopped(tmp_path):
    pool = FakeWorker(tmp_path)
    try:
        pool.run(*job(tmp_path, "a"), dict(os.environ), 1, 30)
        hung = pool.run(*job(tmp_path, "b", "hang"), dict(os.environ), 1, 1.0)
    finally:
        pool.close()
    assert hung.timed_out and hung.returncode is None and 1.0 <= hung.wall_s < 30
    assert not alive(pid_of(tmp_path / "a"))


def test_only_single_process_cpu_runs_share_a_worker():
    cpu = RunSpec(run_id="r", scenario="t", device="cpu")
    assert shares_a_worker(cpu, None)
    assert not shares_a_worker(RunSpec(run_id="r", scenario="t", device="cuda"), None)
    assert not shares_a_worker(RunSpec(run_id="r", scenario="t", device="cpu", parallel={"world_size": 2}), None)
    assert not shares_a_worker(cpu, NodeLaunch(nnodes=2, nproc_per_node=1))


def test_the_real_worker_serves_runs_and_survives_a_failed_one(tmp_path):
    # The worker itself (no model: every run raises the injected fault before measuring): each run's output
    # goes to its own worker.log, a failed run answers 1 and the same process takes the next run.
    spec = RunSpec(run_id="r", scenario="t", device="cpu", env={worker.FAULT_ENV: "raise"})
    env = child_env(spec)
    assert str(PROJECT_DIR.absolute()) in env["PYTHONPATH"]
    pool = ReusedWorker(tmp_path)
    try:
        outcomes = []
        for name in ("a", "b"):
            run_dir = tmp_path / name
            run_dir.mkdir()
            (run_dir / "spec.json").write_text(json.dumps(spec.to_dict()))
            outcomes.append(pool.run(run_dir / "spec.json", run_dir, env, 1, 120))
    finally:
        pool.close()
    assert [o.returncode for o in outcomes] == [1, 1]
    logs = [(tmp_path / n / "worker.log").read_text() for n in ("a", "b")]
    assert "run 1 of this process" in logs[0] and "run 2 of this process" in logs[1]
    assert all("injected fault" in log for log in logs)
    pids = {line.split()[3].rstrip(":") for log in logs for line in log.splitlines() if "of this process" in line}
    assert len(pids) == 1
    results = [json.loads((tmp_path / n / "result.json").read_text()) for n in ("a", "b")]
    assert [r["status"] for r in results] == ["error", "error"]


@pytest.mark.slow
def test_a_sweep_shares_a_worker_per_round_and_its_compile_cache_across_rounds(tmp_path, monkeypatch):
    # Round 1 compiles fused_rmsnorm's kernels into the sweep's cache (a miss); round 2, a new process, finds
    # them there (a hit). Inside a round both combinations run in the same process. A TORCHINDUCTOR_CACHE_DIR
    # already set is kept by the runner (an in-process graph-mode test of this session may have set one), so
    # the test removes it to get the sweep's own, empty cache.
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    # the same thread count in both rounds: the compiled kernels' cache key holds it, and on a busy 2-core host the
    # worker would otherwise take 1 thread in one round and 2 in the other (measure/thread_budget.py)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    doc = {"perfbench": {"device": "cpu", "model": "tiny", "num_layers": 1, "seed": 0,
                         "workload": {"batch_sizes": [1], "input_lens": [16], "output_len": 2},
                         "measure": {"warmup": 1, "iterations": 2, "profile": False, "numerics_check": False},
                         "sweep": {"design": "explicit", "rounds": 2, "runs": [{}, {"fused_rmsnorm": True}]}}}
    path = tmp_path / "two_rounds.yaml"
    path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert run_scenario(str(path), str(out), [], dry_run=False, resume=False, report=None) == 0
    results = load_results(out)
    pid = {r.run_id: re.search(r"worker pid (\d+)", (out / "runs" / r.run_id / "worker.log").read_text())[1]
           for r in results}
    by_round = {k: {pid[r.run_id] for r in results if r.spec.round == k} for k in (1, 2)}
    assert all(len(pids) == 1 for pids in by_round.values()) and by_round[1] != by_round[2]
    warm = {r.spec.round: r.summary.compile_cache_warm for r in results if r.spec.toggles.get("fused_rmsnorm")}
    assert warm == {1: 0.0, 2: 1.0}
