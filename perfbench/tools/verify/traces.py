"""Trimmed copies of profiler output for a verify bundle: the longest events of each chrome trace, small CSVs
whole and large ones cut, so a bundle stays small enough to attach anywhere.

A trimmed trace still parses (`perfbench trace` reads it); it holds the `MAX_EVENTS` longest complete events
plus every metadata event, so the phase, step and layer annotations (long events) survive and the many short
ops go first.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

MAX_EVENTS = 20_000
MAX_CSV_ROWS = 5_000
MAX_OTHER_BYTES = 256 * 1024


def _trim_events(events: list[Any], max_events: int) -> tuple[list[Any], int]:
    """(kept events in their original order, how many were dropped)."""
    timed = [i for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") == "X"]
    if len(timed) <= max_events:
        return events, 0
    dropped = set(sorted(timed, key=lambda i: -float(events[i].get("dur") or 0))[max_events:])
    kept = [e for i, e in enumerate(events) if i not in dropped]
    return kept, len(timed) - max_events


def _read_json(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def trim_trace_file(src: Path, dest: Path, max_events: int = MAX_EVENTS) -> str:
    """Write `src` (a chrome trace: an object with traceEvents, or a list of events) trimmed and gzipped to
    `dest` (.json.gz); returns a note on what was dropped ("" when nothing was)."""
    trace = _read_json(src)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    kept, dropped = _trim_events(events if isinstance(events, list) else [], max_events)
    if isinstance(trace, dict):
        trace = {**trace, "traceEvents": kept}
    else:
        trace = kept
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gzip.compress(json.dumps(trace).encode(), compresslevel=6))  # dumps: the C encoder
    return f"{src.name}: kept the {max_events} longest of {max_events + dropped} events" if dropped else ""


def _copy_csv(src: Path, dest: Path) -> str:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with src.open(errors="replace") as fin, dest.open("w") as fout:
        for n, line in enumerate(fin):
            if n > MAX_CSV_ROWS:
                return f"{src.name}: cut after {MAX_CSV_ROWS} rows"
            fout.write(line)
    return ""


def trim_folder(src: Path, dest: Path) -> list[str]:
    """Every file under `src` into `dest` (same relative paths): traces trimmed and gzipped, CSVs cut at
    MAX_CSV_ROWS rows, other files copied up to MAX_OTHER_BYTES (larger ones left out). Returns the notes."""
    notes = []
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        name = path.name
        if name.endswith((".json", ".json.gz")):
            target = dest / (str(rel) if name.endswith(".gz") else f"{rel}.gz")
            try:
                note = trim_trace_file(path, target)
            except (OSError, ValueError, AttributeError):  # not a chrome trace: copied as is, if small
                note = _copy_small(path, dest / rel)
        elif name.endswith(".csv"):
            note = _copy_csv(path, dest / rel)
        else:
            note = _copy_small(path, dest / rel)
        if note:
            notes.append(note)
    return notes


def _copy_small(src: Path, dest: Path) -> str:
    if src.stat().st_size > MAX_OTHER_BYTES:
        return f"{src.name}: left out ({src.stat().st_size} bytes)"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return ""
