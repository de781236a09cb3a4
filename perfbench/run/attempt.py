"""One attempt at a run (or at a block group of runs): its folder and spec.json, its environment, the process or
worker it runs in, and the result it leaves, read back or made into a failure record. Every executor runs a
run through here; the runner orchestrates the sweep around it.
"""

from __future__ import annotations

import json
from pathlib import Path

from perfbench.config.sweep import PlannedRun
from perfbench.measure.compile_cache import compile_cache_dir
from perfbench.measure.failure_kinds import of_lost_process
from perfbench.measure.node_launch import NodeLaunch
from perfbench.measure.worker import WORKER_BANNER
from perfbench.results import Environment, Failure, RunPlan, RunResult, atomic_write_json
from perfbench.results.timestamps import utc_timestamp
from perfbench.run.launcher import (
    ProcessOutcome,
    child_env,
    rank_log_tails,
    run_process,
    signal_name,
    tail,
    worker_command,
)
from perfbench.run.reused_worker import ReusedWorker, shares_a_worker


def _now() -> str:
    return utc_timestamp()


def classify(planned: PlannedRun, outcome: ProcessOutcome, run_dir: Path, started: str,
             env: dict[str, object]) -> RunResult:
    """The run's result: the worker's result.json if it wrote one, else a failure record saying why."""
    spec = planned.spec
    result_path = run_dir / "result.json"
    if result_path.is_file():
        try:
            result = RunResult.from_dict(json.loads(result_path.read_text()))
        except (ValueError, TypeError) as err:
            result = RunResult(run_id=spec.run_id, status="error", spec=spec, error=f"unreadable result.json: {err}",
                               failure=Failure(kind="benchmark_fail", reason=f"unreadable result.json: {err}"))
        result.plan = result.plan or RunPlan.of(planned.plan)
        result.env = result.env or Environment.model_validate(env)
        result.started_at = result.started_at or started
        result.wall_s = result.wall_s or outcome.wall_s
        return result
    log = "\n".join(line for line in tail(run_dir / "worker.log").splitlines()
                    if not line.startswith(WORKER_BANNER))
    ranks = rank_log_tails(run_dir)
    parts = (log and f"--- worker.log ---\n{log}", ranks and f"--- rank logs ---\n{ranks}")
    detail = "\n".join(x for x in parts if x)
    if outcome.timed_out:
        status, why = "timeout", f"timed out after {spec.timeout_s:g} s; process group killed"
    elif outcome.signal is not None:
        status, why = "killed", f"killed by {signal_name(outcome.signal)} without a result"
    else:
        status, why = "error", f"worker exited with code {outcome.returncode} without a result"
    return RunResult(run_id=spec.run_id, status=status, spec=spec,
                     error=f"{why}\n{detail}".rstrip(), plan=RunPlan.of(planned.plan), env=dict(env),
                     started_at=started, wall_s=outcome.wall_s,
                     failure=of_lost_process(why, detail, outcome.timed_out))


def _prepare_attempt(planned: PlannedRun, out: Path, launch: NodeLaunch | None, base_env: dict[str, str] | None,
                     executor: str) -> tuple[Path, Path, dict[str, str]]:
    """(run folder, spec.json, the worker's environment) of a run about to start."""
    spec = planned.spec
    run_dir = out / "runs" / spec.run_id
    (run_dir / "result.json").unlink(missing_ok=True)  # left by an interrupted attempt
    spec_path = run_dir / "spec.json"
    atomic_write_json(spec_path, spec.to_dict())
    env_vars = child_env(spec, base_env, launch, executor)
    # one inductor cache per sweep, at a path the compiler's command line can take (measure/compile_cache.py)
    env_vars.setdefault("TORCHINDUCTOR_CACHE_DIR", str(compile_cache_dir(out)))
    env_vars.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    return run_dir, spec_path, env_vars


def execute_group(group: list[PlannedRun], out: Path, env: dict[str, object],
                  worker: ReusedWorker) -> list[tuple[RunResult, float]]:
    """A block group (perfbench/measure/blocks.py) in `worker`: every run's (result, wall seconds)."""
    attempts = [_prepare_attempt(p, out, None, None, "local") for p in group]
    started = _now()
    timeout = sum(p.spec.timeout_s for p in group)
    outcomes = worker.run_group([a[1] for a in attempts], [a[0] for a in attempts], attempts[0][2],
                                group[0].spec.round, timeout)
    return [(classify(p, o, a[0], started, env), o.wall_s) for p, o, a in zip(group, outcomes, attempts)]


def execute(planned: PlannedRun, out: Path, env: dict[str, object], launch: NodeLaunch | None = None,
            base_env: dict[str, str] | None = None, executor: str = "local",
            worker: ReusedWorker | None = None) -> tuple[RunResult, float]:
    """One run in a fresh process (torchrun when world_size > 1; node 0's part of a multi-node `launch`), or in
    `worker`, the round's process, when the run can share it (reused_worker.py): (result, the run's wall
    seconds). Every executor runs a run through here."""
    spec = planned.spec
    run_dir, spec_path, env_vars = _prepare_attempt(planned, out, launch, base_env, executor)
    started = _now()
    if worker is not None and shares_a_worker(spec, launch):
        outcome = worker.run(spec_path, run_dir, env_vars, spec.round, spec.timeout_s)
    else:
        outcome = run_process(worker_command(spec, spec_path, run_dir, launch=launch), env_vars,
                              run_dir / "worker.log", spec.timeout_s)
    return classify(planned, outcome, run_dir, started, env), outcome.wall_s
