"""A normalized chrome trace (.json.gz) of anything perfbench parses, for Perfetto and chrome://tracing.

Two routes, both checked by `trace_format.format_problems` before the file is written:

- **A chrome trace file** (Kineto JSON, torch_npu's trace_view.json): every event is kept in its own layout
  (a Kineto object stays an object, a trace_view array an array, so perfbench reads the export as it read the
  source), with timestamps rewritten as numbers in µs from the trace's first event (trace_view.json writes
  epoch µs as text: as doubles they lose the ns digits and viewers mis-nest kernels), flow and async ids
  renumbered from 1 (torch_npu's exceed 2^53), and a slice that partially overlaps its track's enclosing
  slice moved to an extra lane of that track (`track_nesting`), its flows with it.
- **Any other trace** (Ascend folders from kernel_details.csv, the `.db` export, multi-rank folders): written
  from the events table as a Kineto-style object: device rows as `kernel` slices per (rank, stream), host
  rows as `cpu_op` slices of their self time at their start, spread over lanes so that none overlaps (a
  self-time slice is not a call tree; nesting would make a reader subtract one op from another).

Both add perfbench's own tracks, one process per rank: phases, decode steps and layers (from the events'
annotations) and the advisor's findings as instant events at the trace's start. The source is never
modified.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
from pydantic import BaseModel, ConfigDict

from perfbench.analysis.advisor import Finding
from perfbench.errors import UserError
from perfbench.profiling.chrome import DEVICE_CATEGORIES, HOST_CATEGORIES, read_trace_json
from perfbench.profiling.events import time_problem, us_text_to_ns
from perfbench.profiling.loading import LoadedTrace, load_trace
from perfbench.profiling.trace_format import ID_PHASES, format_problems
from perfbench.profiling.trace_view import read_trace_view
from perfbench.profiling.track_nesting import disjoint_lanes, nesting_lanes

PERFBENCH_PID_BASE = 900_000  # perfbench's own processes: the first unused pid from here, one per rank
READ_CATEGORIES = HOST_CATEGORIES | DEVICE_CATEGORIES
TRACKS = ("phases", "decode steps", "layers", "advisor")


class ExportSummary(BaseModel):
    """What an export wrote and changed; `line()` is what `perfbench trace --export` prints."""

    model_config = ConfigDict(extra="forbid")

    out: str
    route: str  # "chrome" (the source's events, normalized) or "events" (written from the events table)
    events: int
    partial_overlaps: int = 0  # slices that started inside another on their track and ended after it
    moved_slices: int = 0  # slices moved to an extra lane of their track so that every track nests
    dropped_events: int = 0  # not an object, or no usable ts
    flow_ids: int = 0  # distinct flow / async ids renumbered
    perfbench_events: int = 0

    def line(self) -> str:
        source = "the source trace" if self.route == "chrome" else "the events table"
        return (f"export: {self.out} ({self.events} events from {source}; {self.flow_ids} flow ids renumbered; "
                f"{self.partial_overlaps} partial overlaps, {self.moved_slices} slices moved to an extra lane of "
                f"their track; {self.dropped_events} unusable events dropped; {self.perfbench_events} events on "
                f"perfbench's tracks)")


def _ns(value: Any) -> int:
    return us_text_to_ns(value)


def _us(ns: int) -> float:
    return ns / 1000.0  # the nearest float to the exact decimal µs, as round(..., 3) would give, at a tenth the cost


def _used_pids(events: Iterable[Mapping[str, Any]]) -> set[Any]:
    return {e.get("pid") for e in events}


def _free_pids(used: set[Any], count: int) -> list[int]:
    pids: list[int] = []
    candidate = PERFBENCH_PID_BASE
    while len(pids) < count:
        if candidate not in used:
            pids.append(candidate)
        candidate += 1
    return pids


def _thread_names(events: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, Any], str]:
    return {(e.get("pid"), e.get("tid")): str((e.get("args") or {}).get("name", ""))
            for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}


def _lane_tid(tid: Any, lane: int, taken: set[Any]) -> Any:
    """A tid for an extra lane of `tid`: an unused integer when tid is one, else `"<tid> lane N"`."""
    if isinstance(tid, int):
        candidate = tid * 100 + lane if 0 <= tid * 100 + lane < 2**31 else 2**31 - 1 - lane
        while candidate in taken:
            candidate += 1
        return candidate
    return f"{tid} lane {lane}"


def normalize_chrome(data: Any) -> tuple[Any, ExportSummary, int]:
    """The normalized copy of a parsed chrome trace (object or array) and what changed; also the ns (from the
    export's zero) at which perfbench's parser will put its own zero, so perfbench's tracks line up."""
    is_object = isinstance(data, dict)
    raw = data["traceEvents"] if is_object else data
    dropped = 0
    timed: list[tuple[dict[str, Any], int]] = []
    untimed: list[dict[str, Any]] = []
    for event in raw:
        if not isinstance(event, dict):
            dropped += 1
            continue
        if event.get("ph") == "M" or "ts" not in event:
            untimed.append(dict(event))
            continue
        dur = event.get("dur", 0) if event.get("ph") == "X" else 0
        if time_problem(event.get("ts"), dur) is not None:
            dropped += 1
            continue
        timed.append((dict(event), _ns(event["ts"])))
    origin = min((ns for _, ns in timed), default=0)

    ids: dict[tuple[Any, ...], int] = {}
    for event, ns in timed:
        event["ts"] = _us(ns - origin)
        if event.get("ph") == "X":
            event["dur"] = float(event.get("dur", 0))
        if event.get("ph") in ID_PHASES and "id" in event:
            kind = "flow" if event["ph"] in ("s", "t", "f") else "async"
            event["id"] = ids.setdefault((kind, event.get("cat"), str(event["id"])), len(ids) + 1)

    overlaps, moved = _spread_partial_overlaps(timed, untimed, origin)
    timed.sort(key=lambda pair: (pair[0]["ts"], -float(pair[0].get("dur", 0))))
    events = untimed + [event for event, _ in timed]
    zero = _parser_zero_ns(events, is_object)
    out: Any = {**data, "traceEvents": events} if is_object else events
    if is_object:
        out.pop("baseTimeNanoseconds", None)  # ts are now relative to the trace's first event, not to this base
    return out, ExportSummary(out="", route="chrome", events=len(events), partial_overlaps=overlaps, moved_slices=moved,
                              dropped_events=dropped, flow_ids=len(ids)), zero


def _spread_partial_overlaps(timed: list[tuple[dict[str, Any], int]], untimed: list[dict[str, Any]],
                             origin: int) -> tuple[int, int]:
    """Move each X slice that partially overlaps its enclosing slice to an extra lane of its track, with the
    flow ends bound to it (same track and ts); returns how many partial overlaps there were and how many
    slices moved."""
    tracks: dict[tuple[Any, Any], list[int]] = {}
    for i, (event, _) in enumerate(timed):
        if event.get("ph") == "X":
            tracks.setdefault((event.get("pid"), event.get("tid")), []).append(i)
    names = _thread_names(untimed)
    taken_tids: dict[Any, set[Any]] = {}
    for event, _ in timed:
        taken_tids.setdefault(event.get("pid"), set()).add(event.get("tid"))
    moved_at: dict[tuple[Any, Any, int], Any] = {}
    moved = overlaps = 0
    for (pid, tid), members in tracks.items():
        starts = [timed[i][1] - origin for i in members]
        ends = [s + round(float(timed[i][0].get("dur", 0)) * 1000) for s, i in zip(starts, members)]
        lanes = nesting_lanes(starts, ends)
        overlaps += sum(lane > 0 for lane in lanes)
        if max(lanes, default=0) > 0:
            lanes = _lanes_by_kind([timed[i][0] for i in members], starts, ends)
        lane_tids: dict[int, Any] = {}
        for i, lane, start in zip(members, lanes, starts):
            if lane == 0:
                continue
            if lane not in lane_tids:
                lane_tids[lane] = _lane_tid(tid, lane, taken_tids.setdefault(pid, set()))
                taken_tids[pid].add(lane_tids[lane])
                label = names.get((pid, tid)) or f"thread {tid}"
                untimed.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane_tids[lane],
                                "args": {"name": f"{label} (overlap lane {lane})"}})
            timed[i][0]["tid"] = lane_tids[lane]
            moved_at[(pid, tid, start)] = lane_tids[lane]
            moved += 1
    if moved_at:
        for event, ns in timed:
            if event.get("ph") in ("s", "t", "f"):
                new_tid = moved_at.get((event.get("pid"), event.get("tid"), ns - origin))
                if new_tid is not None:
                    event["tid"] = new_tid
    return overlaps, moved


def _lanes_by_kind(events: list[dict[str, Any]], starts: list[int], ends: list[int]) -> list[int]:
    """Lanes for a track that does not nest: the slices perfbench reads (ops, kernels, device tasks) keep lane
    0 as far as they nest among themselves; the others (the Python tracer's stack, GPU annotations), which
    are recorded apart from the ops and cross their ranges, go to lanes after them."""
    primary = [i for i, e in enumerate(events) if e.get("cat") is None or e.get("cat") in READ_CATEGORIES]
    read = set(primary)
    secondary = [i for i in range(len(events)) if i not in read]
    lanes = [0] * len(events)
    first = nesting_lanes([starts[i] for i in primary], [ends[i] for i in primary])
    for i, lane in zip(primary, first):
        lanes[i] = lane
    offset = max(first, default=-1) + 1
    for i, lane in zip(secondary, nesting_lanes([starts[i] for i in secondary], [ends[i] for i in secondary])):
        lanes[i] = offset + lane
    return lanes


def _parser_zero_ns(events: list[dict[str, Any]], is_object: bool) -> int:
    """Where perfbench's parser puts start_us 0 in the export: the first event it reads (chrome.py,
    trace_view.py)."""
    if is_object:
        starts = [round(e["ts"] * 1000) for e in events
                  if e.get("ph") == "X" and e.get("cat") in HOST_CATEGORIES | DEVICE_CATEGORIES]
        return min(starts, default=0)
    view = read_trace_view(events)
    return min(view.host_start_ns + [t.start_ns for t in view.tasks], default=0)


def events_to_chrome(events: pd.DataFrame) -> tuple[dict[str, Any], ExportSummary]:
    """A Kineto-style trace of an events table (see the module docstring)."""
    out: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    ranks = sorted(int(r) for r in events["rank"].unique())
    for pid_index, rank in enumerate(ranks):
        host_pid, device_pid = 2 * pid_index, 2 * pid_index + 1
        meta += [{"ph": "M", "name": "process_name", "pid": host_pid, "tid": 0, "args": {"name": f"rank {rank} host"}},
                 {"ph": "M", "name": "process_name", "pid": device_pid, "tid": 0,
                  "args": {"name": f"rank {rank} device"}}]
        of_rank = events[events["rank"] == rank]
        for side, pid in (("host", host_pid), ("device", device_pid)):
            rows = of_rank[of_rank["side"] == side]
            for stream_index, (stream, group) in enumerate(rows.groupby("stream", sort=True, dropna=False)):
                starts = [round(v * 1000) for v in group["start_us"].tolist()]
                ends = [s + round(d * 1000) for s, d in zip(starts, group["dur_us"].tolist())]
                lanes = (disjoint_lanes if side == "host" else nesting_lanes)(starts, ends)
                for lane in sorted(set(lanes)):
                    tid = stream_index * 100 + lane
                    label = f"{'thread' if side == 'host' else 'stream'} {stream}" + (f" (lane {lane})" if lane else "")
                    meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
                for row, start, lane in zip(group.itertuples(index=False), starts, lanes):
                    args: dict[str, Any] = {"stream": str(stream)} if side == "device" else {}
                    for key in ("phase", "layer", "layer_type", "module", "step", "category"):
                        value = getattr(row, key)
                        if value is not None and not pd.isna(value):
                            args[key] = value if isinstance(value, str) else int(value)
                    out.append({"ph": "X", "cat": "kernel" if side == "device" else "cpu_op", "name": row.name,
                                "pid": pid, "tid": stream_index * 100 + lane, "ts": _us(start),
                                "dur": round(float(row.dur_us), 3), "args": args})
    out.sort(key=lambda e: (e["ts"], -e["dur"]))
    data = {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": meta + out,
            "perfbench": {"note": "host slices are each op's self time at its start (not a call tree)"}}
    if len(ranks) == 1:
        data["distributedInfo"] = {"rank": ranks[0]}
    return data, ExportSummary(out="", route="events", events=len(meta) + len(out))


def _windows(events: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """First start and last end of the rows of each `keys` group (a missing step is a group of its own)."""
    table = events.assign(end_us=events["start_us"] + events["dur_us"])
    return (table.groupby(keys, sort=True, dropna=False)
            .agg(start_us=("start_us", "min"), end_us=("end_us", "max")).reset_index())


def _step_text(step: Any) -> str:
    return "" if pd.isna(step) else f" step {int(step)}"


def perfbench_tracks(events: pd.DataFrame, findings: list[Finding], zero_ns: int,
                     used_pids: set[Any], emulation: str | None = None) -> list[dict[str, Any]]:
    """perfbench's processes (one per rank): phase, decode step and layer slices from the events' annotations
    (host rows where they carry them, else device rows), each track made to nest; the findings as instant
    events at the trace's start on rank 0's process."""
    ranks = sorted(int(r) for r in events["rank"].unique()) or [0]
    pids = _free_pids(used_pids, len(ranks))
    out: list[dict[str, Any]] = []
    for rank, pid in zip(ranks, pids):
        label = f"perfbench (rank {rank})" + (f", {emulation}: CPU timings" if emulation else "")
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        out += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
                for tid, name in enumerate(TRACKS, start=1)]
        of_rank = events[events["rank"] == rank]
        host = of_rank[(of_rank["side"] == "host") & of_rank["phase"].notna()]
        source = host if len(host) else of_rank[of_rank["side"] == "device"]
        decode = source[source["phase"] == "decode"]
        specs = [(1, source, ["phase", "step"], lambda r: f"{r.phase}" + _step_text(r.step)),
                 (2, decode[decode["step"].notna()], ["step"], lambda r: f"decode step {int(r.step)}"),
                 (3, source[source["layer"].notna()], ["phase", "step", "layer"],
                  lambda r: f"layer {int(r.layer)} ({r.phase}{_step_text(r.step)})")]
        for tid, table, keys, name in specs:
            if table.empty:
                continue
            windows = _windows(table, keys)
            starts = [round(v * 1000) + zero_ns for v in windows["start_us"].tolist()]
            ends = [round(v * 1000) + zero_ns for v in windows["end_us"].tolist()]
            lanes = nesting_lanes(starts, ends)
            for row, start, end, lane in zip(windows.itertuples(index=False), starts, ends, lanes):
                out.append({"ph": "X", "cat": "perfbench", "name": name(row), "pid": pid, "tid": tid + 10 * lane,
                            "ts": _us(start), "dur": _us(end - start)})
            for lane in sorted(set(lanes) - {0}):
                out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid + 10 * lane,
                            "args": {"name": f"{TRACKS[tid - 1]} (lane {lane})"}})
    for finding in findings:
        out.append({"ph": "i", "s": "p", "cat": "perfbench", "name": f"{finding.severity}: {finding.rule}",
                    "pid": pids[0], "tid": 4, "ts": 0.0,
                    "args": {"message": finding.message, "where": finding.where}})
    return out


def _merge(data: Any, extra: list[dict[str, Any]]) -> Any:
    """`data` with `extra` added: metadata first, then every timed event by ts (a parent before its children)."""
    events = [*(data["traceEvents"] if isinstance(data, dict) else data), *extra]
    untimed = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    timed = sorted((e for e in events if not (e.get("ph") == "M" or "ts" not in e)),
                   key=lambda e: (e["ts"], -float(e.get("dur", 0))))
    return {**data, "traceEvents": untimed + timed} if isinstance(data, dict) else untimed + timed


def check_export_name(out: Path) -> None:
    """UserError unless `out` is named *.json.gz (the export is always gzip-compressed)."""
    if not out.name.endswith(".json.gz"):
        raise UserError(f"{out}: the export is gzip-compressed JSON; name it *.json.gz")


def export_trace(path: Path | str, out: Path | str, findings: list[Finding] | None = None,
                 prefer: str | None = None, trace: LoadedTrace | None = None,
                 emulation: str | None = None) -> ExportSummary:
    """Write the normalized trace of `path` to `out` (gzip) and say what changed; UserError for a path that is
    not a trace, or (a bug) an export that breaks the format rules. `trace`: `path` already loaded;
    `emulation`: the NPU emulator's label ("emulated npu (910b)"), shown on perfbench's processes and at the
    top level (`perfbench.emulation`)."""
    path, out = Path(path), Path(out)
    check_export_name(out)
    trace = trace if trace is not None else load_trace(path, prefer)
    if path.is_file() and path.name.endswith((".json", ".json.gz")):
        data, summary, zero = normalize_chrome(read_trace_json(path))
    else:
        (data, summary), zero = events_to_chrome(trace.events), 0
    source_events = data["traceEvents"] if isinstance(data, dict) else data
    extra = perfbench_tracks(trace.events, findings or [], zero, _used_pids(source_events), emulation)
    data = _merge(data, extra)
    if emulation and isinstance(data, dict):
        data["perfbench"] = {**data.get("perfbench", {}), "emulation": f"{emulation}: timings are CPU timings"}
    problems = format_problems(data)
    if problems:
        raise UserError(f"{out}: the export breaks the chrome trace format ({problems[0]}); please report it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    # orjson and a middle compression level: the stdlib's streaming encoder and gzip -9 took ~20 s for one run's
    # 50 MB trace on a 2-core VM, more than the run's timing itself
    tmp.write_bytes(gzip.compress(orjson.dumps(data), compresslevel=5))
    tmp.replace(out)
    return summary.model_copy(update={"out": str(out), "perfbench_events": len(extra)})
