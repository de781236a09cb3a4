"""The default executor: the runs one after another on this machine (this node's part of a multi-node run)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from perfbench.config.sweep import PlannedRun
from perfbench.run.cluster import NodeLaunch
from perfbench.run.executors.base import Finished
from perfbench.run.reused_worker import ReusedWorker


class LocalExecutor:
    name = "local"
    started_word = "running"

    def __init__(self, launch: NodeLaunch | None = None) -> None:
        self.launch = launch  # None: every run on this node alone

    def run(self, runs: Sequence[PlannedRun], out: Path, env: dict[str, object],
            announce: Callable[[PlannedRun], None]) -> Iterator[Finished]:
        from perfbench.run.runner import execute  # the runner imports this module

        worker = ReusedWorker(out)  # the CPU runs of a round share a process (perfbench/run/reused_worker.py)
        try:
            for planned in runs:
                announce(planned)
                result, wall = execute(planned, out, env, launch=self.launch, worker=worker)
                yield planned, result, wall
        finally:
            worker.close()
