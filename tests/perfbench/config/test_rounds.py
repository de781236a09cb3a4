"""Interleaved rounds (ABBA order) and the timing mode of each round's runs (block groups)."""

from __future__ import annotations

from perfbench.config.rounds import assign_timing, interleave
from perfbench.config.sweep import PlannedRun
from perfbench.results import RunPlan, RunSpec


def test_rounds_come_in_abba_order_and_ids_carry_the_round():
    runs = [PlannedRun(RunSpec(run_id=name, scenario="s"), RunPlan(), name) for name in "abcdefgh"]
    planned = interleave(runs, rounds=4, seed=7)
    orders = [[p.spec.combination for p in planned if p.spec.round == k] for k in (1, 2, 3, 4)]
    assert all(sorted(o) == list("abcdefgh") for o in orders)  # every combination once per round
    assert orders[1] == orders[0][::-1] and orders[3] == orders[2][::-1]  # A B | B A
    assert orders[2] != orders[0]  # a fresh order every other round (8! orders: a repeat would be a bug)
    assert interleave(runs, rounds=4, seed=7) == planned  # seeded
    assert [p.spec.run_id for p in planned if p.spec.round == 2][0] == f"{orders[1][0]}-r2"
    assert {(p.spec.combination, p.spec.round, p.spec.rounds) for p in planned if p.spec.run_id == "c-r2"} == {
        ("c", 2, 4)}
    assert interleave(runs, rounds=1, seed=7) == runs  # one round: the plan as it was


def _planned(name: str, round_: int = 1, **spec: object) -> PlannedRun:
    return PlannedRun(RunSpec(run_id=f"{name}-r{round_}", scenario="s", round=round_, **spec), RunPlan(), name)


def test_runs_of_a_round_and_shape_are_timed_in_one_block_group():
    runs = [_planned(n, k) for k in (1, 2) for n in "abc"] + [_planned("d", 1, input_len=512)]
    timed, lines = assign_timing(runs, "blocks", weight_bytes=1e8, available_bytes=1e10)
    groups = {p.spec.run_id: (p.spec.timing, p.spec.block_group) for p in timed}
    assert groups["a-r1"] == groups["b-r1"] == groups["c-r1"] == ("blocks", "r1-b1-i128-o16")
    assert groups["a-r2"] == ("blocks", "r2-b1-i128-o16")
    assert groups["d-r1"] == ("separate", "")  # alone in its shape: nothing to pair with
    assert any("a single run: nothing to pair it with" in line for line in lines)
    assert [p.spec.run_id for p in timed] == [p.spec.run_id for p in runs]  # order kept


def test_runs_that_cannot_share_a_process_are_timed_separately_with_the_reason():
    cases = {
        "perfbench.sweep.timing is separate": (dict(), "separate", 1e8, "local"),
        "npu: device state": (dict(device="npu"), "blocks", 1e8, "local"),
        "world_size > 1": (dict(parallel={"world_size": 2}), "blocks", 1e8, "local"),
        "the ray executor runs every run as a task of its own": (dict(), "blocks", 1e8, "ray"),
        "3 models of 4.00 GB need 12.0 GB, more than 50% of the 10.0 GB available": (dict(), "blocks", 4e9, "local"),
    }
    for reason, (spec, mode, weights, executor) in cases.items():
        runs = [_planned(n, **spec) for n in "abc"]
        timed, lines = assign_timing(runs, mode, weights, 1e10, executor)
        assert {p.spec.timing for p in timed} == {"separate"}, reason
        assert len(lines) == 1 and reason in lines[0], (reason, lines)


def test_runs_with_their_own_environment_form_their_own_group():
    runs = [_planned("a"), _planned("b"), _planned("c", env={"X": "1"}), _planned("d", env={"X": "1"})]
    timed, _ = assign_timing(runs, "blocks", None, None)
    group = {p.spec.run_id: p.spec.block_group for p in timed}
    assert group["a-r1"] == group["b-r1"] != group["c-r1"] == group["d-r1"]
    assert group["c-r1"].startswith("r1-b1-i128-o16-env")


def test_only_the_first_round_profiles():
    runs = [PlannedRun(RunSpec(run_id=name, scenario="s", profile=True), RunPlan(), name) for name in "ab"]
    planned = interleave(runs, rounds=3, seed=0)
    assert {p.spec.run_id for p in planned if p.spec.profile} == {"a-r1", "b-r1"}
    unprofiled = [PlannedRun(RunSpec(run_id="a", scenario="s", profile=False), RunPlan(), "a")]
    assert not any(p.spec.profile for p in interleave(unprofiled, rounds=2, seed=0))
