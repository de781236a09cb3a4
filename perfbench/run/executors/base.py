"""The executor seam: the runner hands an executor the runs still to do and records what it yields.

Every executor runs a run through `perfbench.run.attempt.execute` (process, timeout, failure record), so a
result folder does not depend on the executor except for the `executor` field of each result's environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from perfbench.config.sweep import PlannedRun
from perfbench.results import RunResult

Finished = tuple[PlannedRun, RunResult, float]  # (the run, its result, the process's wall seconds)


class Executor(Protocol):
    name: str  # recorded in each result's environment
    started_word: str  # how the progress line says a run was handed over ("running", "queued")

    def run(self, runs: Sequence[PlannedRun], out: Path, env: dict[str, object],
            announce: Callable[[PlannedRun], None]) -> Iterator[Finished]:
        """Run `runs` (results under `out`; `env` is the failure records' environment), yielding each run as
        it finishes, in any order. `announce` is called as a run is handed over."""
        ...
