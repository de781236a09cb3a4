"""torch.profiler (Kineto) chrome traces -> the events table.

Host rows are `cpu_op`s (and CUDA runtime/driver calls) with exclusive time, plus c10d collective ranges
(`gloo:all_reduce`, `nccl:all_reduce`), which are the only trace of communication on CPU. Device rows are
`kernel`, `gpu_memcpy` and `gpu_memset` events; each takes the annotation context of the host call that
launched it, found through `correlation` (the launching runtime call) or else `External id` (the launching
cpu_op).

A JSON array (torch_npu's trace_view.json) is handed to `trace_view.trace_view_events`.

Events that cannot be used (not an object, no `ph`, a `ts` / `dur` that is missing, non-finite, negative or
beyond `events.MAX_TIME_US`) are skipped and counted in a `SkippedEvents` (reported as notes); a trace with
nothing usable is a one-line UserError naming the file and the first bad event.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfbench.bounded_files import TRACE_BYTES, loads_json, read_capped
from perfbench.errors import UserError
from perfbench.profiling.categories import categorize
from perfbench.profiling.events import SkippedEvents, event_label, events_from_columns, time_problem, us_text_to_ns
from perfbench.profiling.scopes import (
    EMPTY_SCOPE,
    OP,
    RANGE,
    SCOPE,
    Scope,
    is_context_range,
    step_windows,
    sweep,
)
from perfbench.profiling.shapes import input_dims_text
from perfbench.profiling.trace_view import trace_view_events

HOST_CATEGORIES = frozenset({
    "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver",
    "xpu_runtime", "xpu_driver", "mtia_runtime",
})
LAUNCH_CATEGORIES = HOST_CATEGORIES - {"cpu_op", "user_annotation"}
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# c10d names its collectives' record_function ranges `<backend>:<op>` (user_annotation on CPU/CUDA).
COLLECTIVE_PREFIXES = ("gloo:", "nccl:", "mpi:", "hccl:", "ucc:")


class NotATrace(UserError):
    """Valid JSON that is not a chrome trace (no `traceEvents` list, not an event array): in a folder of
    files, such a file is passed over, where a trace that fails to parse is reported."""


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: building millions of small dicts and tuples (which hold no cycles)
    otherwise triggers a full collection again and again, tripling the parse time of a big trace."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_trace_json(path: Path) -> Any:
    """The parsed JSON of a .json or .json.gz trace (bounded: perfbench/bounded_files.py); UserError if it is not
    JSON, is over the size cap or is nested too deep."""
    raw = read_capped(path, TRACE_BYTES)
    if not raw.strip():
        raise UserError(f"{path}: empty file ({len(raw)} bytes): not a trace")
    return loads_json(raw, str(path), "a JSON trace")


def parse_chrome_trace(path: Path | str, rank: int | None = None,
                       skipped: SkippedEvents | None = None) -> pd.DataFrame:
    """Parse a Kineto chrome trace (.json / .json.gz) or a torch_npu trace_view.json into the events table.

    Args:
        path: the trace file.
        rank: override the rank (default: Kineto `distributedInfo.rank`, else 0).
        skipped: collects the events that could not be used (see the module docstring).

    Returns:
        The events table (`events.COLUMNS`): host ops with exclusive µs, device kernels with their µs, all
        with start_us relative to the first timed event of the trace. Absolute-µs traces and traces whose
        ts are relative to `baseTimeNanoseconds` give the same table.
    """
    path = Path(path)
    skipped = SkippedEvents() if skipped is None else skipped
    with gc_paused():
        data = read_trace_json(path)
        if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
            if rank is None:
                info = data.get("distributedInfo")
                rank = _int_or(info.get("rank") if isinstance(info, dict) else None, 0)
            events, parse = data["traceEvents"], kineto_events
        elif isinstance(data, list):
            events, parse = data, trace_view_events
        else:
            raise NotATrace(f"{path}: not a chrome trace (no `traceEvents` list)")
        try:
            table = parse(events, rank=rank or 0, skipped=skipped)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
            # UserError is a ValueError: let a precise message from below through unchanged.
            if isinstance(err, UserError):
                raise
            raise UserError(f"{path}: malformed trace event ({type(err).__name__}: {err})") from None
    if skipped.total and not len(table):
        raise UserError(f"{path}: no usable trace event; skipped {skipped.summary()}")
    return table


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _times_ns(ts: list[Any], origin: Any) -> np.ndarray:
    """µs timestamps (int, float or str) minus `origin`, as int64 ns.

    Subtracting before scaling keeps ns precision for float ts; whole-µs (int) and string ts are exact.
    """
    if not ts:
        return np.zeros(0, dtype=np.int64)
    if any(isinstance(t, str) for t in ts):
        base = us_text_to_ns(origin)
        return np.asarray([us_text_to_ns(t) - base for t in ts], dtype=np.int64)
    values = np.asarray(ts)
    if values.dtype.kind in "iu":
        return (values.astype(np.int64) - int(origin)) * 1000
    return np.rint((values.astype(np.float64) - float(origin)) * 1000.0).astype(np.int64)


def _durations_ns(durs: list[Any]) -> np.ndarray:
    return np.rint(np.asarray(durs, dtype=np.float64) * 1000.0).astype(np.int64)


def kineto_events(trace_events: list[dict[str, Any]], rank: int = 0,
                  skipped: SkippedEvents | None = None) -> pd.DataFrame:
    """The events table of a Kineto `traceEvents` list (see `parse_chrome_trace`); unusable events are left
    out and counted in `skipped`."""
    skipped = SkippedEvents() if skipped is None else skipped
    threads: dict[tuple[Any, Any], int] = {}
    h_thread: list[int] = []
    h_tid: list[object] = []
    h_ts: list[Any] = []
    h_dur: list[Any] = []
    h_kind: list[int] = []
    h_name: list[str] = []
    h_ext: list[Any] = []
    h_corr: list[Any] = []
    h_dims: list[Any] = []  # `Input Dims` (record_shapes), None without
    d_ts: list[Any] = []
    d_dur: list[Any] = []
    d_name: list[str] = []
    d_stream: list[str] = []
    d_ext: list[Any] = []
    d_corr: list[Any] = []
    host_categories, device_categories = HOST_CATEGORIES, DEVICE_CATEGORIES
    launch_categories = LAUNCH_CATEGORIES
    for index, event in enumerate(trace_events):
        if not isinstance(event, dict):
            skipped.add("not an object", event_label(index, event))
            continue
        ph = event.get("ph")
        if ph != "X":
            if ph is None:
                skipped.add("no ph (event phase)", event_label(index, event))
            continue
        cat = event.get("cat")
        if cat in host_categories or cat in device_categories:
            problem = time_problem(event.get("ts"), event.get("dur", 0))
            if problem is None and not isinstance(event.get("args") or {}, dict):
                problem = "args is not an object"
            if problem is not None:
                skipped.add(problem, event_label(index, event))
                continue
        if cat in host_categories:
            name = str(event.get("name", ""))
            if is_context_range(name):
                kind = SCOPE
            elif cat == "user_annotation":
                kind = OP if name.startswith(COLLECTIVE_PREFIXES) else RANGE
            else:
                kind = OP
            key = (event.get("pid"), event.get("tid"))
            thread = threads.get(key)
            if thread is None:
                thread = threads[key] = len(threads)
            args = event.get("args") or {}
            h_thread.append(thread)
            h_tid.append(key[1])
            h_ts.append(event["ts"])
            h_dur.append(event.get("dur", 0))
            h_kind.append(kind)
            h_name.append(name)
            h_ext.append(args.get("External id"))
            h_corr.append(args.get("correlation") if cat in launch_categories else None)
            h_dims.append(args.get("Input Dims"))
        elif cat in device_categories:
            args = event.get("args") or {}
            d_ts.append(event["ts"])
            d_dur.append(event.get("dur", 0))
            d_name.append(str(event.get("name", "")))
            d_stream.append(str(args.get("stream", event.get("tid"))))
            d_ext.append(args.get("External id"))
            d_corr.append(args.get("correlation"))

    all_ts = h_ts + d_ts
    if any(isinstance(t, str) for t in all_ts):
        origin = min(all_ts, key=us_text_to_ns)
    else:
        origin = min(all_ts, default=0)
    start_arr = _times_ns(h_ts, origin)
    dur_arr = _durations_ns(h_dur)
    kind_arr = np.asarray(h_kind, dtype=np.int64)
    scopes, self_ns = sweep(np.asarray(h_thread, dtype=np.int64), start_arr, dur_arr, kind_arr, h_name)

    by_external: dict[Any, Scope] = {}
    by_correlation: dict[Any, Scope] = {}
    launched_at: dict[Any, int] = {}  # correlation -> start ns of the runtime call that launched the kernel
    for i, ext in enumerate(h_ext):
        if ext is not None:
            by_external[ext] = scopes[i]
        if h_corr[i] is not None:
            by_correlation[h_corr[i]] = scopes[i]
            launched_at[h_corr[i]] = int(start_arr[i])
    d_scopes = [
        by_correlation.get(corr) or by_external.get(ext) or EMPTY_SCOPE for corr, ext in zip(d_corr, d_ext)
    ]
    host_shapes, device_shapes = _input_shapes(h_dims, h_ext, h_corr, d_ext, d_corr)
    d_launch_ns = [launched_at.get(corr) for corr in d_corr]

    # Work launched from a thread without a `ProfilerStep#N` range (autograd backward) takes the step whose
    # window holds it.
    is_scope = kind_arr == SCOPE
    windows = step_windows(start_arr[is_scope], dur_arr[is_scope], [h_name[i] for i in np.flatnonzero(is_scope)])
    d_start = _times_ns(d_ts, origin)
    d_scopes = windows.fill(d_scopes, d_start)
    op_idx = np.flatnonzero(kind_arr == OP)
    host_scopes = windows.fill([scopes[i] for i in op_idx.tolist()], start_arr[op_idx])
    host_names = [h_name[i] for i in op_idx.tolist()]
    names = host_names + d_name
    all_scopes = host_scopes + d_scopes
    n_host = len(host_names)
    starts = np.concatenate([start_arr[op_idx], d_start])
    durs = np.concatenate([self_ns[op_idx], _durations_ns(d_dur)])
    return events_from_columns({
        "name": names,
        "category": [categorize(n, None, s.module) for n, s in zip(names, all_scopes)],
        "phase": [s.phase for s in all_scopes],
        "layer": [s.layer for s in all_scopes],
        "layer_type": [s.layer_type for s in all_scopes],
        "module": [s.module for s in all_scopes],
        "step": [s.step for s in all_scopes],
        "side": ["host"] * n_host + ["device"] * len(d_name),
        "start_us": starts / 1000.0,
        "dur_us": durs / 1000.0,
        "stream": [str(h_tid[i]) for i in op_idx.tolist()] + d_stream,
        "rank": [rank] * len(names),
        "input_shapes": [host_shapes[i] for i in op_idx.tolist()] + device_shapes,
        "launch_us": [None] * n_host + [None if ns is None else ns / 1000.0 for ns in d_launch_ns],
    })


def _input_shapes(h_dims: list[Any], h_ext: list[Any], h_corr: list[Any], d_ext: list[Any],
                  d_corr: list[Any]) -> tuple[list[str | None], list[str | None]]:
    """Shape text of every host event (its own `Input Dims`) and of every device event: the dims of the op
    that launched it, by its External id, else by the External id of the runtime call its correlation names.
    All None for a trace recorded without record_shapes."""
    if not any(d is not None for d in h_dims):
        return [None] * len(h_dims), [None] * len(d_ext)
    host = [input_dims_text(d) for d in h_dims]
    by_external = {ext: shape for ext, shape in zip(h_ext, host) if ext is not None and shape is not None}
    external_of_launch = {corr: ext for corr, ext in zip(h_corr, h_ext) if corr is not None}
    device = [by_external.get(ext if ext is not None else external_of_launch.get(corr))
              for ext, corr in zip(d_ext, d_corr)]
    return host, device
