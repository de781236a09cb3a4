"""Annotation context of host ops: which `pb|...` ranges (and `ProfilerStep#N`) enclose each op on its thread.

The model names its record_function ranges `pb|key=value|...` (model/tracing.py). Ranges nest on the thread
that opened them, so one sweep per thread, sorted by start, with a stack of open ranges gives every event the
merged context of all its enclosing ranges (innermost wins per key) and every op its exclusive (self) time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from model.tracing_names import PREFIX, parse_scope

# Event kinds in a sweep. At equal start and duration the lower kind encloses the higher one, so an
# annotation that starts and ends with its only op still encloses it.
SCOPE = 0  # `pb|...` or `ProfilerStep#N`: sets context, is not an op
RANGE = 1  # another annotation (user_annotation "Optimizer.step#...", "[param|...]"): transparent
OP = 2  # an op with self time (cpu_op, cuda_runtime launch)

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


class Scope(NamedTuple):
    """What the enclosing annotations say about an op; None where no range said it.

    A NamedTuple (not a dataclass) because one is looked up per event in the hot loop of a 1M-event parse.
    """

    phase: str | None = None
    layer: int | None = None
    layer_type: str | None = None
    module: str | None = None
    step: int | None = None


EMPTY_SCOPE = Scope()


def _as_int(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def scope_update(name: str) -> Scope | None:
    """The fields a range named `name` sets (None = unchanged), or None if it is not a context range.

    `pb|phase=decode|step=3` sets phase and step; `ProfilerStep#7` sets step=7. Empty values count as unset.
    """
    if name.startswith(PREFIX):
        fields = {k: (v if v != "" else None) for k, v in parse_scope(name).items()}
        return Scope(
            phase=fields.get("phase"), layer=_as_int(fields.get("layer")),
            layer_type=fields.get("layer_type"), module=fields.get("module"),
            step=_as_int(fields.get("step")),
        )
    match = _PROFILER_STEP.match(name)
    if match:
        return Scope(step=int(match.group(1)))
    return None


def is_context_range(name: str) -> bool:
    """True for `pb|...` and `ProfilerStep#N` ranges: they carry context and are never counted as ops."""
    return name.startswith(PREFIX) or _PROFILER_STEP.match(name) is not None


def merge(outer: Scope, update: Scope) -> Scope:
    """`outer` with every field `update` sets replaced (the inner range wins)."""
    return Scope._make(u if u is not None else o for o, u in zip(outer, update))


def scope_columns(scopes: Sequence[Scope], steps: Sequence[int | None] | None = None) -> dict[str, list]:
    """Event-table columns phase, layer, layer_type, module and step from one Scope per event (`steps`, when
    given, replaces the scopes' step)."""
    return {
        "phase": [s.phase for s in scopes],
        "layer": [s.layer for s in scopes],
        "layer_type": [s.layer_type for s in scopes],
        "module": [s.module for s in scopes],
        "step": [s.step for s in scopes] if steps is None else list(steps),
    }


class ScopeMerger:
    """Memoized `merge(outer, scope_update(name))`: a trace repeats the same few hundred range names."""

    def __init__(self) -> None:
        self._updates: dict[str, Scope | None] = {}
        self._merged: dict[tuple[Scope, str], Scope] = {}

    def enter(self, outer: Scope, name: str) -> Scope:
        key = (outer, name)
        merged = self._merged.get(key)
        if merged is None:
            if name not in self._updates:
                self._updates[name] = scope_update(name)
            update = self._updates[name]
            merged = outer if update is None else merge(outer, update)
            self._merged[key] = merged
        return merged


def sweep(thread: np.ndarray, start_ns: np.ndarray, dur_ns: np.ndarray, kind: np.ndarray,
          names: Sequence[str]) -> tuple[list[Scope], np.ndarray]:
    """Context and exclusive time of every host event.

    Args:
        thread: int thread key per event (events on different threads never nest).
        start_ns, dur_ns: int64 ns per event (inclusive duration).
        kind: SCOPE, RANGE or OP per event.
        names: event names (SCOPE names are parsed with `scope_update`).

    Returns:
        (scope per event, self_ns per event). An event's scope includes its own annotation if it is a SCOPE.
        self_ns of an OP = its duration minus the durations of its direct child OPs (ranges in between are
        transparent), clamped at 0; for non-OP events self_ns is 0.
    """
    n = len(start_ns)
    order = np.lexsort((kind, -dur_ns, start_ns, thread))
    thread_l = thread.tolist()
    start_l = start_ns.tolist()
    dur_l = dur_ns.tolist()
    kind_l = kind.tolist()
    scopes: list[Scope] = [EMPTY_SCOPE] * n
    child_ns = [0] * n
    merger = ScopeMerger()
    stack: list[tuple[int, Scope, int]] = []  # (end_ns, scope, index of the nearest enclosing OP or -1)
    current_thread = None
    for i in order.tolist():
        t = start_l[i]
        if thread_l[i] != current_thread:
            current_thread = thread_l[i]
            stack.clear()
        while stack and stack[-1][0] <= t:
            stack.pop()
        if stack:
            _, scope, parent_op = stack[-1]
        else:
            scope, parent_op = EMPTY_SCOPE, -1
        k = kind_l[i]
        if k == SCOPE:
            scope = merger.enter(scope, names[i])
        scopes[i] = scope
        d = dur_l[i]
        if k == OP:
            if parent_op >= 0:
                child_ns[parent_op] += d
            parent_op = i
        stack.append((t + d, scope, parent_op))
    self_ns = np.maximum(dur_ns - np.asarray(child_ns, dtype=np.int64), 0)
    self_ns[kind != OP] = 0
    return scopes, self_ns


def profiler_step(name: str) -> int | None:
    """N of a `ProfilerStep#N` range name, else None."""
    match = _PROFILER_STEP.match(name)
    return int(match.group(1)) if match else None


def step_windows(start_ns: np.ndarray, dur_ns: np.ndarray, names: Sequence[str]) -> StepWindows:
    """The `ProfilerStep#N` ranges among events (start, duration, name per event), sorted by start."""
    picked = [(int(s), int(s) + int(d), step) for s, d, name in zip(start_ns.tolist(), dur_ns.tolist(), names)
              if (step := profiler_step(name)) is not None]
    picked.sort()
    return StepWindows(np.asarray([p[0] for p in picked], dtype=np.int64),
                       np.asarray([p[1] for p in picked], dtype=np.int64), [p[2] for p in picked])


class StepWindows(NamedTuple):
    """Time windows of profiler steps (ns, same clock as the events they are applied to)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    steps: list[int]

    def step_at(self, times_ns: np.ndarray) -> list[int | None]:
        """The step whose window holds each time (the latest-starting one if windows overlap), else None."""
        if not self.steps or len(times_ns) == 0:
            return [None] * len(times_ns)
        index = np.searchsorted(self.start_ns, np.asarray(times_ns, dtype=np.int64), side="right") - 1
        inside = (index >= 0) & (np.asarray(times_ns) < self.end_ns[np.maximum(index, 0)])
        return [self.steps[i] if ok else None for i, ok in zip(index.tolist(), inside.tolist())]

    def fill(self, scopes: list[Scope], times_ns: np.ndarray) -> list[Scope]:
        """`scopes` with the step of its window set where a scope has none (device work launched from a
        thread that has no `ProfilerStep#N` range of its own, e.g. the autograd or DDP thread)."""
        if not self.steps:
            return scopes
        missing = [i for i, s in enumerate(scopes) if s.step is None]
        if not missing:
            return scopes
        found = self.step_at(np.asarray(times_ns, dtype=np.int64)[missing])
        out = list(scopes)
        filled: dict[tuple[Scope, int], Scope] = {}  # a trace repeats a few hundred scopes
        for i, step in zip(missing, found):
            if step is not None:
                key = (out[i], step)
                scope = filled.get(key)
                if scope is None:
                    scope = filled[key] = out[i]._replace(step=step)
                out[i] = scope
        return out
