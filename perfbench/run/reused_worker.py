"""One worker process for the CPU runs of a round: the runner hands it run after run.

A run's process spends ~5 s importing torch and perfbench and, for a plan with compiled CPU kernels, several
seconds tracing them, before it times anything. The single-process CPU runs of one round therefore share a
worker (`python -m perfbench.measure.worker --serve`); each round gets a fresh one, so the round stays the unit
that carries process-to-process variation, and the per-round random order spreads any order effect inside a
process over the combinations. Runs under torchrun, on an accelerator (device state, graph pools,
communicators) or with other environment variables keep a process of their own.

What a process of its own guaranteed still holds: every run has its own worker.log and timeout; a run that
crashes, hangs or is killed takes the worker with it and is recorded as such, and the next run gets a new worker.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from perfbench.measure.code_origin import module_command
from perfbench.measure.node_launch import NodeLaunch
from perfbench.results import RunSpec
from perfbench.run.launcher import WORKER_MODULE, ProcessOutcome, ending_signal, sigterm_as_interrupt
from perfbench.run.worker_process import WorkerProcess


def shares_a_worker(spec: RunSpec, launch: NodeLaunch | None) -> bool:
    """Can this run use the round's worker? Single-process CPU runs of a one-node sweep only."""
    return spec.device == "cpu" and spec.world_size <= 1 and not (launch is not None and launch.multi_node)


class ReusedWorker:
    """The current worker process, started on demand and replaced when a run needs a different one."""

    def __init__(self, sweep_dir: Path, python: str = sys.executable) -> None:
        self.sweep_dir = sweep_dir
        self.python = python
        self._worker: WorkerProcess | None = None
        self._key: tuple[object, ...] | None = None

    def command(self, reply_fd: int) -> list[str]:
        # this code, whatever folder the sweep was started in (measure/code_origin.py)
        return module_command(self.python, WORKER_MODULE, "--serve", "--reply-fd", str(reply_fd),
                              f"--sweep={self.sweep_dir}")

    def run(self, spec_path: Path, run_dir: Path, env: dict[str, str], round_number: int,
            timeout_s: float) -> ProcessOutcome:
        """Measure one run in the worker for (`round_number`, `env`), starting that worker if needed."""
        job: dict[str, object] = {"spec": str(spec_path), "out": str(run_dir)}
        return self._job(job, [run_dir], env, round_number, timeout_s)[0]

    def run_group(self, spec_paths: list[Path], run_dirs: list[Path], env: dict[str, str], round_number: int,
                  timeout_s: float) -> list[ProcessOutcome]:
        """Measure a block group (perfbench/measure/blocks.py) in the worker: one outcome per run."""
        job: dict[str, object] = {"specs": [str(p) for p in spec_paths], "outs": [str(d) for d in run_dirs]}
        return self._job(job, run_dirs, env, round_number, timeout_s)

    def _job(self, job: dict[str, object], run_dirs: list[Path], env: dict[str, str], round_number: int,
             timeout_s: float) -> list[ProcessOutcome]:
        log_path = run_dirs[0] / "worker.log"
        for run_dir in run_dirs:
            run_dir.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        # SIGTERM unwinds from before the log exists: whoever sees the run start may stop it at once
        with sigterm_as_interrupt():
            for run_dir in run_dirs:
                (run_dir / "worker.log").write_bytes(b"")  # the worker appends this job's output
            try:
                key = (round_number, tuple(sorted(env.items())))
                if self._worker is None or key != self._key:
                    self.close()
                    self._worker = WorkerProcess(self.command, env, log_path)
                    self._key = key
                return self._measure(self._worker, job, len(run_dirs), log_path, start + timeout_s, start)
            except BaseException:
                self._kill()
                raise

    def close(self) -> None:
        """End the worker: close its stdin (it exits after the run in hand), then stop what is left of it."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    def _measure(self, worker: WorkerProcess, job: dict[str, object], runs: int, log_path: Path, deadline: float,
                 start: float) -> list[ProcessOutcome]:
        worker.send(job)  # a worker already gone shows in the answer
        try:
            codes = worker.answer(deadline)
        except TimeoutError:
            self._kill()
            return [ProcessOutcome(None, True, time.monotonic() - start, None)] * runs
        if codes is not None:
            codes = codes if isinstance(codes, list) else [codes]
            return [ProcessOutcome(int(code), False, time.monotonic() - start, None) for code in codes]
        # the worker ended during the run (a crash, a signal, sys.exit)
        rc = worker.wait_ended()
        self._kill()
        return [ProcessOutcome(rc, False, time.monotonic() - start, ending_signal(rc, log_path))] * runs

    def _kill(self) -> None:
        """Stop the worker's process group and drop both pipes."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.kill()
