"""The one epoch loop: units timed in interleaved rounds, in seeded random order, between re-allocations.

Every paired measurement in perfbench goes through here: the sweep's block groups (perfbench/measure/blocks.py:
one group of every run of the block group) and `perfbench ab`'s one-process worker (perfbench/measure/ab_worker.py:
one group per run, holding its two arms). The two-process fallback of `ab` drives its workers from the parent
in the same order (`round_order`).

An epoch:
1. not before the first: every relocatable unit's weights move to new storage behind random spacers
   (perfbench/measure/epochs.py), with a relocation seed drawn from the epoch's own seed;
2. one untimed iteration of every unit (the first iteration after a re-allocation runs cold);
3. `rounds` rounds: the groups in a fresh random order, each group's units in a fresh random order, one timed
   iteration each, the host probe read before each group. Garbage collection runs before and is off during the
   rounds, so a collection lands in no timed iteration.

The epoch's seed is recorded (`EpochRecord.seed`), and every order and spacer follows from it and the job's
seed, so a job can be replayed. A unit that raises is reported to `on_error` and leaves the loop; `on_error`
may re-raise to end the job.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:  # the parent of a two-process `ab` imports `round_order` from here, without torch
    import torch

    from perfbench.measure.epochs import Relocator
    from perfbench.measure.iteration import Iteration

Item = TypeVar("Item")


@dataclass
class TimedUnit:
    """One thing timed: a run (blocks) or one arm of a run (ab). `model`: its weights move every epoch (None: it
    keeps its layout, e.g. a captured accelerator graph); `active`: entered around each of its iterations (ab
    swaps the arm's modules in)."""

    key: str
    iterate: Callable[[], Iteration]
    model: torch.nn.Module | None = None
    active: Callable[[], AbstractContextManager[object]] = nullcontext
    failed: bool = False


@dataclass(frozen=True)
class Sample:
    """One timed iteration: its epoch, round, group, the unit, its place in the round, and the probe reading."""

    epoch: int
    round: int
    group: int
    unit: str
    place: int
    iteration: Iteration
    probe_ms: float | None
    first_in_group: bool


@dataclass(frozen=True)
class EpochRecord:
    """What an epoch did, for the job's record: its seed (a replay draws the same orders and spacers)."""

    index: int
    seed: int
    seconds: float
    rounds: int
    relocated_mb: float
    recompiles: int


def round_order(rng: random.Random, groups: Sequence[Sequence[Item]]) -> list[tuple[int, Item]]:
    """One round's order: the groups shuffled, each group's items shuffled, as (group index, item)."""
    out: list[tuple[int, Item]] = []
    for g in rng.sample(range(len(groups)), len(groups)):
        items = list(groups[g])
        out.extend((g, item) for item in rng.sample(items, len(items)))
    return out


def graphs_compiled() -> int:
    """Graphs dynamo compiled so far in this process (a rise inside an epoch: a recompile while timed)."""
    from torch._dynamo.utils import counters

    return int(sum(counters["stats"].values())) if "stats" in counters else 0


def allow_a_graph_per_unit(units: int) -> None:
    """Every graph-mode model compiles the same decode function for its own `self`: dynamo counts each as a
    recompile of that function, and past its limit it would run the step eagerly without notice."""
    import torch._dynamo

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, 8 * units)


@dataclass
class EpochEngine(Generic[Item]):
    """The epochs of one job over `groups` of units. `seed`: the job's seed; `probe`: the host probe (CPU), or
    None; `on_error(unit, error, stage)`: a unit failed ("startup" in the untimed iteration, "benchmark" timed)."""

    groups: list[list[TimedUnit]]
    seed: int
    probe: Callable[[], float] | None = None
    on_error: Callable[[TimedUnit, BaseException, str], None] | None = None
    epochs: list[EpochRecord] = field(default_factory=list)
    relocators: dict[str, Relocator] = field(default_factory=dict)
    cold: bool = True  # no untimed iteration since the start or the last re-allocation

    def __post_init__(self) -> None:
        from perfbench.measure.epochs import Relocator

        rng = random.Random(self.seed)
        for group in self.groups:
            for unit in group:
                if unit.model is not None:
                    self.relocators[unit.key] = Relocator(unit.model, rng.randrange(2**31))

    def live(self) -> list[TimedUnit]:
        return [u for group in self.groups for u in group if not u.failed]

    def _fail(self, unit: TimedUnit, err: BaseException, stage: str) -> None:
        unit.failed = True
        if self.on_error is None:
            raise err
        self.on_error(unit, err, stage)

    def warm(self) -> None:
        """One untimed iteration of every live unit."""
        self.cold = False
        for unit in self.live():
            try:
                with unit.active():
                    unit.iterate()
            except Exception as err:  # noqa: BLE001 - the unit is out; on_error decides whether the job goes on
                self._fail(unit, err, "startup")

    def epoch(self, rounds: int, seed: int | None = None) -> Iterator[Sample]:
        """Run the next epoch, yielding each timed sample as it is taken; its record is appended at the end."""
        index = len(self.epochs)
        seed = random.Random(f"{self.seed}-{index}").randrange(2**31) if seed is None else seed
        rng = random.Random(seed)
        began = time.perf_counter()
        moved = 0
        if index > 0:
            for key, relocator in self.relocators.items():
                if not self._unit(key).failed:
                    moved += relocator.relocate()
                    self.cold = True
        if self.cold:
            self.warm()
        compiled = graphs_compiled()
        gc.collect()
        gc.disable()
        try:
            for r in range(rounds):
                groups = [[u for u in group if not u.failed] for group in self.groups]
                probe_ms = None
                last_group = -1
                for place, (g, unit) in enumerate(round_order(rng, groups)):
                    first = g != last_group
                    if first and self.probe is not None:
                        probe_ms = self.probe()
                    last_group = g
                    try:
                        with unit.active():
                            it = unit.iterate()
                    except Exception as err:  # noqa: BLE001 - see on_error
                        gc.enable()
                        self._fail(unit, err, "benchmark")
                        gc.disable()
                        continue
                    yield Sample(index, r, g, unit.key, place, it, probe_ms, first)
        finally:
            gc.enable()
        self.epochs.append(EpochRecord(index, seed, time.perf_counter() - began, rounds,
                                       round(moved / 2**20, 1), graphs_compiled() - compiled))

    def _unit(self, key: str) -> TimedUnit:
        return next(u for group in self.groups for u in group if u.key == key)
