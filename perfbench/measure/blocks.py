"""Interleaved blocks: the runs of one round and shape timed together, in one process.

Every run of the group is prepared first (perfbench/measure/run_steps.py steps 1-2: reference, build, warm-up and
compile), and every model stays alive. Timing then goes in blocks: a block is one timed iteration of every run,
in a fresh seeded random order, with the host probe read before it. Two runs' iterations of one block are
seconds apart, so a host speed state (tens of seconds on a shared VM) hits both: the pair's ratio cancels it
(perfbench/analysis/paired.py). Each run's result carries its block index per iteration (`RunResult.blocks`)
and the process's token, so pairs are matched only inside one process.

Epochs: every `EPOCH_BLOCKS` blocks, each run's weights move to new storage behind random spacers
(perfbench/measure/epochs.py) and one untimed block follows; the epoch (within its process) is the cluster of the
paired statistics (perfbench/analysis/paired.py), recorded per iteration in `RunResult.blocks.epoch`.

Stopping (adaptive measure settings): at least `iterations` blocks; then, at planned looks over the time budget
(`max_time_s` per run: the time the runs would have had one after another; Haybittle-Peto levels), until every
run's paired ratio against the group's reference run (the fewest toggles on) is decided by the same rule as its
verdict (same, slower or faster), or `max_iterations` blocks, or the budget. A run that fails while being
prepared or timed becomes an error result; the others go on.
"""

from __future__ import annotations

import os
import time
import traceback
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from model.backend import synchronize
from perfbench.analysis import paired
from perfbench.analysis.sequential import DecisionRule, SequentialJob
from perfbench.measure import failure_kinds
from perfbench.measure.epoch_engine import EpochEngine, TimedUnit, allow_a_graph_per_unit
from perfbench.measure.epochs import relocatable
from perfbench.measure.host_probe import HostProbe
from perfbench.measure.run_steps import (
    HostWatch,
    PreparedRun,
    Timings,
    finish_run,
    prepare_run,
    record_timings,
)
from perfbench.measure.stopping import CONVERGED, MAX_ITERATIONS, MAX_TIME
from perfbench.results import BlockPlacement, Failure, RunPlan, RunResult, RunSpec

CONVERGED_PAIRED = f"{CONVERGED} (paired)"
EPOCH_BLOCKS = 5  # timed blocks per epoch (the trimmed mean of a cluster needs 5 pairs)
METRICS = ("ttft_ms", "tpot_ms")


@dataclass
class BlockRun:
    """One run of the group while blocks are timed."""

    prepared: PreparedRun
    timings: Timings
    block_index: list[int]
    epoch: list[int] = field(default_factory=list)
    position: list[int] = field(default_factory=list)  # the iteration's place in its block's random order
    error: str | None = None
    failure: Failure = field(default_factory=Failure)  # set with `error`

    def fail(self, err: BaseException, stage: str) -> None:
        """The run is out of the group from here on."""
        self.error = "".join(traceback.format_exception(err)).rstrip()
        self.failure = failure_kinds.of_exception(failure_kinds.tagged(err, stage))


def _error_result(spec: RunSpec, err: BaseException, stage: str, plan: RunPlan | None = None) -> RunResult:
    return RunResult(run_id=spec.run_id, status="error", spec=spec, plan=plan or getattr(err, "plan", RunPlan()),
                     error="".join(traceback.format_exception(err)).rstrip(),
                     failure=failure_kinds.of_exception(failure_kinds.tagged(err, stage)))


def reference_run(runs: list[BlockRun]) -> BlockRun:
    """The run every other run of the group is paired with: the fewest toggles on."""
    return min(runs, key=lambda r: len(r.prepared.spec.requested_on()))


def epoch_estimates(runs: list[BlockRun]) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], int]]:
    """(run_id, metric) -> each epoch's paired log-ratio estimate against the group's reference run, and the pairs
    behind them: the tests of the group's sequential decision."""
    live = [r for r in runs if r.error is None]
    estimates: dict[tuple[str, str], list[float]] = {}
    pairs: dict[tuple[str, str], int] = {}
    if len(live) < 2:
        return estimates, pairs
    base = reference_run(live)
    for run in live:
        if run is base:
            continue
        for key in METRICS:
            xs, ys = getattr(base.timings, key), getattr(run.timings, key)
            if not ys or len(xs) != len(ys):
                continue
            by_epoch: dict[int, tuple[list[float], list[float]]] = {}
            for e, x, y in zip(run.epoch, xs, ys):
                by_epoch.setdefault(e, ([], []))[0].append(x)
                by_epoch[e][1].append(y)
            logs = [x for x in (paired.log_ratios(b, a) for b, a in by_epoch.values()) if x.size]
            estimates[(run.prepared.spec.run_id, key)] = [paired.cluster_estimate(x) for x in logs]
            pairs[(run.prepared.spec.run_id, key)] = sum(x.size for x in logs)
    return estimates, pairs


def stop_reason(runs: list[BlockRun], blocks: int, elapsed_s: float, spec: RunSpec,
                job: SequentialJob[tuple[str, str]] | None = None, next_epoch_s: float = 0.0) -> str | None:
    """Why to stop after an epoch that ended with `blocks` blocks, None to go on (see the module docstring)."""
    if blocks < spec.iterations:
        return None
    live = [r for r in runs if r.error is None]
    budget = spec.max_time_s * max(len(live), 1) if spec.max_time_s is not None else None
    if spec.target_rel_ci is not None and len(live) >= 2 and job is not None:
        estimates, pairs = epoch_estimates(runs)
        judged = job.after_epoch(elapsed_s, next_epoch_s, estimates, pairs)
        if judged is not None and judged.settled:
            return CONVERGED_PAIRED
    if blocks >= (spec.max_iterations or spec.iterations):
        return MAX_ITERATIONS
    if budget is not None and elapsed_s + next_epoch_s > budget:
        return MAX_TIME
    return None


def measure_block_group(specs: list[RunSpec], run_dirs: list[Path]) -> list[RunResult]:
    """Prepare every run, time them in interleaved blocks, then finish each (expert load, profile)."""
    allow_a_graph_per_unit(len(specs))
    prepared: list[BlockRun] = []
    failed: dict[str, RunResult] = {}
    for spec, run_dir in zip(specs, run_dirs):
        try:
            prepared.append(BlockRun(prepare_run(spec, run_dir), Timings.empty(), []))
        except Exception as err:  # noqa: BLE001 - this run fails, the group goes on
            failed[spec.run_id] = _error_result(spec, err, failure_kinds.STARTUP)
    process = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if prepared:
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


def _time_blocks(runs: list[BlockRun], process: str) -> None:
    first = runs[0].prepared
    spec = first.spec
    by_key = {r.prepared.spec.run_id: r for r in runs}

    def failed(unit: TimedUnit, err: BaseException, stage: str) -> None:
        by_key[unit.key].fail(err, failure_kinds.STARTUP if stage == "startup" else failure_kinds.BENCHMARK)

    units = [TimedUnit(r.prepared.spec.run_id, r.prepared.iterate,
                       r.prepared.model if relocatable(r.prepared.spec.device,
                                                       "graph_mode" in r.prepared.result.plan.effective_on())
                       else None)
             for r in runs]
    # one group: a block is one iteration of every run of the group, in a fresh random order
    engine: EpochEngine[TimedUnit] = EpochEngine(
        [units], seed=_group_seed(spec), probe=HostProbe(spec.seed) if first.model.device.type == "cpu" else None,
        on_error=failed)
    # a later run's warm-up may reset dynamo (`compile_warm_s`): the graphs it dropped compile here, untimed
    engine.warm()
    watch = HostWatch.start()
    start = time.perf_counter()
    budget = spec.max_time_s * len(runs) if spec.max_time_s is not None else None
    # each toggle's verdict in the end table answers its own question (what does this optimization buy?) at the
    # nominal level, so the group stops when each is decided at that level: a family of one
    job: SequentialJob[tuple[str, str]] | None = (
        SequentialJob(DecisionRule(), budget, tests=1) if budget is not None else None)
    probe_ms: list[float] = []
    blocks = 0
    reason = None
    while reason is None:
        rounds = min(EPOCH_BLOCKS, (spec.max_iterations or spec.iterations) - blocks)
        epoch = len(engine.epochs)
        for sample in engine.epoch(rounds):
            run = by_key[sample.unit]
            if sample.first_in_group and sample.probe_ms is not None:
                probe_ms.append(sample.probe_ms)
            run.timings.add(sample.iteration)
            run.block_index.append(blocks + sample.round)
            run.epoch.append(epoch)
            run.position.append(sample.place)
        blocks += rounds
        epoch_s = [e.seconds for e in engine.epochs]
        reason = stop_reason(runs, blocks, time.perf_counter() - start, spec, job, max(epoch_s[-3:]))
        if not any(r.error is None for r in runs):
            reason = "every run failed"
    synchronize(first.caps.device)
    host = watch.summary(first.caps.device)
    timing_s = round(time.perf_counter() - start, 3)
    for run in runs:
        if run.error is not None:
            continue
        run.prepared.result.stages.timing_s = timing_s  # the group's timing, shared by its runs
        # every run sees the block's probe reading: the host speed while the whole block was timed
        run.timings.probe_ms = [probe_ms[i] for i in run.block_index] if probe_ms else []
        record_timings(run.prepared, run.timings, reason, host)
        run.prepared.result.blocks = BlockPlacement(group=spec.block_group, process=process, index=run.block_index,
                                                    epoch=run.epoch, position=run.position, runs=len(runs),
                                                    blocks=blocks, epoch_seeds=[e.seed for e in engine.epochs])


def _group_seed(spec: RunSpec) -> int:
    """The block group's seed: the scenario's seed, round and group, as a stable integer (no salted hash)."""
    return zlib.crc32(f"{spec.seed}-{spec.round}-{spec.block_group}".encode())
