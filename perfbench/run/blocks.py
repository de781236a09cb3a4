"""Interleaved blocks: the runs of one round and shape timed together, in one process.

Every run of the group is prepared first (perfbench/run/measure.py steps 1-2: reference, build, warm-up and
compile), and every model stays alive. Timing then goes in blocks: a block is one timed iteration of every run,
in a fresh seeded random order, with the host probe read before it. Two runs' iterations of one block are
seconds apart, so a host speed state (tens of seconds on a shared VM) hits both: the pair's ratio cancels it
(perfbench/analysis/paired.py). Each run's result carries its block index per iteration (`RunResult.blocks`)
and the process's token, so pairs are matched only inside one process.

Stopping: at least `iterations` blocks; then until every run's paired log ratio against the group's reference
run (the fewest toggles on) has a 95% t interval narrower than `target_rel_ci`, or `max_iterations` blocks, or
`max_time_s` per run of timing (the time the runs would have had one after another). A run that fails while
being prepared or timed becomes an error result; the others go on.
"""

from __future__ import annotations

import math
import os
import random
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

from model.backend import synchronize
from perfbench.analysis.paired import log_ratios
from perfbench.results import Failure, RunPlan, RunResult, RunSpec
from perfbench.run import failure_kinds
from perfbench.run.host_probe import HostProbe
from perfbench.run.measure import (
    HostWatch,
    PreparedRun,
    Timings,
    finish_run,
    prepare_run,
    record_timings,
)
from perfbench.run.stopping import CONVERGED, MAX_ITERATIONS, MAX_TIME

CONVERGED_PAIRED = f"{CONVERGED} (paired)"


@dataclass
class BlockRun:
    """One run of the group while blocks are timed."""

    prepared: PreparedRun
    timings: Timings
    block_index: list[int]
    error: str | None = None
    failure: Failure | None = None

    def fail(self, err: BaseException, stage: str) -> None:
        """The run is out of the group from here on."""
        self.error = "".join(traceback.format_exception(err)).rstrip()
        self.failure = failure_kinds.of_exception(failure_kinds.tagged(err, stage))


def _error_result(spec: RunSpec, err: BaseException, stage: str, plan: RunPlan | None = None) -> RunResult:
    return RunResult(run_id=spec.run_id, status="error", spec=spec, plan=plan or getattr(err, "plan", RunPlan()),
                     error="".join(traceback.format_exception(err)).rstrip(),
                     failure=failure_kinds.of_exception(failure_kinds.tagged(err, stage)))


def _paired_width(base: list[float], other: list[float]) -> float:
    """Width of the 95% t interval of the mean log ratio of aligned samples (inf below 3 pairs)."""
    logs = log_ratios(base, other)
    if logs.size < 3:
        return math.inf
    sd = float(np.std(logs, ddof=1))
    return 2 * float(scipy_stats.t.ppf(0.975, logs.size - 1)) * sd / math.sqrt(logs.size)


def stop_reason(runs: list[BlockRun], blocks: int, elapsed_s: float, spec: RunSpec) -> str | None:
    """Why to stop after `blocks` blocks, None to go on (see the module docstring)."""
    if blocks < spec.iterations:
        return None
    live = [r for r in runs if r.error is None]
    if spec.target_rel_ci is not None and len(live) >= 2:
        base = min(live, key=lambda r: len(r.prepared.spec.requested_on()))
        widths = [_paired_width(getattr(base.timings, key), getattr(r.timings, key))
                  for r in live if r is not base for key in ("ttft_ms", "tpot_ms")
                  if getattr(r.timings, key)]
        if widths and max(widths) <= spec.target_rel_ci:
            return CONVERGED_PAIRED
    if blocks >= (spec.max_iterations or spec.iterations):
        return MAX_ITERATIONS
    if spec.max_time_s is not None and elapsed_s >= spec.max_time_s * max(len(live), 1):
        return MAX_TIME
    return None


def measure_block_group(specs: list[RunSpec], run_dirs: list[Path]) -> list[RunResult]:
    """Prepare every run, time them in interleaved blocks, then finish each (expert load, profile)."""
    _allow_a_graph_per_run(len(specs))
    prepared: list[BlockRun] = []
    failed: dict[str, RunResult] = {}
    for spec, run_dir in zip(specs, run_dirs):
        try:
            prepared.append(BlockRun(prepare_run(spec, run_dir), Timings.empty(), []))
        except Exception as err:  # noqa: BLE001 - this run fails, the group goes on
            failed[spec.run_id] = _error_result(spec, err, failure_kinds.STARTUP)
    process = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if prepared:
        _warm_block(prepared)
        _time_blocks(prepared, process)
    out = []
    for spec in specs:
        if spec.run_id in failed:
            out.append(failed[spec.run_id])
            continue
        run = next(r for r in prepared if r.prepared.spec.run_id == spec.run_id)
        if run.error is not None:
            result = run.prepared.result
            result.status, result.error, result.failure = "error", run.error, run.failure
            out.append(result)
            continue
        try:
            out.append(finish_run(run.prepared))
        except Exception as err:  # noqa: BLE001
            out.append(_error_result(spec, err, failure_kinds.BENCHMARK, run.prepared.result.plan))
    return out


def _allow_a_graph_per_run(runs: int) -> None:
    """Every graph-mode model compiles the same decode function for its own `self`: dynamo counts each as a
    recompile of that function, and past its limit it would run the step eagerly without notice."""
    import torch._dynamo  # noqa: PLC0415

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, 8 * runs)


def _warm_block(runs: list[BlockRun]) -> None:
    """One untimed iteration of every run after all are built: a later run's warm-up may reset dynamo
    (`compile_warm_s`), and the graphs it dropped compile again here, not in a timed block."""
    for run in runs:
        try:
            run.prepared.iterate()
        except Exception as err:  # noqa: BLE001 - the run is out of the group
            run.fail(err, failure_kinds.STARTUP)  # a graph a later run's warm-up dropped compiles here


def _time_blocks(runs: list[BlockRun], process: str) -> None:
    first = runs[0].prepared
    spec = first.spec
    rng = random.Random(f"{spec.seed}-{spec.round}-{spec.block_group}")
    probe = HostProbe(spec.seed) if first.model.device.type == "cpu" else None
    probe_ms: list[float] = []
    watch = HostWatch.start()
    start = time.perf_counter()
    blocks = 0
    reason = None
    while reason is None:
        if probe is not None:
            probe_ms.append(probe())
        order = [r for r in runs if r.error is None]
        rng.shuffle(order)
        for run in order:
            try:
                run.timings.add(run.prepared.iterate())
                run.block_index.append(blocks)
            except Exception as err:  # noqa: BLE001 - the run is out of the group from here on
                run.fail(err, failure_kinds.BENCHMARK)
        blocks += 1
        reason = stop_reason(runs, blocks, time.perf_counter() - start, spec)
        if not any(r.error is None for r in runs):
            reason = "every run failed"
    synchronize(first.caps.device)
    host = watch.summary(first.caps.device)
    for run in runs:
        if run.error is not None:
            continue
        # every run sees the block's probe reading: the host speed while the whole block was timed
        run.timings.probe_ms = [probe_ms[i] for i in run.block_index] if probe_ms else []
        record_timings(run.prepared, run.timings, reason, host)
        run.prepared.result.blocks = {"group": spec.block_group, "process": process, "index": run.block_index,
                                      "runs": len(runs), "blocks": blocks}
