"""One worker process for the CPU runs of a round: the runner hands it run after run.

A run's process spends ~5 s importing torch and perfbench and, for a plan with compiled CPU kernels, several
seconds tracing them, before it times anything. The single-process CPU runs of one round therefore share a
worker (`python -m perfbench.run.worker --serve`); each round gets a fresh one, so the round stays the unit
that carries process-to-process variation, and the per-round random order spreads any order effect inside a
process over the combinations. Runs under torchrun, on an accelerator (device state, graph pools,
communicators) or with other environment variables keep a process of their own.

What a process of its own guaranteed still holds: every run has its own worker.log and timeout; a run that
crashes, hangs or is killed takes the worker with it and is recorded as such, and the next run gets a new worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from perfbench.results import RunSpec
from perfbench.run.cluster import NodeLaunch
from perfbench.run.launcher import (
    KILL_GRACE_S,
    WORKER_MODULE,
    ProcessOutcome,
    ending_signal,
    sigterm_as_interrupt,
    start_in_group,
    stop_group,
)

POLL_S = 1.0  # how often a run in flight checks that its worker is still alive


def shares_a_worker(spec: RunSpec, launch: NodeLaunch | None) -> bool:
    """Can this run use the round's worker? Single-process CPU runs of a one-node sweep only."""
    return spec.device == "cpu" and spec.world_size <= 1 and not (launch is not None and launch.multi_node)


class ReusedWorker:
    """The current worker process, started on demand and replaced when a run needs a different one."""

    def __init__(self, sweep_dir: Path, python: str = sys.executable) -> None:
        self.sweep_dir = sweep_dir
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._reply: IO[str] | None = None  # the read end of the reply pipe
        self._key: tuple[object, ...] | None = None

    def command(self, reply_fd: int) -> list[str]:
        return [self.python, "-m", WORKER_MODULE, "--serve", "--reply-fd", str(reply_fd),
                "--sweep", str(self.sweep_dir)]

    def run(self, spec_path: Path, run_dir: Path, env: dict[str, str], round_number: int,
            timeout_s: float) -> ProcessOutcome:
        """Measure one run in the worker for (`round_number`, `env`), starting that worker if needed."""
        job = {"spec": str(spec_path), "out": str(run_dir)}
        return self._job(job, [run_dir], env, round_number, timeout_s)[0]

    def run_group(self, spec_paths: list[Path], run_dirs: list[Path], env: dict[str, str], round_number: int,
                  timeout_s: float) -> list[ProcessOutcome]:
        """Measure a block group (perfbench/run/blocks.py) in the worker: one outcome per run."""
        job = {"specs": [str(p) for p in spec_paths], "outs": [str(d) for d in run_dirs]}
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
                if self._proc is None or key != self._key:
                    self.close()
                    self._start(env, log_path)
                    self._key = key
                return self._measure(job, len(run_dirs), log_path, timeout_s, start)
            except BaseException:
                self._kill()
                raise

    def close(self) -> None:
        """End the worker: close its stdin (it exits after the run in hand), then stop what is left of it."""
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=KILL_GRACE_S)
        self._kill()

    def _start(self, env: dict[str, str], log_path: Path) -> None:
        read_fd, write_fd = os.pipe()
        try:
            with open(log_path, "ab") as log:
                self._proc = start_in_group(self.command(write_fd), env, log, stdin=subprocess.PIPE,
                                            pass_fds=(write_fd,))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the worker holds it: EOF here means the worker is gone
        self._reply = os.fdopen(read_fd, "r")

    def _measure(self, job: dict[str, object], runs: int, log_path: Path, timeout_s: float,
                 start: float) -> list[ProcessOutcome]:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and self._reply is not None
        try:
            proc.stdin.write((json.dumps(job) + "\n").encode())
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker is gone; its end shows below
        deadline = start + timeout_s
        line = ""
        while True:
            # Polled rather than waiting for EOF alone: a child the worker forked may still hold the reply
            # pipe's write end after the worker itself has died.
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                return [ProcessOutcome(None, True, time.monotonic() - start, None)] * runs
            ready, _, _ = select.select([self._reply], [], [], min(remaining, POLL_S))
            if ready:
                line = self._reply.readline()
                break
            if proc.poll() is not None:
                break
        if line.strip():
            codes = json.loads(line)
            codes = codes if isinstance(codes, list) else [codes]
            return [ProcessOutcome(int(code), False, time.monotonic() - start, None) for code in codes]
        # EOF, or the worker is gone: it ended during the run (a crash, a signal, sys.exit)
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        rc = proc.returncode
        self._kill()
        return [ProcessOutcome(rc, False, time.monotonic() - start, ending_signal(rc, log_path))] * runs

    def _kill(self) -> None:
        """Stop the worker's process group and drop both pipes."""
        proc, self._proc = self._proc, None
        reply, self._reply = self._reply, None
        if proc is not None:
            stop_group(proc)
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        if reply is not None:
            reply.close()
