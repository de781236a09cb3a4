"""Strict nesting of complete (`X`) slices on a chrome-trace track, the shape Perfetto and chrome://tracing
draw correctly.

A slice that starts inside another on its track and ends after it (a partial overlap) cannot be drawn as a
child; viewers then mis-nest it and everything after it. Such a slice is moved, unchanged, to an extra lane of
its track (a sibling track), so no duration is altered and per-op totals stay what the profiler measured.

Both assignments are first fit (the lowest lane that takes the slice), found in O(log lanes) per slice by a
`FirstFit` tree over the lanes rather than by trying lane after lane: a track of n slices that all cross each
other needs n lanes, and trying each would cost n^2 / 2 steps (minutes at 100k slices).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence


class FirstFit:
    """A max tree over `size` lanes, each holding a number (initially +inf: an unused lane takes anything):
    `first_at_least(x)` is the lowest lane whose number is >= x, in O(log size). `steps` counts the tree nodes
    visited, so that a test can hold the work to n log n without timing anything."""

    def __init__(self, size: int) -> None:
        self.leaves = 1
        while self.leaves < max(size, 1):
            self.leaves *= 2
        self.tree = [math.inf] * (2 * self.leaves)
        self.steps = 0

    def set(self, lane: int, value: float) -> None:
        node = lane + self.leaves
        tree = self.tree
        tree[node] = value
        node //= 2
        while node:
            self.steps += 1
            best = max(tree[2 * node], tree[2 * node + 1])
            if tree[node] == best:  # the ancestors already hold it
                return
            tree[node] = best
            node //= 2

    def first_at_least(self, x: float) -> int:
        tree = self.tree
        node = 1  # the root holds +inf while a lane is unused; there are as many lanes as slices
        while node < self.leaves:
            self.steps += 1
            node = 2 * node if tree[2 * node] >= x else 2 * node + 1
        return node - self.leaves


def nesting_lanes(starts_ns: Sequence[int], ends_ns: Sequence[int]) -> list[int]:
    """The lane of each slice (0: its own track; 1, 2, ...: extra lanes) such that every lane's slices nest
    strictly: any two are disjoint or one holds the other (equal bounds count as held). Slices are taken
    by start, the longer first, so a parent precedes its children; each goes to the lowest lane where it
    crosses no slice already there.

    A lane takes slice [start, end) unless an open slice there ends strictly inside it. Each lane keeps the
    ends of its open slices as a stack (innermost on top, so the ends only grow downwards); its tree number is
    the top's end, the first end still to come. Tops that `start` has passed are popped in end order from a
    heap (each end is pushed and popped once), so every slice costs O(log n)."""
    order = sorted(range(len(starts_ns)), key=lambda i: (starts_ns[i], -ends_ns[i]))
    tops = FirstFit(len(order))
    stacks: list[list[int]] = []  # per lane used so far, the ends of its open slices
    closing: list[tuple[int, int]] = []  # (a lane's top end, lane); stale once the lane's top changed
    lanes = [0] * len(order)
    for i in order:
        start, end = starts_ns[i], ends_ns[i]
        while closing and closing[0][0] <= start:
            top, lane = heapq.heappop(closing)
            stack = stacks[lane]
            if not stack or stack[-1] != top:
                continue  # stale: a slice was pushed on that lane after this entry
            while stack and stack[-1] <= start:
                stack.pop()
            tops.set(lane, stack[-1] if stack else math.inf)
            if stack:
                heapq.heappush(closing, (stack[-1], lane))
        lane = tops.first_at_least(end)
        if lane == len(stacks):
            stacks.append([])
        stacks[lane].append(end)
        tops.set(lane, end)
        heapq.heappush(closing, (end, lane))
        lanes[i] = lane
    return lanes


def disjoint_lanes(starts_ns: Sequence[int], ends_ns: Sequence[int]) -> list[int]:
    """The lane of each slice such that no two slices of a lane overlap at all (touching is allowed): for
    slices that are not a call tree (an op's self time placed at its start), where nesting would make a
    reader subtract one op's time from another's. Each slice, by start, goes to the lowest lane whose last
    slice has ended (the tree holds minus each lane's last end)."""
    order = sorted(range(len(starts_ns)), key=lambda i: (starts_ns[i], ends_ns[i]))
    free_from = FirstFit(len(order))
    lanes = [0] * len(order)
    for i in order:
        lane = free_from.first_at_least(-starts_ns[i])
        free_from.set(lane, -ends_ns[i])
        lanes[i] = lane
    return lanes
