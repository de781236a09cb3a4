"""Ascend profiler folders (torch_npu `*_ascend_pt`) -> events and the profiler's own summaries.

Accepted paths: a `*_ascend_pt` folder, its `ASCEND_PROFILER_OUTPUT` folder (or any folder holding
kernel_details.csv / step_trace_time.csv / trace_view.json, or the `export_type=db` file
ascend_pytorch_profiler_{rank}.db), or a parent holding one such folder per rank. A rank with both exports is
read from its text files unless the .db is preferred (`prefer="db"`, what a run that asked for it does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from perfbench.bounded_files import METADATA_BYTES, csv_header, load_json
from perfbench.errors import UserError
from perfbench.profiling.ascend_db import DB_GLOB, read_ascend_db
from perfbench.profiling.ascend_kernels import KernelDetails, kernel_events, read_kernel_details
from perfbench.profiling.chrome import gc_paused, read_trace_json
from perfbench.profiling.communication import read_communication, read_communication_matrix
from perfbench.profiling.events import SkippedEvents, concat_events, empty_events
from perfbench.profiling.trace_view import TraceView, host_events, read_trace_view, task_events

OUTPUT_FOLDER = "ASCEND_PROFILER_OUTPUT"
OUTPUT_FILES = ("kernel_details.csv", "step_trace_time.csv", "trace_view.json", "op_statistic.csv")
STEP_TRACE_COLUMNS = {
    "Device_id": "device_id", "Step": "step", "Computing": "computing_us",
    "Communication(Not Overlapped)": "communication_not_overlapped_us", "Overlapped": "overlapped_us",
    "Communication": "communication_us", "Free": "free_us", "Stage": "stage_us", "Bubble": "bubble_us",
    "Communication(Not Overlapped and Exclude Receive)": "communication_not_overlapped_exclude_receive_us",
    "Preparing": "preparing_us",
}
OP_STATISTIC_COLUMNS = {
    "Device_id": "device_id", "Model Name": "model_name", "OP Type": "op_type", "Core Type": "core_type",
    "Count": "count", "Total Time(us)": "total_us", "Min Time(us)": "min_us", "Avg Time(us)": "mean_us",
    "Max Time(us)": "max_us", "Ratio(%)": "share_pct",
}
TEXT_CSV_COLUMNS = ("model_name", "op_type", "core_type")  # the others of those two CSVs are numbers
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_PROFILER_INFO = re.compile(r"^profiler_info_(\d+)\.json$")


@dataclass
class AscendProfile:
    """Everything read from one Ascend profiler folder (all ranks).

    events: the events table: device kernels (kernel_details.csv, else trace_view.json; context from
        trace_view.json flows) and the host cpu_ops of trace_view.json.
    kernels: kernel_details.csv rows under canonical headers + `start_ns` and `rank`.
    op_statistic, step_trace: those CSVs with unit-named columns (`total_us`, `computing_us`, ...) + `rank`.
    communication: one row per collective/p2p op of communication.json (times converted to µs) + `rank`.
    communication_links: per op and link type (RDMA, SDMA and its HCCS/PCIE/SIO parts): size, time, bandwidth.
    communication_matrix: communication_matrix.json, one row per (step, op group, src-dst link).
    missing_columns: expected kernel_details columns that were absent ("Stream ID (rank 0)").
    notes: one line per thing the user should know (missing files, Level0 N/A types, unattributed kernels).
    level: profiler level from profiler_info ("Level0/1/2"), else a guess from the columns, else "unknown".
    """

    events: pd.DataFrame
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    op_statistic: pd.DataFrame = field(default_factory=pd.DataFrame)
    step_trace: pd.DataFrame = field(default_factory=pd.DataFrame)
    communication: pd.DataFrame = field(default_factory=pd.DataFrame)
    communication_links: pd.DataFrame = field(default_factory=pd.DataFrame)
    communication_matrix: pd.DataFrame = field(default_factory=pd.DataFrame)
    missing_columns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    level: str = "unknown"
    ranks: list[int] = field(default_factory=list)


@dataclass
class _RankFolder:
    rank: int
    root: Path  # the *_ascend_pt folder (or the output folder itself when it has no parent run folder)
    output: Path  # where kernel_details.csv & co. are
    numbered: bool = False  # True: no usable rank in profiler_info or the folder name, numbered by order


def _has_outputs(folder: Path) -> bool:
    return any((folder / name).is_file() for name in OUTPUT_FILES) or _db_file(folder) is not None


def _db_file(folder: Path, rank: int | None = None) -> Path | None:
    """The folder's ascend_pytorch_profiler .db (the one named for `rank` when it holds several), or None."""
    found = sorted(p for p in folder.glob(DB_GLOB) if p.is_file())
    named = [p for p in found if rank is not None and p.stem.endswith(f"_{rank}")]
    return next(iter(named or found), None)


def _rank_of(root: Path) -> int | None:
    for info in sorted(root.glob("profiler_info*.json")):
        match = _PROFILER_INFO.match(info.name)
        if match:
            return int(match.group(1))
        rank_id = _profiler_info(info).get("rank_id")
        if rank_id in (None, ""):
            continue
        if isinstance(rank_id, bool) or not isinstance(rank_id, (int, str)) or not str(rank_id).lstrip("-").isdigit():
            raise UserError(f"{info}: rank_id: expected an integer, got {_shown(rank_id)}")
        return int(rank_id)
    match = _RANK_IN_NAME.search(root.name)
    return int(match.group(1)) if match else None


def _single(folder: Path) -> _RankFolder | None:
    if (folder / OUTPUT_FOLDER).is_dir():
        return _RankFolder(-1, folder, folder / OUTPUT_FOLDER)
    if _has_outputs(folder):
        root = folder.parent if folder.name == OUTPUT_FOLDER else folder
        return _RankFolder(-1, root, folder)
    return None


class NotAnAscendFolder(UserError):
    """A folder without Ascend profiler output (a caller may try other formats), unlike a broken one."""


def find_rank_folders(path: Path) -> list[_RankFolder]:
    """The per-rank folders under `path` (see module docstring); UserError if there is none."""
    if not path.is_dir():
        raise NotAnAscendFolder(f"{path}: not a folder; expected an Ascend profiler folder (*_ascend_pt)")
    single = _single(path)
    if single:
        found = [single]
    else:
        found = [f for f in (_single(c) for c in sorted(path.iterdir()) if c.is_dir()) if f is not None]
    if not found:
        raise NotAnAscendFolder(f"{path}: no Ascend profiler output ({OUTPUT_FOLDER}/, {', '.join(OUTPUT_FILES)} or "
                        f"{DB_GLOB})")
    used: set[int] = set()
    for folder in found:
        rank = _rank_of(folder.root)
        folder.rank = rank if rank is not None and rank not in used else -1
        used.add(folder.rank)
    for folder in found:  # folders without a readable rank get the lowest free numbers, in name order
        if folder.rank < 0:
            folder.rank = next(r for r in range(len(found) + len(used)) if r not in used)
            folder.numbered = len(found) > 1
            used.add(folder.rank)
    return sorted(found, key=lambda f: f.rank)


def _profiler_level(root: Path) -> str | None:
    for info in sorted(root.glob("profiler_info*.json")):
        config = _profiler_info(info).get("config")
        experimental = config.get("experimental_config") if isinstance(config, dict) else None
        level = experimental.get("_profiler_level") if isinstance(experimental, dict) else None
        if level is None:
            continue
        if not isinstance(level, str):
            raise UserError(f"{info}: config.experimental_config._profiler_level: expected a string, got "
                            f"{_shown(level)}")
        if level:
            return level
    return None


def _profiler_info(path: Path) -> dict[str, Any]:
    """profiler_info*.json, bounded (perfbench/bounded_files.py); another tool's JSON (not an object) is {}."""
    data = load_json(path, METADATA_BYTES)
    return data if isinstance(data, dict) else {}


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _guess_level(details: KernelDetails) -> str:
    if "Type" in details.all_na_columns or "Accelerator Core" in details.all_na_columns:
        return "Level0"
    if any(c.startswith(("aic_", "aiv_", "aicore_time")) for c in details.table.columns):
        return "Level1+"
    return "unknown"


def _read_csv(path: Path, columns: dict[str, str], rank: int) -> pd.DataFrame:
    """step_trace_time.csv / op_statistic.csv with unit-named columns; a cell of a numeric column that is no number
    is a one-line UserError naming the file, the line and the column (never a silent 0 or a text column)."""
    csv_header(path)  # size cap; duplicate header names refused before pandas (quadratic in them)
    try:
        table = pd.read_csv(path, encoding="utf-8-sig", na_values=["N/A"], dtype=str, keep_default_na=False)
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read it as CSV ({str(err).splitlines()[0]})") from None
    table.columns = [c.strip() for c in table.columns]
    for column in table.columns:
        if columns.get(column) in TEXT_CSV_COLUMNS:
            continue
        text = table[column].str.strip().replace({"N/A": "", "NA": ""})
        numbers = pd.to_numeric(text.replace("", None), errors="coerce")
        bad = numbers.isna() & (text != "")
        if bad.any() and column in columns:
            line = int(bad.to_numpy().argmax()) + 2  # line 1: the header
            raise UserError(f"{path}: line {line}: {column}: expected a number, got {text[bad].iloc[0][:40]!r}")
        if not bad.any():
            table[column] = numbers
    table.columns = [columns.get(c, re.sub(r"\W+", "_", c).strip("_").lower()) for c in table.columns]
    table.insert(0, "rank", rank)
    return table


def _read_view(path: Path, tag: str, notes: list[str]) -> TraceView:
    """A trace_view.json's events; skipped events become a note, a malformed or wholly unusable file a
    one-line UserError naming it."""
    skipped = SkippedEvents()
    with gc_paused():
        data = read_trace_json(path)
        try:
            view = read_trace_view(data, skipped)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
            raise UserError(f"{path}: malformed trace_view.json ({type(err).__name__}: {err})") from None
    if skipped.total and not view.tasks and not view.host_names:
        raise UserError(f"{path}: no usable trace event; skipped {skipped.summary()}")
    notes += [f"{tag}: {note}" for note in skipped.notes(path)]
    return view


def _read_db(path: Path, tag: str, notes: list[str]) -> tuple[KernelDetails, TraceView, str]:
    """The .db's kernel table and host view, as kernel_details.csv and trace_view.json would give them, and the
    level its contents suggest."""
    data = read_ascend_db(path)
    notes += [f"{tag}: {note.replace(' event', ' row', 1)}" for note in data.details.skipped.notes(path)]
    if not data.has_host:
        notes.append(f"{tag}: {path.name} has no PYTORCH_API table: kernels have no phase/layer/module context")
    elif data.view.tasks and data.view.attributed < len(data.view.tasks):
        notes.append(f"{tag}: {len(data.view.tasks) - data.view.attributed} of {len(data.view.tasks)} device "
                     f"tasks in {path.name} have no CONNECTION_IDS link to a host op")
    return data.details, data.view, data.level_hint


def parse_ascend_dir(path: Path | str, prefer: str | None = None) -> AscendProfile:
    """Parse an Ascend profiler folder (one rank or a parent of several rank folders) into an AscendProfile.

    `prefer="db"`: a rank folder holding the .db export is read from it even when text files are there too
    (a note says when a rank has none); otherwise text files first, the .db where they are missing.
    Events have start_us relative to the first kernel or host op over all ranks, durations in µs.
    """
    path = Path(path)
    folders = find_rank_folders(path)
    profile = AscendProfile(events=empty_events(), ranks=[f.rank for f in folders])
    parsed: list[tuple[_RankFolder, KernelDetails, dict, dict]] = []
    views: list[tuple[_RankFolder, TraceView]] = []  # ranks with a trace_view.json but no kernel_details.csv
    host_views: list[tuple[_RankFolder, TraceView]] = []  # every trace_view.json: its host ops
    kernels, op_stats, step_traces, comms, links, matrices = [], [], [], [], [], []
    levels: list[str] = []
    for folder in folders:
        out, tag = folder.output, f"rank {folder.rank}"
        if folder.numbered:
            profile.notes.append(f"{tag}: {folder.root.name} names no rank (or repeats one); numbered by order")
        level = _profiler_level(folder.root)
        has_kernels, has_trace = (out / "kernel_details.csv").is_file(), (out / "trace_view.json").is_file()
        db = _db_file(out, folder.rank)
        if prefer == "db" and db is None:
            profile.notes.append(f"{tag}: the .db export was asked for but {out} has no {DB_GLOB}; read the "
                                 "text export")
        from_db = db is not None and (prefer == "db" or (not has_kernels and not has_trace))
        if db is not None and from_db:
            details, view, level_hint = _read_db(db, tag, profile.notes)
            levels.append(level or level_hint)
            parsed.append((folder, details, view.scope_by_start(), view.launch_by_start()))
            host_views.append((folder, view))
            kernels.append(details.table.assign(rank=folder.rank))
        elif not has_kernels and not has_trace:
            profile.notes.append(f"{tag}: no kernel_details.csv or trace_view.json in {out}: no kernel events")
        elif not has_trace:
            profile.notes.append(f"{tag}: no trace_view.json: kernels have no phase/layer/module context")
        if (out / "step_trace_time.csv").is_file():
            step_traces.append(_read_csv(out / "step_trace_time.csv", STEP_TRACE_COLUMNS, folder.rank))
        if (out / "op_statistic.csv").is_file():
            op_stats.append(_read_csv(out / "op_statistic.csv", OP_STATISTIC_COLUMNS, folder.rank))
        if (out / "communication.json").is_file():
            ops, op_links = read_communication(out / "communication.json", folder.rank)
            comms.append(ops)
            links.append(op_links)
        if (out / "communication_matrix.json").is_file():
            matrices.append(read_communication_matrix(out / "communication_matrix.json", folder.rank))
        if from_db:
            continue
        if not has_kernels:
            levels.append(level or "unknown")
            if has_trace:
                views.append((folder, _read_view(out / "trace_view.json", tag, profile.notes)))
                host_views.append(views[-1])
                profile.notes.append(f"{tag}: kernels read from trace_view.json (no op types: "
                                     "categories come from kernel names)")
            continue
        details = read_kernel_details(out / "kernel_details.csv")
        levels.append(level or _guess_level(details))
        profile.missing_columns += [f"{c} ({tag})" for c in details.missing_columns]
        for col in details.all_na_columns:
            profile.notes.append(f"{tag}: kernel_details.csv `{col}` is N/A on every row (Level0?)"
                                 + ("; categories come from kernel names" if col == "Type" else ""))
        profile.notes += [f"{tag}: {note.replace(' event', ' kernel row', 1)}"
                          for note in details.skipped.notes(details.path)]
        scopes: dict = {}
        launches: dict = {}
        if has_trace:
            view = _read_view(out / "trace_view.json", tag, profile.notes)
            scopes, launches = view.scope_by_start(), view.launch_by_start()
            host_views.append((folder, view))
            if view.tasks and view.attributed < len(view.tasks):
                missing = len(view.tasks) - view.attributed
                profile.notes.append(f"{tag}: {missing} of {len(view.tasks)} device tasks in trace_view.json "
                                     "have no async_npu flow to a host op")
        parsed.append((folder, details, scopes, launches))
        kernels.append(details.table.assign(rank=folder.rank))
    firsts = [int(d.table["start_ns"].min()) for _, d, _, _ in parsed if len(d.table)]
    firsts += [min(t.start_ns for t in v.tasks) for _, v in views if v.tasks]
    firsts += [min(v.host_start_ns) for _, v in host_views if v.host_start_ns]
    origin = min(firsts, default=0)
    profile.events = concat_events([kernel_events(d, f.rank, origin, s, la) for f, d, s, la in parsed]
                                   + [task_events(v, f.rank, origin) for f, v in views]
                                   + [host_events(v, f.rank, origin) for f, v in host_views])
    profile.kernels = pd.concat(kernels, ignore_index=True) if kernels else pd.DataFrame()
    profile.op_statistic = pd.concat(op_stats, ignore_index=True) if op_stats else pd.DataFrame()
    profile.step_trace = pd.concat(step_traces, ignore_index=True) if step_traces else pd.DataFrame()
    profile.communication = pd.concat(comms, ignore_index=True) if comms else pd.DataFrame()
    profile.communication_links = pd.concat(links, ignore_index=True) if links else pd.DataFrame()
    profile.communication_matrix = pd.concat(matrices, ignore_index=True) if matrices else pd.DataFrame()
    known = sorted(set(levels) - {"unknown"})
    profile.level = "/".join(known) if known else "unknown"
    return profile
