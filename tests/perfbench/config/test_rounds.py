"""Interleaved rounds: every combination once per round, in a seeded random order per round."""

from __future__ import annotations

import random

from perfbench.config.rounds import interleave
from perfbench.config.sweep import PlannedRun
from perfbench.results import RunPlan, RunSpec


def test_rounds_are_shuffled_per_round_by_the_seed_and_ids_carry_the_round():
    runs = [PlannedRun(RunSpec(run_id=name, scenario="s"), RunPlan(), name) for name in "abcd"]
    planned = interleave(runs, rounds=3, seed=7)
    rng = random.Random(7)  # the same generator, drawn the same way: the expected orders
    expected = []
    for k in (1, 2, 3):
        order = list("abcd")
        rng.shuffle(order)
        expected += [f"{x}-r{k}" for x in order]
    assert [p.spec.run_id for p in planned] == expected
    assert {(p.spec.combination, p.spec.round, p.spec.rounds) for p in planned if p.spec.run_id == "c-r2"} == {
        ("c", 2, 3)}
    assert interleave(runs, rounds=1, seed=7) == runs  # one round: the plan as it was


def test_only_the_first_round_profiles():
    runs = [PlannedRun(RunSpec(run_id=name, scenario="s", profile=True), RunPlan(), name) for name in "ab"]
    planned = interleave(runs, rounds=3, seed=0)
    assert {p.spec.run_id for p in planned if p.spec.profile} == {"a-r1", "b-r1"}
    unprofiled = [PlannedRun(RunSpec(run_id="a", scenario="s", profile=False), RunPlan(), "a")]
    assert not any(p.spec.profile for p in interleave(unprofiled, rounds=2, seed=0))
