"""Interleaved rounds: every combination once per round, in a seeded random order per round.

A slow drift of the machine (thermal, a neighbour starting) then spreads over all combinations instead of
landing on whichever ran last, and each round is a separate process per combination: the unit that carries
process-to-process variation. With one round the plan is unchanged (run ids too).

Only the first round takes the profiled iteration: a combination's merged result reports that round's trace
(perfbench/analysis/rounds.py), so profiling the others would cost their time and show nowhere.
"""

from __future__ import annotations

import dataclasses
import random

from perfbench.config.sweep import PlannedRun


def interleave(runs: list[PlannedRun], rounds: int, seed: int) -> list[PlannedRun]:
    """`rounds` copies of `runs`, each shuffled by a generator seeded with `seed`; run ids get "-r<k>"."""
    if rounds <= 1:
        return list(runs)
    rng = random.Random(seed)
    out = []
    for k in range(1, rounds + 1):
        order = list(runs)
        rng.shuffle(order)
        for planned in order:
            spec = dataclasses.replace(planned.spec, run_id=f"{planned.spec.run_id}-r{k}", round=k, rounds=rounds,
                                       combination=planned.spec.run_id, profile=planned.spec.profile and k == 1)
            out.append(dataclasses.replace(planned, spec=spec))
    return out
