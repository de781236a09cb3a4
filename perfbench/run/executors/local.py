"""The default executor: the runs one after another on this machine (this node's part of a multi-node run)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from perfbench.config.sweep import PlannedRun
from perfbench.measure.node_launch import NodeLaunch
from perfbench.run.attempt import execute, execute_group
from perfbench.run.executors.base import Finished
from perfbench.run.reused_worker import ReusedWorker


class LocalExecutor:
    name = "local"
    started_word = "running"

    def __init__(self, launch: NodeLaunch | None = None) -> None:
        self.launch = launch  # None: every run on this node alone

    def run(self, runs: Sequence[PlannedRun], out: Path, env: dict[str, object],
            announce: Callable[[PlannedRun], None]) -> Iterator[Finished]:
        worker = ReusedWorker(out)  # the CPU runs of a round share a process (perfbench/run/reused_worker.py)
        done: set[str] = set()
        try:
            for planned in runs:
                if planned.spec.run_id in done:
                    continue
                if planned.spec.timing == "blocks":
                    # the whole group at once, in one process (perfbench/measure/blocks.py)
                    group = [p for p in runs if p.spec.block_group == planned.spec.block_group
                             and p.spec.timing == "blocks"]
                    for p in group:
                        announce(p)
                    for p, (result, wall) in zip(group, execute_group(group, out, env, worker)):
                        done.add(p.spec.run_id)
                        yield p, result, wall
                    continue
                announce(planned)
                result, wall = execute(planned, out, env, launch=self.launch, worker=worker)
                yield planned, result, wall
        finally:
            worker.close()
