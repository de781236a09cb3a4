"""The op epochs of `perfbench ab --ops`, in the one-process worker (perfbench/measure/ab_worker.py).

An op epoch profiles one iteration of every (run, arm) in the engine's seeded order (`epoch_engine.round_order`:
the runs shuffled, each run's two arms shuffled), GC off. Each unit first runs one unprofiled iteration, timed
by the wall clock, then the profiled one, timed the same way: their ratio is the profiler's overhead, measured in
the same process on the same weights. The profiled iteration runs with the model's phase / step ranges and, outside
graph mode, its layer / module ranges on (as `perfbench run`'s profiled iteration: perfbench/measure/profiled.py),
under `capture_trace` (perfbench/profiling/capture.py: the one place that picks torch.profiler's CPU (+ CUDA)
activities or torch_npu's profiler from the plan's device). The trace is parsed and grouped at once
(perfbench/profiling/op_groups.py); only the last epoch's trace of each unit stays on disk.

Protocol: {"op_epoch": {"index": k, "seed": s}} answers one {"op_pair": {"run_id", "epoch", "base_first",
"base": {"groups", "profiled_ms", "plain_ms"}, "head": {...}}} line per run, then {"op_epoch_done": {"seconds"}}.
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from perfbench.measure.epoch_engine import EpochEngine, TimedUnit, round_order
from perfbench.measure.requests import send_answer


@dataclass(frozen=True)
class ProfiledUnit:
    """What profiling a unit needs beyond the unit: its model (scopes, plan), and where its trace goes."""

    model: Any  # the arm's Qwen3_5MoeForCausalLM (each arm has its own class)
    device: str
    trace_dir: Path


def profiled_iteration(unit: TimedUnit, profiled: ProfiledUnit) -> dict[str, Any]:
    """One unprofiled then one profiled iteration of `unit`: µs per op group and both wall times (ms)."""
    from perfbench.profiling.capture import capture_trace
    from perfbench.profiling.loading import load_trace
    from perfbench.profiling.op_groups import group_times

    model = profiled.model
    with unit.active():
        began = time.perf_counter()
        unit.iterate()
        plain_ms = (time.perf_counter() - began) * 1e3
        with capture_trace(model.plan.device, profiled.trace_dir) as capture:
            with model.scopes.enable(layers=not model.plan.on("graph_mode")):
                began = time.perf_counter()
                unit.iterate()
                profiled_ms = (time.perf_counter() - began) * 1e3
    groups = group_times(load_trace(capture.paths[0]).events)
    return {"groups": {k: round(v, 3) for k, v in groups.items()}, "profiled_ms": round(profiled_ms, 3),
            "plain_ms": round(plain_ms, 3)}


def serve_op_epoch(engine: EpochEngine[TimedUnit], units: dict[str, ProfiledUnit], request: dict[str, Any],
                   reply: IO[str]) -> None:
    """Answer one {"op_epoch": ...} request (see the module docstring)."""
    began = time.perf_counter()
    rng = random.Random(request["seed"])
    groups = [[u for u in group if not u.failed] for group in engine.groups]
    half: dict[int, tuple[str, dict[str, Any]]] = {}
    gc.collect()
    gc.disable()
    try:
        for g, unit in round_order(rng, groups):
            rid, _, name = unit.key.rpartition("@")
            measured = profiled_iteration(unit, units[unit.key])
            other = half.pop(g, None)
            if other is None:
                half[g] = (name, measured)
                continue
            send_answer(reply, {"op_pair": {"run_id": rid, "epoch": request["index"], "base_first": other[0] == "base",
                                            name: measured, other[0]: other[1]}})
    finally:
        gc.enable()
    send_answer(reply, {"op_epoch_done": {"seconds": round(time.perf_counter() - began, 3)}})
