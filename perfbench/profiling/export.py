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
modified, and an export onto the source itself (the same file by any path, symlink or hard link) is refused.

A pid or tid that is neither text nor an integer below 2^53 (1.5, true, null, 2^70, which a JSON reader reads as
a double) is renumbered: each distinct value of a process gets an unused integer, named after the value it had
(viewers group tracks by these ids, and `true` would otherwise merge with tid 1). The export is written as a
stream (gzip, one batch of events at a time), never as one JSON text in memory.
"""

from __future__ import annotations

import gzip
import heapq
import os
from collections.abc import Iterable, Iterator, Mapping
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
from perfbench.profiling.trace_format import ID_PHASES, MAX_SAFE_ID, format_problems
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
    track_ids: int = 0  # distinct pids / tids renumbered (not text, nor an integer below 2^53)
    perfbench_events: int = 0

    def line(self) -> str:
        source = "the source trace" if self.route == "chrome" else "the events table"
        renumbered = f"; {self.track_ids} odd pids/tids renumbered" if self.track_ids else ""
        return (f"export: {self.out} ({self.events} events from {source}; {self.flow_ids} flow ids renumbered"
                f"{renumbered}; "
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


class _TidPool:
    """The integer tids of one process, and fresh ones: the preferred tid when it is free, else the next free one
    counting down from 2^31 - 1 (viewers hold tids as int32). The cursor only moves down, so handing out k tids
    costs O(k + tids taken), however many lanes a track needs."""

    def __init__(self) -> None:
        self.taken: set[Any] = set()
        self._cursor = 2**31 - 1

    def fresh(self, preferred: int | None = None) -> int:
        if preferred is not None and 0 <= preferred < 2**31 and preferred not in self.taken:
            self.taken.add(preferred)
            return preferred
        while self._cursor in self.taken:
            self._cursor -= 1
        self.taken.add(self._cursor)
        return self._cursor


def _lane_tid(tid: Any, lane: int, pool: _TidPool) -> Any:
    """A tid for an extra lane of `tid`: an unused integer when tid is one, else `"<tid> lane N"`."""
    if isinstance(tid, int):
        return pool.fresh(tid * 100 + lane)
    name = f"{tid} lane {lane}"
    pool.taken.add(name)
    return name


def _is_track_id(value: Any) -> bool:
    """A pid / tid viewers key tracks by without loss: text, or an integer (not a bool) below 2^53 in size."""
    return isinstance(value, str) or (type(value) is int and -MAX_SAFE_ID < value < MAX_SAFE_ID)


def _shown(value: Any) -> str:
    """A pid / tid as the trace wrote it (JSON text: null, true, 1.5), for the name of its renumbered track."""
    return orjson.dumps(_as_double(value)).decode()[:40]


def _renumber_track_ids(events: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """Give every pid / tid that is not `_is_track_id` an unused integer (per process for tids), in place; returns
    how many distinct values were renumbered and a process_name / thread_name for each that names the value it
    had, where the trace names none. Keys carry the value's type: true and 1, 1.0 and 1 are different tracks."""
    odd = [e for e in events if not (_is_track_id(e.get("pid", 0)) and _is_track_id(e.get("tid", 0)))]
    if not odd:
        return 0, []
    added: list[dict[str, Any]] = []
    pids = _TidPool()
    pids.taken.update(e.get("pid") for e in events if _is_track_id(e.get("pid", 0)))
    new_pid: dict[tuple[str, str], int] = {}
    for event in odd:
        if "pid" in event and not _is_track_id(event["pid"]):
            pid_key = (type(event["pid"]).__name__, repr(event["pid"]))
            if pid_key not in new_pid:
                new_pid[pid_key] = pids.fresh()
                added.append({"ph": "M", "name": "process_name", "pid": new_pid[pid_key], "tid": 0,
                              "args": {"name": f"pid {_shown(event['pid'])} (renumbered)"}})
            event["pid"] = new_pid[pid_key]
    tids: dict[Any, _TidPool] = {}
    for event in events:
        if _is_track_id(event.get("tid", 0)):
            tids.setdefault(event.get("pid"), _TidPool()).taken.add(event.get("tid"))
    new_tid: dict[tuple[Any, str, str], int] = {}
    for event in odd:
        if "tid" in event and not _is_track_id(event["tid"]):
            key = (event.get("pid"), type(event["tid"]).__name__, repr(event["tid"]))
            if key not in new_tid:
                new_tid[key] = tids.setdefault(event.get("pid"), _TidPool()).fresh()
                added.append({"ph": "M", "name": "thread_name", "pid": event.get("pid"), "tid": new_tid[key],
                              "args": {"name": f"tid {_shown(event['tid'])} (renumbered)"}})
            event["tid"] = new_tid[key]
    named = {(e.get("name"), e.get("pid"), e.get("tid")) for e in events if e.get("ph") == "M"}
    added = [m for m in added if (m["name"], m["pid"], m["tid"]) not in named]  # the trace's own name stays
    return len(new_pid) + len(new_tid), added


def normalize_chrome(data: Any) -> tuple[Any, ExportSummary, int]:
    """The normalized copy of a parsed chrome trace (object or array) and what changed; also the ns (from the
    export's zero) at which perfbench's parser will put its own zero, so perfbench's tracks line up. The events
    of `data` are changed in place and reused (a copy of a million events costs a gigabyte)."""
    is_object = isinstance(data, dict)
    raw = data["traceEvents"] if is_object else data
    dropped = 0
    untimed: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for event in raw:
        if not isinstance(event, dict):
            dropped += 1
            continue
        if event.get("ph") == "M" or "ts" not in event:
            untimed.append(event)
            continue
        dur = event.get("dur", 0) if event.get("ph") == "X" else 0
        if time_problem(event.get("ts"), dur) is not None:
            dropped += 1
            continue
        kept.append(event)
    renumbered, names = _renumber_track_ids(untimed + kept)
    untimed += names
    timed = [(event, _ns(event["ts"])) for event in kept]
    del kept
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
                              dropped_events=dropped, flow_ids=len(ids), track_ids=renumbered), zero


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
    pools: dict[Any, _TidPool] = {}
    for event in untimed:
        pools.setdefault(event.get("pid"), _TidPool()).taken.add(event.get("tid"))
    for event, _ in timed:
        pools.setdefault(event.get("pid"), _TidPool()).taken.add(event.get("tid"))
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
                lane_tids[lane] = _lane_tid(tid, lane, pools.setdefault(pid, _TidPool()))
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
            next_free = 0  # a stream's lanes take tids 100 * its index + lane, or after the lanes before it
            for stream_index, (stream, group) in enumerate(rows.groupby("stream", sort=True, dropna=False)):
                starts = [round(v * 1000) for v in group["start_us"].tolist()]
                ends = [s + round(d * 1000) for s, d in zip(starts, group["dur_us"].tolist())]
                lanes = (disjoint_lanes if side == "host" else nesting_lanes)(starts, ends)
                base = max(stream_index * 100, next_free)
                next_free = base + max(lanes, default=0) + 1
                for lane in sorted(set(lanes)):
                    tid = base + lane
                    label = f"{'thread' if side == 'host' else 'stream'} {stream}" + (f" (lane {lane})" if lane else "")
                    meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
                for row, start, lane in zip(group.itertuples(index=False), starts, lanes):
                    args: dict[str, Any] = {"stream": str(stream)} if side == "device" else {}
                    for key in ("phase", "layer", "layer_type", "module", "step", "category"):
                        value = getattr(row, key)
                        if value is not None and not pd.isna(value):
                            args[key] = value if isinstance(value, str) else int(value)
                    out.append({"ph": "X", "cat": "kernel" if side == "device" else "cpu_op", "name": row.name,
                                "pid": pid, "tid": base + lane, "ts": _us(start),
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


def _sort_key(event: Mapping[str, Any]) -> tuple[float, float]:
    return event["ts"], -float(event.get("dur", 0))


def _merged_events(events: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events` (metadata first, then timed events by `_sort_key`, as `normalize_chrome` and `events_to_chrome`
    leave them) with `extra` merged in: metadata first, then every timed event by ts (a parent before its
    children). A merge of sorted runs, not a sort of everything again."""
    def timed(event: Mapping[str, Any]) -> bool:
        return not (event.get("ph") == "M" or "ts" not in event)

    split = next((i for i, e in enumerate(events) if timed(e)), len(events))
    extra_timed = sorted((e for e in extra if timed(e)), key=_sort_key)
    return [*events[:split], *(e for e in extra if not timed(e)),
            *heapq.merge(events[split:], extra_timed, key=_sort_key)]


def _as_double(value: Any) -> Any:
    """`value` with every integer beyond 64 bits made a float (as a JSON reader would read it back): orjson
    refuses to write those, and the stdlib reader keeps them exact when a trace holds NaN."""
    if isinstance(value, dict):
        return {k: _as_double(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_double(v) for v in value]
    if type(value) is int and not -2**63 <= value < 2**64:
        return float(value)
    return value


def _json_batches(events: list[dict[str, Any]], batch: int = 20_000) -> Iterator[bytes]:
    """The events as JSON array members (no brackets), `batch` at a time: one orjson call per batch."""
    for begin in range(0, len(events), batch):
        part = events[begin:begin + batch]
        try:
            text = orjson.dumps(part)
        except orjson.JSONEncodeError:  # rare: an integer beyond 64 bits somewhere in the batch
            text = orjson.dumps(_as_double(part))
        yield (b"," if begin else b"") + text[1:-1]


def _write_trace(out: Path, top: Any, events: list[dict[str, Any]]) -> None:
    """Write the trace (`top`: the top-level object, whose traceEvents are `events`; or None for an event array)
    to `out` through gzip, one batch at a time, via a temporary file renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        # orjson and a middle compression level: the stdlib's streaming encoder and gzip -9 took ~20 s for one
        # run's 50 MB trace on a 2-core VM, more than the run's timing itself
        with gzip.open(tmp, "wb", compresslevel=5) as handle:
            handle.write(b'{"traceEvents":[' if isinstance(top, dict) else b"[")
            for chunk in _json_batches(events):
                handle.write(chunk)
            handle.write(b"]")
            if isinstance(top, dict):
                rest = {k: v for k, v in top.items() if k != "traceEvents"}
                handle.write((b"," + orjson.dumps(_as_double(rest))[1:-1] if rest else b"") + b"}")
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def check_not_the_source(source: Path, out: Path) -> None:
    """UserError when `out` is the trace `source` itself, by any path (a symlink, `..`, a hard link): the export
    would replace the only copy of what it was made from."""
    same = source.resolve() == out.resolve()
    if not same and out.exists() and source.exists():
        try:
            same = os.path.samefile(source, out)
        except OSError:
            same = False
    if same:
        raise UserError(f"{out}: is the trace being exported ({source}); give --export another path")


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
    check_not_the_source(path, out)
    trace = trace if trace is not None else load_trace(path, prefer)
    if path.is_file() and path.name.endswith((".json", ".json.gz")):
        data, summary, zero = normalize_chrome(read_trace_json(path))
    else:
        (data, summary), zero = events_to_chrome(trace.events), 0
    source_events = data["traceEvents"] if isinstance(data, dict) else data
    extra = perfbench_tracks(trace.events, findings or [], zero, _used_pids(source_events), emulation)
    events = _merged_events(source_events, extra)
    del source_events
    if isinstance(data, dict):
        data["traceEvents"] = events
        if emulation:
            data["perfbench"] = {**data.get("perfbench", {}), "emulation": f"{emulation}: timings are CPU timings"}
    problems = format_problems(events)
    if problems:
        raise UserError(f"{out}: the export breaks the chrome trace format ({problems[0]}); please report it")
    _write_trace(out, data if isinstance(data, dict) else None, events)
    return summary.model_copy(update={"out": str(out), "perfbench_events": len(extra)})
