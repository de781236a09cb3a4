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
import random
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from model.backend import synchronize
from perfbench.analysis import paired
from perfbench.measure import failure_kinds
from perfbench.measure.epochs import Relocator, relocatable
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
LOOKS = 3


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


def _decided(base: BlockRun, run: BlockRun, level: float) -> bool:
    """Is the run's paired ratio against the reference decided (same, slower or faster) at `level` on both
    latencies, by the verdict's own rule with epochs as clusters?"""
    for key in ("ttft_ms", "tpot_ms"):
        xs, ys = getattr(base.timings, key), getattr(run.timings, key)
        if not ys:
            continue
        epochs: dict[int, tuple[list[float], list[float]]] = {}
        for e, x, y in zip(run.epoch, xs, ys):
            epochs.setdefault(e, ([], []))[0].append(x)
            epochs[e][1].append(y)
        ratio = paired.paired_ratio(epochs, level=level)
        if ratio is None or ratio.verdict == paired.INCONCLUSIVE:
            return False
    return True


def stop_reason(runs: list[BlockRun], blocks: int, elapsed_s: float, spec: RunSpec,
                looks: paired.LookPlan | None = None, next_epoch_s: float = 0.0) -> str | None:
    """Why to stop after an epoch that ended with `blocks` blocks, None to go on (see the module docstring)."""
    if blocks < spec.iterations:
        return None
    live = [r for r in runs if r.error is None]
    budget = spec.max_time_s * max(len(live), 1) if spec.max_time_s is not None else None
    if spec.target_rel_ci is not None and len(live) >= 2 and looks is not None:
        look, final = looks.due(elapsed_s, next_epoch_s)
        if look:
            looks.done += 1
            level = paired.look_level(final)
            base = min(live, key=lambda r: len(r.prepared.spec.requested_on()))
            if all(_decided(base, r, level) for r in live if r is not base):
                return CONVERGED_PAIRED
    if blocks >= (spec.max_iterations or spec.iterations):
        return MAX_ITERATIONS
    if budget is not None and elapsed_s + next_epoch_s > budget:
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
    import torch._dynamo

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, 8 * runs)


def _warm_block(runs: list[BlockRun]) -> None:
    """One untimed iteration of every run after all are built: a later run's warm-up may reset dynamo
    (`compile_warm_s`), and the graphs it dropped compile again here, not in a timed block."""
    for run in runs:
        if run.error is not None:
            continue
        try:
            run.prepared.iterate()
        except Exception as err:  # noqa: BLE001 - the run is out of the group
            run.fail(err, failure_kinds.STARTUP)  # a graph a later run's warm-up dropped compiles here


def _time_blocks(runs: list[BlockRun], process: str) -> None:
    first = runs[0].prepared
    spec = first.spec
    rng = random.Random(f"{spec.seed}-{spec.round}-{spec.block_group}")
    probe = HostProbe(spec.seed) if first.model.device.type == "cpu" else None
    relocators = [Relocator(r.prepared.model, rng.randrange(2**31)) for r in runs
                  if relocatable(r.prepared.spec.device, "graph_mode" in r.prepared.result.plan.effective_on())]
    probe_ms: list[float] = []
    watch = HostWatch.start()
    start = time.perf_counter()
    budget = spec.max_time_s * len(runs) if spec.max_time_s is not None else None
    looks = paired.LookPlan(budget, LOOKS) if budget is not None else None
    blocks = epoch = 0
    reason = None
    epoch_s: list[float] = []
    while reason is None:
        began = time.perf_counter()
        if epoch > 0:
            for relocator in relocators:
                relocator.relocate()
            _warm_block(runs)  # untimed: the first iteration after a re-allocation runs cold
        for _ in range(min(EPOCH_BLOCKS, (spec.max_iterations or spec.iterations) - blocks)):
            if probe is not None:
                probe_ms.append(probe())
            order = [r for r in runs if r.error is None]
            rng.shuffle(order)
            for place, run in enumerate(order):
                try:
                    run.timings.add(run.prepared.iterate())
                    run.block_index.append(blocks)
                    run.epoch.append(epoch)
                    run.position.append(place)
                except Exception as err:  # noqa: BLE001 - the run is out of the group from here on
                    run.fail(err, failure_kinds.BENCHMARK)
            blocks += 1
        epoch += 1
        epoch_s.append(time.perf_counter() - began)
        reason = stop_reason(runs, blocks, time.perf_counter() - start, spec, looks, max(epoch_s[-3:]))
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
        run.prepared.result.blocks = BlockPlacement(group=spec.block_group, process=process, index=run.block_index,
                                                    epoch=run.epoch, position=run.position, runs=len(runs),
                                                    blocks=blocks)
