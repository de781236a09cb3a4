"""One run, in its own process: `python -m perfbench.run.worker --spec <run_dir>/spec.json --out <run_dir>`.

Reads the RunSpec, calls `perfbench.run.measure.measure_run`, and writes `<run_dir>/result.json` atomically
(local rank 0 of node 0 only under torchrun). An exception becomes a result with status "error" and the
traceback, exit 1.

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
import datetime
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from perfbench.results import RunPlan, RunResult, RunSpec, atomic_write_json
from perfbench.run.cluster import is_result_writer

FAULT_ENV = "PERFBENCH_FAULT"
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
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    try:
        inject_fault(fault_for_rank(os.environ.get(FAULT_ENV, ""), rank()))
        from perfbench.run.measure import measure_run  # imported here: torch/model load only in the worker

        result = measure_run(spec, run_dir)
    except Exception as err:  # noqa: BLE001 - every failure is recorded, the sweep goes on
        result = RunResult(run_id=spec.run_id, status="error", spec=spec, plan=getattr(err, "plan", RunPlan()),
                           error=traceback.format_exc().rstrip(), started_at=started)
    if not result.started_at:
        result.started_at = started
    if not result.wall_s:
        result.wall_s = time.monotonic() - t0
    if not result.env:
        from perfbench.run.environment import collect_environment

        result.env = collect_environment(spec.device)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfbench.run.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="spec.json written by the runner")
    parser.add_argument("--out", required=True, type=Path, help="the run's folder (result.json goes here)")
    args = parser.parse_args(argv)
    from perfbench.emulation.npu import activate_from_env  # the runner's --emulate-npu, before the model loads

    activate_from_env()
    spec = RunSpec.from_dict(json.loads(args.spec.read_text()))
    result = run(spec, args.out)
    if is_result_writer():
        atomic_write_json(args.out / "result.json", result.to_dict())
    if result.status != "ok":
        print(f"run {spec.run_id}: {result.status}\n{result.error or ''}", file=sys.stderr)
        return 1
    return 0


def _exit(code: int) -> None:
    """Exit with `code`; a rank of a multi-process run ends without tearing its process group down.

    NOTE: gloo's teardown at interpreter exit aborted a rank now and then on the 2-core dev machine
    ("terminate called without an active exception", SIGABRT), after the result was written; the run's
    outcome is decided by then, so the process ends with os._exit (stdio flushed first).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
