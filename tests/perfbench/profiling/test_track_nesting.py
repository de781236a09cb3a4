"""The overlap repair (track_nesting.py) against a brute-force reference written from the definition, and a guard
on its work that counts comparisons, not seconds: a repair that tries lane after lane is quadratic when every
slice crosses every other (issue 45: minutes at 100k slices)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from functools import total_ordering

import pytest

from perfbench.profiling.track_nesting import disjoint_lanes, nesting_lanes


def nest(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Disjoint (touching allowed), or one inside the other (equal bounds count as inside)."""
    (s1, e1), (s2, e2) = a, b
    return e1 <= s2 or e2 <= s1 or (s1 <= s2 and e2 <= e1) or (s2 <= s1 and e1 <= e2)


def apart(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[1] <= b[0] or b[1] <= a[0]


def brute_force(starts: Sequence[int], ends: Sequence[int], fits: Callable[[tuple[int, int], tuple[int, int]], bool],
                order_key: Callable[[int], tuple[int, int]]) -> list[int]:
    """First fit from the definition: in `order_key` order, each slice takes the lowest lane in which it `fits`
    with every slice already there (all pairs compared: O(n^2), only for small n)."""
    members: list[list[tuple[int, int]]] = []
    lanes = [0] * len(starts)
    for i in sorted(range(len(starts)), key=order_key):
        here = (starts[i], ends[i])
        lane = next((k for k, held in enumerate(members) if all(fits(here, other) for other in held)), len(members))
        if lane == len(members):
            members.append([])
        members[lane].append(here)
        lanes[i] = lane
    return lanes


def nesting_reference(starts: Sequence[int], ends: Sequence[int]) -> list[int]:
    return brute_force(starts, ends, nest, lambda i: (starts[i], -ends[i]))


def disjoint_reference(starts: Sequence[int], ends: Sequence[int]) -> list[int]:
    return brute_force(starts, ends, apart, lambda i: (starts[i], ends[i]))


def crossing(n: int) -> tuple[list[int], list[int]]:
    """n slices, each starting inside the one before and ending after it: n lanes are needed."""
    return list(range(n)), [n + 2 * i for i in range(n)]


ADVERSARIAL = {
    "all-crossing": crossing(12),
    "staircase": ([3 * i for i in range(12)], [3 * i + 7 for i in range(12)]),
    "equal-bounds-and-zero-length": ([0, 0, 0, 5, 5, 5, 10, 10], [10, 10, 5, 5, 5, 12, 10, 10]),
    "nested-then-crossing": ([0, 1, 2, 3, 9, 9, 11, 15], [20, 19, 18, 17, 21, 10, 22, 16]),
    "lane-freed-then-reused": ([0, 2, 4, 6, 30, 31, 32, 33], [5, 7, 9, 11, 35, 36, 37, 38]),
    "reverse-order-input": ([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], [19, 17, 15, 13, 11, 9, 7, 5, 3, 1]),
}


@pytest.mark.parametrize("case", ADVERSARIAL, ids=list(ADVERSARIAL))
def test_lanes_match_the_brute_force_first_fit(case: str) -> None:
    starts, ends = ADVERSARIAL[case]
    assert nesting_lanes(starts, ends) == nesting_reference(starts, ends)
    assert disjoint_lanes(starts, ends) == disjoint_reference(starts, ends)


def test_lanes_match_the_brute_force_on_random_tracks() -> None:
    rng = random.Random(45)
    for _ in range(400):
        n = rng.randint(0, 25)
        starts = [rng.randint(0, 30) for _ in range(n)]
        ends = [s + rng.choice([0, 1, 2, 5, 9, 20]) for s in starts]
        assert nesting_lanes(starts, ends) == nesting_reference(starts, ends), (starts, ends)
        assert disjoint_lanes(starts, ends) == disjoint_reference(starts, ends), (starts, ends)


def test_every_lane_nests_and_a_crossing_track_needs_a_lane_per_slice() -> None:
    starts, ends = crossing(40)
    lanes = nesting_lanes(starts, ends)
    assert sorted(lanes) == list(range(40))
    for lane in set(lanes):  # the property itself, checked pair by pair
        held = [(s, e) for s, e, k in zip(starts, ends, lanes) if k == lane]
        assert all(nest(a, b) for a, b in itertools.combinations(held, 2))
    # a near miss: the same slices nested (each inside the one before) all stay on the track
    assert nesting_lanes(starts, [2 * 40 - i for i in range(40)]) == [0] * 40


@total_ordering
class Counted:
    """A time whose every comparison is counted (against another Counted, an int or +-inf)."""

    comparisons = 0

    def __init__(self, value: float) -> None:
        self.value = value

    @staticmethod
    def _of(other: object) -> float:
        return other.value if isinstance(other, Counted) else other  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        Counted.comparisons += 1
        return self.value == Counted._of(other)

    def __lt__(self, other: object) -> bool:
        Counted.comparisons += 1
        return self.value < Counted._of(other)

    def __neg__(self) -> Counted:
        return Counted(-self.value)

    def __hash__(self) -> int:
        return hash(self.value)


def comparisons(lanes: Callable[[Sequence[int], Sequence[int]], list[int]], n: int) -> int:
    starts, ends = crossing(n)
    Counted.comparisons = 0
    result = lanes([Counted(s) for s in starts], [Counted(e) for e in ends])  # type: ignore[list-item]
    assert len(set(result)) == n  # the worst case indeed: one lane per slice
    return Counted.comparisons


@pytest.mark.parametrize("lanes", [nesting_lanes, disjoint_lanes], ids=["nesting", "disjoint"])
def test_the_repair_compares_n_log_n_times_not_n_squared(lanes: Callable[[Sequence[int], Sequence[int]],
                                                                          list[int]]) -> None:
    # trying lane after lane compares about n^2 / 2 times here (2,000,000 at n = 2000); a tree over the lanes
    # about c * n * log2(n). Counts, not seconds: the same on any machine.
    small, large = comparisons(lanes, 500), comparisons(lanes, 2000)
    assert large <= 30 * 2000 * math.log2(2000), large
    assert large / small < 6, (small, large)  # 4x the slices: ~4.5x the work for n log n, 16x for n^2


def test_the_guard_catches_a_lane_by_lane_search() -> None:
    # the near miss the guard exists for: the first-fit loop this repair replaced, run on the same counted input
    def lane_by_lane(starts: Sequence[int], ends: Sequence[int]) -> list[int]:
        order = sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i]))
        stacks: list[list[int]] = []
        lanes = [0] * len(starts)
        for i in order:
            for lane, stack in enumerate(stacks):
                while stack and stack[-1] <= starts[i]:
                    stack.pop()
                if not stack or ends[i] <= stack[-1]:
                    stack.append(ends[i])
                    lanes[i] = lane
                    break
            else:
                stacks.append([ends[i]])
                lanes[i] = len(stacks) - 1
        return lanes

    assert comparisons(lane_by_lane, 500) > 30 * 500 * math.log2(500)
