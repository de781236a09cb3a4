"""The one epoch loop (perfbench/measure/epoch_engine.py): orders, seeds, garbage collection, failures,
relocation. Units are fakes that record when they ran; nothing is timed."""

from __future__ import annotations

import gc
import random
from collections.abc import Callable

import pytest
import torch

from perfbench.measure.epoch_engine import EpochEngine, TimedUnit, round_order
from perfbench.measure.iteration import Iteration


def _unit(key: str, log: list[str], fail_at: int | None = None,
          model: torch.nn.Module | None = None) -> TimedUnit:
    calls = {"n": 0}

    def iterate() -> Iteration:
        calls["n"] += 1
        log.append(key)
        if fail_at is not None and calls["n"] >= fail_at:
            raise RuntimeError(f"{key} broke")
        return Iteration(ttft_s=0.001, step_s=[0.0005, 0.0007], tokens=torch.zeros(1, 3), logits=None)

    return TimedUnit(key, iterate, model)


def _groups(log: list[str]) -> list[list[TimedUnit]]:
    return [[_unit(f"r{r}@{arm}", log) for arm in ("base", "head")] for r in range(3)]


def _timed_order(seed: int, epoch_seed: int) -> list[str]:
    log: list[str] = []
    engine: EpochEngine[TimedUnit] = EpochEngine(_groups(log), seed=seed)
    return [s.unit for s in engine.epoch(4, epoch_seed)]


def test_an_epoch_is_replayed_exactly_from_its_seed_and_another_seed_draws_another_order():
    assert _timed_order(0, 123) == _timed_order(0, 123)
    assert _timed_order(0, 123) != _timed_order(0, 124)


def test_every_round_times_every_unit_once_with_a_group_s_units_back_to_back():
    log: list[str] = []
    engine: EpochEngine[TimedUnit] = EpochEngine(_groups(log), seed=1)
    samples = list(engine.epoch(5, 7))
    for r in range(5):
        mine = [s for s in samples if s.round == r]
        assert sorted(s.unit for s in mine) == sorted(f"r{i}@{a}" for i in range(3) for a in ("base", "head"))
        for first, second in zip(mine[::2], mine[1::2]):  # a pair's two arms are adjacent
            assert first.group == second.group and first.first_in_group and not second.first_in_group
    # both arm orders occur (the arm order is drawn per pair, not fixed)
    firsts = {s.unit.split("@")[1] for s in samples if s.first_in_group}
    assert firsts == {"base", "head"}
    (record,) = engine.epochs
    assert record.seed == 7 and record.rounds == 5 and record.index == 0


def test_the_first_epoch_warms_every_unit_once_untimed():
    log: list[str] = []
    engine: EpochEngine[TimedUnit] = EpochEngine(_groups(log), seed=1)
    samples = list(engine.epoch(2, 3))
    assert len(log) == len(samples) + 6  # one untimed iteration of each of the 6 units


def test_garbage_collection_is_off_while_timed_and_back_on_after():
    states: list[bool] = []

    def iterate() -> Iteration:
        states.append(gc.isenabled())
        return Iteration(ttft_s=0.001, step_s=[], tokens=torch.zeros(1, 1), logits=None)

    engine: EpochEngine[TimedUnit] = EpochEngine([[TimedUnit("a", iterate), TimedUnit("b", iterate)]], seed=0)
    list(engine.epoch(3, 0))
    assert states[:2] == [True, True]  # the untimed warm iterations
    assert states[2:] == [False] * 6  # every timed one
    assert gc.isenabled()


def test_a_failing_unit_leaves_the_loop_and_the_others_go_on():
    log: list[str] = []
    broken = _unit("bad", log, fail_at=3)
    failures: list[tuple[str, str]] = []

    def on_error(unit: TimedUnit, err: BaseException, stage: str) -> None:
        failures.append((unit.key, stage))

    engine: EpochEngine[TimedUnit] = EpochEngine([[broken, _unit("good", log)]], seed=0, on_error=on_error)
    samples = list(engine.epoch(4, 0))
    assert failures == [("bad", "benchmark")]
    assert [s.unit for s in samples].count("good") == 4 and [s.unit for s in samples].count("bad") == 1
    assert gc.isenabled()


def test_without_a_handler_a_failure_ends_the_job_with_gc_back_on():
    log: list[str] = []
    engine: EpochEngine[TimedUnit] = EpochEngine([[_unit("bad", log, fail_at=2)]], seed=0)
    with pytest.raises(RuntimeError, match="bad broke"):
        list(engine.epoch(3, 0))
    assert gc.isenabled()


def test_weights_move_every_epoch_after_the_first_by_seeds_drawn_from_the_job_seed():
    def addresses(seed: int) -> list[list[int]]:
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 64)
        engine: EpochEngine[TimedUnit] = EpochEngine([[_unit("m", [], model=model)]], seed=seed)
        seen = []
        for e in range(3):
            list(engine.epoch(1, e))
            seen.append([model.weight.data_ptr(), model.bias.data_ptr()])
        assert engine.epochs[0].relocated_mb == 0  # the first epoch keeps the build's layout
        return seen

    ptrs = addresses(5)
    assert ptrs[0] != ptrs[1] != ptrs[2]  # new storage each epoch after the first


def test_the_relocation_spacers_follow_from_the_job_seed():
    def spacer_state(seed: int) -> object:
        engine: EpochEngine[TimedUnit] = EpochEngine([[_unit("m", [], model=torch.nn.Linear(4, 4))]], seed=seed)
        return engine.relocators["m"].rng.getstate()

    assert spacer_state(5) == spacer_state(5) and spacer_state(5) != spacer_state(6)


@pytest.mark.parametrize("groups", [[["a"]], [["a", "b"], ["c"]], [["a", "b", "c"], ["d", "e"], ["f"]]])
def test_round_order_visits_every_item_once_and_keeps_groups_together(groups: list[list[str]]):
    order = round_order(random.Random(4), groups)
    assert sorted(item for _, item in order) == sorted(i for g in groups for i in g)
    seen_groups: list[int] = []
    for g, _ in order:
        if not seen_groups or seen_groups[-1] != g:
            assert g not in seen_groups  # a group's items are contiguous
            seen_groups.append(g)


def test_an_engine_without_models_relocates_nothing():
    calls: list[Callable[[], Iteration]] = []
    engine: EpochEngine[TimedUnit] = EpochEngine([[_unit("x", [])]], seed=0)
    list(engine.epoch(1, 0))
    list(engine.epoch(1, 1))
    assert engine.relocators == {} and not calls
    assert [r.relocated_mb for r in engine.epochs] == [0.0, 0.0]
