"""The process that measures runs.

One run: `python -m perfbench.measure.worker --spec <run_dir>/spec.json --out <run_dir>` reads the RunSpec, calls
`perfbench.measure.run_steps.measure_run`, and writes `<run_dir>/result.json` atomically (local rank 0 of node 0 only
under torchrun). An exception becomes a result with status "error" and the traceback, exit 1.

Several runs, one after another (the CPU runs of one round, perfbench/run/reused_worker.py):
`python -m perfbench.measure.worker --serve --reply-fd N --sweep DIR` reads one JSON line per job from stdin and
answers each job as a line on file descriptor N:
- {"spec": ..., "out": ...}: one run timed on its own; its output goes to its own `worker.log`; the answer is
  the run's exit code;
- {"specs": [...], "outs": [...]}: a block group, timed together in interleaved blocks
  (perfbench/measure/blocks.py); the output goes to the first run's `worker.log` (the others' logs point there);
  the answer is a JSON list of the runs' exit codes.
It ends when stdin closes; a fault that ends the process ends it mid-run, as it would end a process of its own.

Fault drills (the test hook for the runner's failure handling): the environment variable PERFBENCH_FAULT makes
the worker fail on purpose before measuring:
  raise  raise RuntimeError("injected fault")   -> result.json with status "error", exit 1
  hang   sleep forever                          -> the runner's timeout kills the process group
  kill   SIGKILL itself                          -> no result; the runner records "killed"
  exit   sys.exit(3) without a result           -> the runner records "error" with the log tail
Under torchrun the value may name ranks: "1:kill" or "0:raise,1:hang" (ranks not named run normally).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from perfbench.measure import failure_kinds
from perfbench.measure.node_launch import is_result_writer
from perfbench.measure.requests import requests, send_answer
from perfbench.results import Environment, RunPlan, RunResult, RunSpec, atomic_write_json
from perfbench.results.timestamps import utc_timestamp

FAULT_ENV = "PERFBENCH_FAULT"
WORKER_BANNER = "perfbench worker pid "  # the first line of each job in a shared worker's log
FAULTS = ("raise", "hang", "kill", "exit")


def rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def fault_for_rank(value: str, this_rank: int) -> str | None:
    """The fault PERFBENCH_FAULT asks of this rank: "kill" (every rank) or "0:raise,1:hang" (named ranks)."""
    value = value.strip()
    if not value:
        return None
    if ":" not in value:
        fault: str | None = value
    else:
        fault = None
        for part in value.split(","):
            who, _, what = part.partition(":")
            if who.strip() == str(this_rank):
                fault = what.strip()
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"{FAULT_ENV}={value!r}: unknown fault {fault!r}; faults are {', '.join(FAULTS)}")
    return fault


def inject_fault(fault: str | None) -> None:
    if fault == "raise":
        raise RuntimeError("injected fault")
    if fault == "hang":
        while True:
            time.sleep(3600)
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "exit":
        sys.exit(3)


def run(spec: RunSpec, run_dir: Path) -> RunResult:
    """Measure one spec; an exception becomes an "error" result carrying the traceback."""
    started = utc_timestamp()
    t0 = time.monotonic()
    try:
        inject_fault(fault_for_rank(os.environ.get(FAULT_ENV, ""), rank()))
        from perfbench.measure.run_steps import measure_run  # imported here: torch/model load only in the worker
        from perfbench.measure.thread_budget import fit_threads_to_host

        fit_threads_to_host(spec.device)
        result = measure_run(spec, run_dir)
    except Exception as err:  # noqa: BLE001 - every failure is recorded, the sweep goes on
        result = RunResult(run_id=spec.run_id, status="error", spec=spec, plan=getattr(err, "plan", RunPlan()),
                           error=traceback.format_exc().rstrip(), started_at=started,
                           failure=failure_kinds.of_exception(err, run_dir / "worker.log"))  # _record prints it
    return _finalize(result, spec, started, t0)


def _finalize(result: RunResult, spec: RunSpec, started: str, t0: float) -> RunResult:
    if result.status == "ok" and not result.failure:
        result.failure = failure_kinds.of_measured(result)
    if not result.started_at:
        result.started_at = started
    if not result.wall_s:
        result.wall_s = time.monotonic() - t0
    if not result.env:
        from perfbench.measure.environment import collect_environment

        result.env = Environment.model_validate(collect_environment(spec.device))
    return result


def run_group(specs: list[RunSpec], run_dirs: list[Path]) -> list[RunResult]:
    """Measure a block group; a failure before any run is prepared becomes an "error" result for each."""
    started = utc_timestamp()
    t0 = time.monotonic()
    try:
        inject_fault(fault_for_rank(os.environ.get(FAULT_ENV, ""), rank()))
        from perfbench.measure.blocks import measure_block_group
        from perfbench.measure.thread_budget import fit_threads_to_host

        fit_threads_to_host(specs[0].device)
        results = measure_block_group(specs, run_dirs)
    except Exception as err:  # noqa: BLE001 - every failure is recorded, the sweep goes on
        error, failure = traceback.format_exc().rstrip(), failure_kinds.of_exception(err)
        results = [RunResult(run_id=s.run_id, status="error", spec=s, error=error, failure=failure) for s in specs]
    return [_finalize(r, s, started, t0) for r, s in zip(results, specs)]


def _record(result: RunResult, run_dir: Path) -> int:
    if is_result_writer():
        atomic_write_json(run_dir / "result.json", result.to_dict())
    if result.status != "ok":
        print(f"run {result.run_id}: {result.status}\n{result.error or ''}", file=sys.stderr)
        return 1
    return 0


def measure_and_record(spec_path: Path, run_dir: Path) -> tuple[RunResult, int]:
    """Measure the spec in `spec_path` and write run_dir/result.json: (the result, the exit code)."""
    spec = RunSpec.from_dict(json.loads(spec_path.read_text()))
    result = run(spec, run_dir)
    return result, _record(result, run_dir)


def measure_group_and_record(spec_paths: list[Path], run_dirs: list[Path]) -> tuple[list[RunResult], list[int]]:
    specs = [RunSpec.from_dict(json.loads(p.read_text())) for p in spec_paths]
    results = run_group(specs, run_dirs)
    return results, [_record(r, d) for r, d in zip(results, run_dirs)]


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so native code's output too) to
    `log_path` while the block runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def serve(reply_fd: int) -> int:
    """Measure the runs named on stdin, one per line, answering each one's exit code on `reply_fd`."""
    with os.fdopen(reply_fd, "w", buffering=1) as reply:
        for number, job in enumerate(requests(), 1):
            if "specs" in job:
                run_dirs = [Path(d) for d in job["outs"]]
                for other in run_dirs[1:]:
                    (other / "worker.log").write_text(f"timed in a block group with {len(run_dirs)} runs; "
                                                      f"the group's log is {run_dirs[0] / 'worker.log'}\n")
                with output_to(run_dirs[0] / "worker.log"):
                    print(f"{WORKER_BANNER}{os.getpid()}: job {number} of this process, a block group of "
                          f"{len(run_dirs)} runs", flush=True)
                    results, codes = measure_group_and_record([Path(p) for p in job["specs"]], run_dirs)
                answer: int | list[int] = codes
            else:
                run_dir = Path(job["out"])
                with output_to(run_dir / "worker.log"):
                    print(f"{WORKER_BANNER}{os.getpid()}: run {number} of this process", flush=True)
                    result, code = measure_and_record(Path(job["spec"]), run_dir)
                results, answer = [result], code
            if any(r.plan.on("graph_mode") for r in results):
                # every graph-mode model compiles its own decode step; dynamo's per-function recompile limit
                # would otherwise make a later run's graph fall back to eager without notice
                import torch._dynamo

                torch._dynamo.reset()
            gc.collect()
            send_answer(reply, answer)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfbench.measure.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, help="spec.json written by the runner")
    parser.add_argument("--out", type=Path, help="the run's folder (result.json goes here)")
    parser.add_argument("--serve", action="store_true", help="measure the runs named on stdin, one per line")
    parser.add_argument("--reply-fd", type=int, help="with --serve: where each run's exit code is written")
    parser.add_argument("--sweep", type=Path, help="with --serve: the sweep's folder (shown by ps, not read)")
    args = parser.parse_args(argv)
    if args.serve != (args.reply_fd is not None) or args.serve == (args.spec is not None and args.out is not None):
        parser.error("give --spec and --out, or --serve with --reply-fd")
    from perfbench.measure.code_origin import code_root_problem

    if problem := code_root_problem():  # model/ or perfbench/ from another folder than the command's code
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from perfbench.emulation.npu import activate_from_env  # the runner's --emulate-npu, before the model loads

    activate_from_env()
    if args.serve:
        return serve(args.reply_fd)
    return measure_and_record(args.spec, args.out)[1]


def _exit(code: int) -> None:
    """Exit with `code`; a rank of a multi-process run ends with `model.parallel.finish`.

    NOTE: gloo's teardown at interpreter exit aborted a rank now and then ("terminate called without an active
    exception", SIGABRT) after the result was written. `finish` meets the other ranks (exit code 0 only),
    destroys the group, runs the atexit functions, flushes, and ends with os._exit, so no interpreter
    shutdown runs beside a live gloo thread. result.json is written (atomically) before this is called.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        from model.parallel import finish

        finish(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
