"""Strict nesting of complete (`X`) slices on a chrome-trace track, the shape Perfetto and chrome://tracing
draw correctly.

A slice that starts inside another on its track and ends after it (a partial overlap) cannot be drawn as a
child; viewers then mis-nest it and everything after it. Such a slice is moved, unchanged, to an extra lane of
its track (a sibling track), so no duration is altered and per-op totals stay what the profiler measured.
"""

from __future__ import annotations

from collections.abc import Sequence


def nesting_lanes(starts_ns: Sequence[int], ends_ns: Sequence[int]) -> list[int]:
    """The lane of each slice (0: its own track; 1, 2, ...: extra lanes) such that every lane's slices nest
    strictly: any two are disjoint or one holds the other (equal bounds count as held). Slices are taken
    by start, the longer first, so a parent precedes its children."""
    order = sorted(range(len(starts_ns)), key=lambda i: (starts_ns[i], -ends_ns[i]))
    stacks: list[list[int]] = []  # per lane, the ends of the open slices
    lanes = [0] * len(starts_ns)
    for i in order:
        start, end = starts_ns[i], ends_ns[i]
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                lanes[i] = lane
                break
        else:
            stacks.append([end])
            lanes[i] = len(stacks) - 1
    return lanes


def disjoint_lanes(starts_ns: Sequence[int], ends_ns: Sequence[int]) -> list[int]:
    """The lane of each slice such that no two slices of a lane overlap at all (touching is allowed): for
    slices that are not a call tree (an op's self time placed at its start), where nesting would make a
    reader subtract one op's time from another's."""
    order = sorted(range(len(starts_ns)), key=lambda i: (starts_ns[i], ends_ns[i]))
    lane_ends: list[int] = []
    lanes = [0] * len(starts_ns)
    for i in order:
        for lane, last in enumerate(lane_ends):
            if last <= starts_ns[i]:
                lane_ends[lane] = ends_ns[i]
                lanes[i] = lane
                break
        else:
            lane_ends.append(ends_ns[i])
            lanes[i] = len(lane_ends) - 1
    return lanes
