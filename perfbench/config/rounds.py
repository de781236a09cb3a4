"""Interleaved rounds, and how the runs of a round are timed.

Rounds: every combination once per round, in ABBA order: a seeded random order, then the same order reversed,
then a fresh order and its reverse, and so on. A slow drift of the machine (thermal, a neighbour starting)
then spreads over all combinations instead of landing on whichever ran last, and each round is a separate
process: the unit that carries process-to-process variation. With one round the plan is unchanged (run ids
too).

Timing (`assign_timing`): the runs of one round and shape that can share a process form a block group, timed
in interleaved blocks in one worker (perfbench/measure/blocks.py). The others are timed separately, each in its own
window, and the reason is recorded for the dry run.

Only the first round takes the profiled iteration: a combination's merged result reports that round's trace
(perfbench/analysis/rounds.py), so profiling the others would cost their time and show nowhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random

from perfbench.config.planned import PlannedRun


def interleave(runs: list[PlannedRun], rounds: int, seed: int) -> list[PlannedRun]:
    """`rounds` copies of `runs` in ABBA order (odd rounds shuffled by a generator seeded with `seed`, even
    rounds the previous order reversed); run ids get "-r<k>"."""
    if rounds <= 1:
        return list(runs)
    rng = random.Random(seed)
    out = []
    order: list[PlannedRun] = []
    for k in range(1, rounds + 1):
        if k % 2:
            order = list(runs)
            rng.shuffle(order)
        else:
            order = order[::-1]
        for planned in order:
            spec = planned.spec.replace(run_id=f"{planned.spec.run_id}-r{k}", round=k, rounds=rounds,
                                       combination=planned.spec.run_id, profile=planned.spec.profile and k == 1)
            out.append(dataclasses.replace(planned, spec=spec))
    return out


# The models of a block group live in one process at once: they must leave room for activations and caches.
MEMORY_SHARE = 0.5


def _separate_reason(planned: PlannedRun, mode: str, executor: str) -> str:
    spec = planned.spec
    if mode == "separate":
        return "perfbench.sweep.timing is separate"
    if executor != "local":
        return f"the {executor} executor runs every run as a task of its own"
    if spec.device != "cpu":
        return f"{spec.device}: device state, graph pools and communicators are per process"
    if spec.world_size > 1:
        return "world_size > 1: torchrun starts a process group per run"
    return ""


def _group_key(planned: PlannedRun) -> tuple[object, ...]:
    s = planned.spec
    return (s.round, s.batch_size, s.input_len, s.output_len, s.ragged, tuple(sorted(s.env.items())))


def assign_timing(runs: list[PlannedRun], mode: str, weight_bytes: float | None,
                  available_bytes: float | None, executor: str = "local") -> tuple[list[PlannedRun], list[str]]:
    """The runs with `spec.timing` and `spec.block_group` set, and one line per group saying how it is timed and
    why. `weight_bytes`: one model's weights (None: unknown, not checked); `available_bytes`: the memory free
    for the group's models."""
    groups: dict[tuple[object, ...], list[PlannedRun]] = {}
    for planned in runs:
        groups.setdefault(_group_key(planned), []).append(planned)
    timing: dict[str, tuple[str, str]] = {}
    lines = []
    for members in groups.values():
        first = members[0].spec
        where = f"round {first.round}, b{first.batch_size} i{first.input_len} o{first.output_len}" \
            + (" (own env)" if first.env else "")
        reason = _separate_reason(members[0], mode, executor)
        if not reason and len(members) < 2:
            reason = "a single run: nothing to pair it with"
        need = weight_bytes * len(members) if weight_bytes is not None else None
        if not reason and need is not None and weight_bytes is not None and available_bytes is not None \
                and need > MEMORY_SHARE * available_bytes:
            reason = (f"{len(members)} models of {weight_bytes / 1e9:.2f} GB need {need / 1e9:.1f} GB, more than "
                      f"{MEMORY_SHARE:.0%} of the {available_bytes / 1e9:.1f} GB available")
        if reason:
            lines.append(f"{where}: {len(members)} run{'s' * (len(members) != 1)} timed separately ({reason})")
            timing.update({p.spec.run_id: ("separate", "") for p in members})
            continue
        group = f"r{first.round}-b{first.batch_size}-i{first.input_len}-o{first.output_len}" \
            + (f"-env{hashlib.sha256(json.dumps(first.env, sort_keys=True).encode()).hexdigest()[:6]}"
               if first.env else "")
        lines.append(f"{where}: {len(members)} runs in interleaved blocks, one process (group {group})")
        timing.update({p.spec.run_id: ("blocks", group) for p in members})
    out = [dataclasses.replace(p, spec=p.spec.replace(timing=timing[p.spec.run_id][0],
                                                           block_group=timing[p.spec.run_id][1])) for p in runs]
    return out, lines
