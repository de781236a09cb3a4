"""Where a toggle's speed-up crosses a threshold (1: break-even) along one shape axis, by adaptive search.

Pure: `find_crossing(measure, lo, hi, threshold)` calls `measure(x) -> SpeedupPoint` (a speed-up with its CI
at an integer shape value x) only at the points it chooses, so it is tested on synthetic curves without any
timing. The shape axes are searched in log space (a speed-up changes with the order of magnitude of a
length or batch, not with its last digit).

The search: measure both ends and the geometric middle; then, while the budget lasts, bisect (in log x) the
widest unmeasured gap inside the current CI bracket below, which moves its significant ends inwards. (Placing
points at the interpolated crossing instead lands them where the CI cannot exclude the threshold, and the
bracket does not shrink: on the synthetic curves of the tests its median width was 8x against 2x.)

The crossing's CI is a bracket of significant points: its low end the largest measured x below the crossing
whose CI lies wholly on the low-x side of the threshold, its high end the smallest measured x above it whose
CI lies wholly on the other side. A monotone speed-up crosses between such points unless one of their CIs
misses the truth on the side of the threshold, which happens with probability at most (1 - level) / 2 per end.
The point estimate is the interpolated crossing of the point estimates.

A crossing is reported only when both ends are significant. With one end only (the speed-up clearly above the
threshold somewhere, never clearly below it), the estimates may change sides by noise: a phase the toggle does
not touch, measured at 6 points with 95% CIs, has a CI that excludes the threshold somewhere about 1 time in 4
(1 - 0.95^6), and a one-sided rule called that a crossing (chunk_gdr's TPOT, docs/measurements_log.md). Both sides
by chance needs one CI above and one below: about 1 in 50. The search keeps bisecting such a one-sided
bracket (its open end is the range's end), so that a real crossing gets its second end.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

DEFAULT_POINTS = 8  # measurements per search: the three starting points and five placed ones
ABOVE, BELOW, UNDECIDED = "above", "below", "undecided"


class SpeedupPoint(BaseModel):
    """A measured speed-up (baseline time / time with the toggle; > 1 faster) at shape value x, with its CI."""

    model_config = ConfigDict(extra="forbid")

    x: int
    value: float
    low: float
    high: float

    def side(self, threshold: float) -> str:
        if self.low > threshold:
            return ABOVE
        if self.high < threshold:
            return BELOW
        return UNDECIDED


class Crossing(BaseModel):
    """Where the speed-up meets `threshold`: `estimate` with the CI [`low`, `high`] (open ends at the search
    range's limits), or found False ("no crossing in range")."""

    model_config = ConfigDict(extra="forbid")

    threshold: float
    found: bool
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # (a candidate, found False) no significant point below it: the range's start
    high_open: bool = False
    direction: str = ""  # "falls" (faster at small x) or "rises"
    text: str = ""


def _log(x: float) -> float:
    return math.log(max(x, 1e-12))


def _interpolate(a: SpeedupPoint, b: SpeedupPoint, threshold: float) -> float:
    """x (in log space) where the line through a and b's point estimates meets the threshold."""
    if b.value == a.value:
        return math.exp((_log(a.x) + _log(b.x)) / 2)
    t = (threshold - a.value) / (b.value - a.value)
    return math.exp(_log(a.x) + t * (_log(b.x) - _log(a.x)))


def crossing_from_points(points: list[SpeedupPoint], threshold: float, lo: int, hi: int) -> Crossing:
    """The crossing the measured `points` show (see the module docstring); found False when every point's
    estimate lies on one side of the threshold."""
    pts = sorted(points, key=lambda p: p.x)
    if not pts:
        return Crossing(threshold=threshold, found=False, text="no points measured")
    signs = [p.value >= threshold for p in pts]
    changes = [i for i in range(len(pts) - 1) if signs[i] != signs[i + 1]]
    if not changes:
        side = "above" if signs[0] else "below"
        return Crossing(threshold=threshold, found=False,
                        text=f"no crossing in range {lo}-{hi}: the speed-up stays {side} {threshold:g} "
                             f"at all {len(pts)} points")
    if all(p.side(threshold) == UNDECIDED for p in pts):
        # the estimates change sides, but every CI holds the threshold: noise around it (a toggle that does not
        # touch this phase), not a crossing
        return Crossing(threshold=threshold, found=False,
                        text=f"no crossing shown in range {lo}-{hi}: every point's CI holds {threshold:g} "
                             f"({len(pts)} points)")
    # with noise the estimates may cross more than once near the crossing: the direction is the ends' (first
    # against last point), and of the changes that way the one whose bracket is narrowest in log x
    overall_falls = pts[0].value > pts[-1].value
    changes = [k for k in changes if signs[k] == overall_falls] or changes
    i = min(changes, key=lambda k: _log(pts[k + 1].x) - _log(pts[k].x))
    estimate = _interpolate(pts[i], pts[i + 1], threshold)
    falls = signs[i]  # above the threshold at low x
    first, second = (ABOVE, BELOW) if falls else (BELOW, ABOVE)
    below = [p for p in pts[:i + 1] if p.side(threshold) == first]
    above = [p for p in pts[i + 1:] if p.side(threshold) == second]
    low, low_open = (float(below[-1].x), False) if below else (float(lo), True)
    high, high_open = (float(above[0].x), False) if above else (float(hi), True)
    direction = "falls" if falls else "rises"
    if low_open or high_open:
        # one side only is established: a candidate that bounds the next point, not a crossing
        shown = below or above
        side, other = ((first, second) if below else (second, first))
        where = ", ".join(f"{p.x}" for p in shown)
        return Crossing(threshold=threshold, found=False, low=low, high=high, low_open=low_open,
                        high_open=high_open, direction=direction,
                        text=f"no crossing shown in range {lo}-{hi}: the speed-up is significantly {side} "
                             f"{threshold:g} at {where}, never significantly {other} it ({len(pts)} points)")
    return Crossing(threshold=threshold, found=True, estimate=estimate, low=low, high=high, low_open=low_open,
                    high_open=high_open, direction=direction,
                    text=f"speed-up {direction} through {threshold:g} at {estimate:.0f}, CI [{low:g}, {high:g}]")


def next_point(points: list[SpeedupPoint], threshold: float, lo: int, hi: int) -> int | None:
    """Where to measure next: the middle (log x) of the widest unmeasured gap inside the crossing's bracket of
    significant points (the whole range while nothing crosses); None when every integer there is measured."""
    crossing = crossing_from_points(points, threshold, lo, hi)
    taken = {p.x for p in points}
    if crossing.low is None or crossing.high is None:
        # no candidate yet: split the widest gap (a crossing between two points of one side is possible)
        left, right = lo, hi
    else:  # a crossing or a one-sided candidate (an open end is the range's end)
        left, right = int(crossing.low), int(crossing.high)
    inside = sorted(x for x in taken | {left, right} if left <= x <= right)
    gaps = [(_log(b) - _log(a), a, b) for a, b in zip(inside, inside[1:]) if b - a > 1]
    if not gaps:
        return None
    _, a, b = max(gaps)
    middle = round(math.exp((_log(a) + _log(b)) / 2))
    return min(max(middle, a + 1), b - 1)


def start_points(lo: int, hi: int) -> list[int]:
    """Both ends and the geometric middle: where every search starts."""
    return list(dict.fromkeys((lo, hi, round(math.exp((_log(lo) + _log(hi)) / 2)))))


def find_crossing(measure: Callable[[int], SpeedupPoint], lo: int, hi: int, threshold: float = 1.0,
                  max_points: int = DEFAULT_POINTS, points: list[SpeedupPoint] | None = None
                  ) -> tuple[Crossing, list[SpeedupPoint]]:
    """Search [lo, hi] for where measure(x).value crosses `threshold`; returns the crossing and every point
    measured (`points`: ones measured before, reused and not counted against `max_points`)."""
    if not 1 <= lo < hi:
        raise ValueError(f"the range must be 1 <= lo < hi, got {lo}:{hi}")
    known = {p.x: p for p in points or []}
    measured = 0

    def take(x: int) -> None:
        nonlocal measured
        if x not in known:
            known[x] = measure(x)
            measured += 1

    for x in start_points(lo, hi):
        take(x)
    while measured < max_points:
        point = next_point(list(known.values()), threshold, lo, hi)
        if point is None:
            break
        take(point)
    found = list(known.values())
    return crossing_from_points(found, threshold, lo, hi), sorted(found, key=lambda p: p.x)
