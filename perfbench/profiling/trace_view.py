"""torch_npu trace_view.json (a JSON array of chrome events) -> device events and their annotation context.

Device tasks are the X events of the `Ascend Hardware` process (compute task types only: sync, notify and
DMA tasks are not kernels) and the collective ops on the `Group ... Communication` threads of the `HCCL` /
`Communication` process. A task's context comes from the `async_npu` (`torch_to_npu`) flow: its end is the
task (pid, tid, ts), its start the issuing `cpu_op` at the same (pid, tid, ts); on NPU, record_function
ranges (`pb|...`, `ProfilerStep#N`) are `cpu_op`s too, so the issuing op's enclosing ranges give
phase/layer/module (profiler_formats.md sections 0.5 and 5.1).

Events that cannot be used (not an object; an X event whose ts / dur is not a usable time, see
`events.time_problem`; a flow event without a usable ts) are skipped and counted in a `SkippedEvents`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfbench.profiling.categories import categorize
from perfbench.profiling.events import (
    SkippedEvents,
    concat_events,
    event_label,
    events_from_columns,
    time_problem,
    us_text_to_ns,
)
from perfbench.profiling.scopes import (
    EMPTY_SCOPE,
    OP,
    SCOPE,
    Scope,
    is_context_range,
    scope_columns,
    step_windows,
    sweep,
)

HARDWARE_PROCESS = "Ascend Hardware"
COMMUNICATION_PROCESSES = ("HCCL", "Communication")
# msprof-analyze's compute task types, plus DSA_SQE (random-number ops listed in kernel_details.csv) and the
# `Other` type older torch_npu wrote for every kernel.
COMPUTE_TASK_TYPES = frozenset({
    "AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "FFTS_PLUS", "DSA_SQE", "Other",
})


@dataclass
class DeviceTask:
    """One device task of a trace_view.json: start in integer ns (epoch), duration in µs."""

    name: str
    start_ns: int
    dur_us: float
    stream: str
    task_type: str
    communication: bool
    scope: Scope | None = None  # None: no async_npu flow led to the issuing op (step from its time window)
    launch_ns: int | None = None  # start of the issuing op (the async_npu flow's start), epoch ns


@dataclass
class TraceView:
    """What perfbench reads from a trace_view.json: host ops (exclusive time), device tasks with context."""

    host_names: list[str] = field(default_factory=list)
    host_start_ns: list[int] = field(default_factory=list)
    host_self_us: list[float] = field(default_factory=list)
    host_stream: list[str] = field(default_factory=list)
    host_scopes: list[Scope] = field(default_factory=list)
    tasks: list[DeviceTask] = field(default_factory=list)
    attributed: int = 0  # tasks whose issuing op was found through an async_npu flow

    def scope_by_start(self) -> dict[int, Scope]:
        """Device task start (ns) -> context, for the tasks with any (a flow's, or only their step's)."""
        return {t.start_ns: t.scope for t in self.tasks if t.scope is not None}

    def launch_by_start(self) -> dict[int, int]:
        """Device task start (ns) -> start of its issuing op (ns), for the tasks an async_npu flow links."""
        return {t.start_ns: t.launch_ns for t in self.tasks if t.launch_ns is not None}


def read_trace_view(trace_events: list[dict[str, Any]], skipped: SkippedEvents | None = None) -> TraceView:
    """Index a trace_view.json event list: host cpu_ops with context and self time, device tasks with
    context. Unusable events are left out and counted in `skipped`."""
    skipped = SkippedEvents() if skipped is None else skipped
    if not isinstance(trace_events, list):
        raise ValueError(f"expected a JSON array of events, got {type(trace_events).__name__}")
    usable: list[dict[str, Any]] = []
    for index, event in enumerate(trace_events):
        if not isinstance(event, dict):
            skipped.add("not an object", event_label(index, event))
        elif not isinstance(event.get("args") or {}, dict):
            skipped.add("args is not an object", event_label(index, event))
        elif event.get("ph") in ("X", "s", "f") and (
                problem := time_problem(event.get("ts"), event.get("dur", 0) if event.get("ph") == "X" else 0)):
            skipped.add(problem, event_label(index, event))
        elif event.get("ph") is None:
            skipped.add("no ph (event phase)", event_label(index, event))
        else:
            usable.append(event)
    trace_events = usable
    process_names: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    for event in trace_events:
        if event.get("ph") == "M":
            if event.get("name") == "process_name":
                process_names[event.get("pid")] = str((event.get("args") or {}).get("name", ""))
            elif event.get("name") == "thread_name":
                name = str((event.get("args") or {}).get("name", ""))
                thread_names[(event.get("pid"), event.get("tid"))] = name

    threads: dict[tuple[Any, Any], int] = {}
    h_thread: list[int] = []
    h_key: list[tuple[Any, Any, int]] = []
    h_dur: list[int] = []
    h_kind: list[int] = []
    h_name: list[str] = []
    flow_start: dict[Any, tuple[Any, Any, int]] = {}
    flow_end: dict[tuple[Any, Any, int], Any] = {}
    tasks: list[tuple[DeviceTask, tuple[Any, Any, int]]] = []
    for event in trace_events:
        ph = event.get("ph")
        if ph in ("s", "f"):
            if event.get("cat") == "async_npu":
                where = (event.get("pid"), event.get("tid"), us_text_to_ns(event["ts"]))
                if ph == "s":
                    flow_start[event.get("id")] = where
                else:
                    flow_end[where] = event.get("id")
            continue
        if ph != "X":
            continue
        pid, tid = event.get("pid"), event.get("tid")
        if event.get("cat") == "cpu_op":
            thread = threads.get((pid, tid))
            if thread is None:
                thread = threads[(pid, tid)] = len(threads)
            name = str(event.get("name", ""))
            start = us_text_to_ns(event["ts"])
            h_thread.append(thread)
            h_key.append((pid, tid, start))
            h_dur.append(round(float(event.get("dur", 0)) * 1000))
            h_kind.append(SCOPE if is_context_range(name) else OP)
            h_name.append(name)
            continue
        process = process_names.get(pid, "")
        args = event.get("args") or {}
        if process == HARDWARE_PROCESS:
            task_type = str(args.get("Task Type", "Other"))
            if task_type not in COMPUTE_TASK_TYPES:
                continue
            communication = False
            stream = str(tid)
        elif process in COMMUNICATION_PROCESSES and "Communication" in thread_names.get((pid, tid), ""):
            task_type, communication, stream = "COMMUNICATION", True, thread_names[(pid, tid)]
        else:
            continue
        start = us_text_to_ns(event["ts"])
        task = DeviceTask(str(event.get("name", "")), start, float(event.get("dur", 0)), stream, task_type,
                          communication)
        tasks.append((task, (pid, tid, start)))

    issued = []
    for task, where in tasks:
        flow_id = flow_end.get(where)
        issued.append((task, flow_start.get(flow_id) if flow_id is not None else None))
    return assemble_view(h_thread, h_key, h_dur, h_kind, h_name, issued)


def assemble_view(h_thread: list[int], h_key: list[tuple[Any, Any, int]], h_dur: list[int], h_kind: list[int],
                  h_name: list[str], tasks: list[tuple[DeviceTask, tuple[Any, Any, int] | None]]) -> TraceView:
    """A TraceView from host ranges and device tasks, whichever file they came from (trace_view.json, or the
    .db export: ascend_db.py).

    Args:
        h_thread: int thread key per host event (events on different threads never nest).
        h_key: (pid, tid, start ns) per host event: what a task's issuing op is found by.
        h_dur: inclusive duration ns per host event. h_kind: SCOPE / OP per event (scopes.py). h_name: names.
        tasks: each device task with the key of the host op that issued it, or None (no link).
    """
    start_arr = np.asarray([k[2] for k in h_key], dtype=np.int64)
    dur_arr = np.asarray(h_dur, dtype=np.int64)
    kind_arr = np.asarray(h_kind, dtype=np.int64)
    scopes, self_ns = sweep(np.asarray(h_thread, dtype=np.int64), start_arr, dur_arr, kind_arr, h_name)
    # Several ops can start at the issuing (pid, tid, ts): the innermost (shortest) one has the full context.
    scope_at: dict[tuple[Any, Any, int], Scope] = {}
    for i in np.argsort(-dur_arr, kind="stable").tolist():
        scope_at[h_key[i]] = scopes[i]

    # Work issued from a thread without a `ProfilerStep#N` range of its own (autograd, DDP) has no step from
    # its context: it takes the step whose window holds it, as the profiler's step_trace_time.csv counts it.
    windows = step_windows(start_arr[kind_arr == SCOPE], dur_arr[kind_arr == SCOPE],
                           [n for n, k in zip(h_name, h_kind) if k == SCOPE])
    view = TraceView()
    task_scopes: list[Scope] = []
    for task, issued_at in tasks:
        scope = scope_at.get(issued_at) if issued_at is not None else None
        task.launch_ns = issued_at[2] if issued_at is not None else None
        view.attributed += scope is not None
        task_scopes.append(scope or EMPTY_SCOPE)
        view.tasks.append(task)
    filled = windows.fill(task_scopes, np.asarray([t.start_ns for t in view.tasks], dtype=np.int64))
    for task, scope in zip(view.tasks, filled):
        task.scope = scope if scope != EMPTY_SCOPE else None
    ops = np.flatnonzero(kind_arr == OP)
    host_scopes = windows.fill([scopes[i] for i in ops.tolist()], start_arr[ops])
    for i, scope in zip(ops.tolist(), host_scopes):
        view.host_names.append(h_name[i])
        view.host_start_ns.append(h_key[i][2])
        view.host_self_us.append(self_ns[i] / 1000.0)
        view.host_stream.append(str(h_key[i][1]))
        view.host_scopes.append(scope)
    return view


def _table(names: list[str], categories: list[str], scopes: list[Scope], side: str, starts_ns: list[int],
           durs_us: list[float], streams: list[str], rank: int, origin_ns: int,
           launches_ns: list[int | None] | None = None) -> pd.DataFrame:
    return events_from_columns({
        "name": names,
        "category": categories,
        **scope_columns(scopes),
        "side": [side] * len(names),
        "start_us": (np.asarray(starts_ns, dtype=np.int64) - origin_ns) / 1000.0,
        "dur_us": durs_us,
        "stream": streams,
        "rank": [rank] * len(names),
        "launch_us": [None if ns is None else (ns - origin_ns) / 1000.0
                      for ns in (launches_ns if launches_ns is not None else [None] * len(names))],
    })


def task_events(view: TraceView, rank: int, origin_ns: int) -> pd.DataFrame:
    """The device tasks of a trace view as events (start_us from `origin_ns`); categories from task names."""
    scopes = [t.scope or EMPTY_SCOPE for t in view.tasks]
    categories = ["communication" if t.communication else categorize(t.name, None, s.module)
                  for t, s in zip(view.tasks, scopes)]
    tasks = view.tasks
    return _table([t.name for t in tasks], categories, scopes, "device", [t.start_ns for t in tasks],
                  [t.dur_us for t in tasks], [t.stream for t in tasks], rank, origin_ns,
                  [t.launch_ns for t in tasks])


def host_events(view: TraceView, rank: int, origin_ns: int) -> pd.DataFrame:
    """The host cpu_ops of a trace view as events (exclusive µs; start_us from `origin_ns`)."""
    categories = [categorize(n, None, s.module) for n, s in zip(view.host_names, view.host_scopes)]
    return _table(view.host_names, categories, view.host_scopes, "host", view.host_start_ns,
                  view.host_self_us, view.host_stream, rank, origin_ns)


def trace_view_events(trace_events: list[dict[str, Any]], rank: int = 0,
                      skipped: SkippedEvents | None = None) -> pd.DataFrame:
    """The events table of a trace_view.json: host cpu_ops (exclusive µs) and device tasks (µs).

    Categories of device tasks come from their names (the trace has no op Type); kernel_details.csv, when it
    exists, is the better source (see `ascend.parse_ascend_dir`).
    """
    view = read_trace_view(trace_events, skipped)
    origin = min(view.host_start_ns + [t.start_ns for t in view.tasks], default=0)
    return concat_events([host_events(view, rank, origin), task_events(view, rank, origin)])
