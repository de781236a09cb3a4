"""What a chrome trace must satisfy for Perfetto and chrome://tracing to draw it as recorded.

- every timestamp a finite, non-negative JSON number (µs from the trace's start): epoch µs as text, or as
  floats beyond 2^53 ns, lose the ns digits and reorder kernels;
- on each track (pid, tid), timestamps in file order never decrease;
- on each track, complete (`X`) slices nest strictly: disjoint, or one inside the other;
- flow and async ids are integers below 2^53 (JSON readers hold numbers as doubles: larger ids collide).

Independent of the exporter (`export.py`), which writes traces meant to pass it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_SAFE_ID = 2**53
ID_PHASES = frozenset({"s", "t", "f", "b", "n", "e"})


def _events(data: Any) -> list[Any]:
    if isinstance(data, Mapping):
        return list(data.get("traceEvents") or [])
    return list(data) if isinstance(data, list) else []


def format_problems(data: Any, limit: int = 20) -> list[str]:
    """The ways a parsed chrome trace (a `traceEvents` object or an event array) breaks the rules above, at
    most `limit` lines; empty when it keeps them all."""
    problems: list[str] = []
    last_ts: dict[tuple[Any, Any], float] = {}
    slices: dict[tuple[Any, Any], list[tuple[int, int, int]]] = {}
    for index, event in enumerate(_events(data)):
        if not isinstance(event, Mapping):
            problems.append(f"event #{index} is not an object")
            continue
        ph = event.get("ph")
        if ph == "M":
            continue
        track = (event.get("pid"), event.get("tid"))
        ts = event.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            problems.append(f"event #{index} ({event.get('name')!r}): ts {ts!r} is not a non-negative number")
            continue
        if ts < last_ts.get(track, -1.0):
            problems.append(f"event #{index} ({event.get('name')!r}): ts {ts} before the previous event on "
                            f"track {track}")
        last_ts[track] = max(ts, last_ts.get(track, -1.0))
        if ph == "X":
            dur = event.get("dur", 0)
            if type(dur) not in (int, float) or not math.isfinite(dur) or dur < 0:
                problems.append(f"event #{index} ({event.get('name')!r}): dur {dur!r} is not a non-negative number")
                continue
            start = round(ts * 1000)
            slices.setdefault(track, []).append((start, start + round(dur * 1000), index))
        if ph in ID_PHASES and "id" in event:
            ident = event["id"]
            if type(ident) is not int or not 0 <= ident < MAX_SAFE_ID:
                problems.append(f"event #{index} ({event.get('name')!r}): id {ident!r} is not an integer below 2^53")
    for track, spans in slices.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[int] = []
        for start, end, index in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                problems.append(f"event #{index}: overlaps its enclosing slice's end on track {track}")
            else:
                open_ends.append(end)
    return problems[:limit]
