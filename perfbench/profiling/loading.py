"""Open whatever trace the user points at: chrome trace file, Ascend profiler folder, folder of traces."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfbench.errors import UserError
from perfbench.profiling.ascend import NotAnAscendFolder, find_rank_folders, parse_ascend_dir
from perfbench.profiling.ascend_db import DB_GLOB
from perfbench.profiling.ascend_kernels import op_time_by_shape, time_by_task_type
from perfbench.profiling.chrome import NotATrace, parse_chrome_trace
from perfbench.profiling.communication import link_bandwidth
from perfbench.profiling.events import SkippedEvents, concat_events

NOT_A_TRACE = ("expected a torch profiler trace (.json / .json.gz), a torch_npu trace_view.json, a "
               "kernel_details.csv, an ascend_pytorch_profiler_*.db or an Ascend profiler folder (*_ascend_pt)")


@dataclass
class LoadedTrace:
    """A parsed trace: the events table plus what the user should be told about it.

    kind: "chrome" (Kineto or trace_view.json files) or "ascend" (profiler folder).
    extra_tables: the profiler's own summaries worth keeping as CSV (Ascend step_trace_time, op_statistic,
    communication), by file stem.
    """

    path: Path
    kind: str
    events: pd.DataFrame
    missing_columns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra_tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    level: str | None = None
    ranks: list[int] = field(default_factory=list)  # ranks found, including ranks without events

    def __post_init__(self) -> None:
        if not self.ranks and len(self.events):
            self.ranks = sorted(int(r) for r in self.events["rank"].unique())


def _is_chrome_file(path: Path) -> bool:
    return path.name.endswith((".json", ".json.gz"))


def _load_ascend(path: Path, prefer: str | None = None) -> LoadedTrace:
    profile = parse_ascend_dir(path, prefer)
    extra = {"ascend_step_trace_time": profile.step_trace, "ascend_op_statistic": profile.op_statistic,
             "ascend_communication": profile.communication,
             "ascend_communication_links": profile.communication_links,
             "ascend_link_bandwidth": link_bandwidth(profile.communication_links),
             "ascend_communication_matrix": profile.communication_matrix,
             "ascend_op_time_by_shape": op_time_by_shape(profile.kernels),
             "ascend_task_types": time_by_task_type(profile.kernels)}
    return LoadedTrace(path, "ascend", profile.events, profile.missing_columns, profile.notes,
                       {k: v for k, v in extra.items() if not v.empty}, profile.level, profile.ranks)


def _load_chrome_file(path: Path) -> LoadedTrace:
    skipped = SkippedEvents()
    events = parse_chrome_trace(path, skipped=skipped)
    return LoadedTrace(path, "chrome", events, notes=skipped.notes(path))


def _load_chrome_folder(path: Path) -> LoadedTrace | None:
    """The chrome trace files of a folder, one per rank; None when it holds none. A file that fails is a
    note while others parse, and the error itself (naming the file) when none does."""
    files = sorted(p for p in path.iterdir() if p.is_file() and _is_chrome_file(p))
    frames, notes, errors = [], [], []
    for file in files:
        skipped = SkippedEvents()
        try:
            frames.append(parse_chrome_trace(file, skipped=skipped))
        except UserError as err:
            if not isinstance(err, NotATrace):  # a trace that failed to parse, not some other JSON file
                errors.append(err)
            notes.append(f"skipped {file.name}: {str(err).removeprefix(f'{file}: ')}")
        notes += skipped.notes(file)
    if not frames and errors:
        raise UserError(f"{errors[0]}" + (f" (and {len(errors) - 1} more trace files failed)"
                                          if len(errors) > 1 else ""))
    if not frames:
        return None
    ranks = [int(f["rank"].iloc[0]) for f in frames if len(f)]
    if len(set(ranks)) < len(ranks):  # several files claim one rank: number them in file order instead
        frames = [f.assign(rank=i) for i, f in enumerate(frames)]
        notes.append("trace files do not carry distinct ranks; ranks follow file name order")
    return LoadedTrace(path, "chrome", concat_events(frames), notes=notes)


def load_trace(path: Path | str, prefer: str | None = None) -> LoadedTrace:
    """Parse `path`, whatever kind of trace it is; UserError (one line) for anything that is not a trace.

    A .json/.json.gz file is a chrome trace (Kineto, or torch_npu trace_view.json); a kernel_details.csv is
    read with its folder, and so is an ascend_pytorch_profiler_*.db (the .db export, read from itself); a
    folder is an Ascend profiler folder (one rank or several) or else a folder of chrome trace files (one per
    rank, e.g. tensorboard_trace_handler output), or a multi-rank run's trace folder with one `rank<N>/`
    folder per rank. `prefer="db"`: Ascend ranks that hold both exports are read from the .db.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if path.is_file():
        if _is_chrome_file(path):
            return _load_chrome_file(path)
        if path.name == "kernel_details.csv":
            return _load_ascend(path.parent)
        if path.match(DB_GLOB):
            return _load_ascend(path.parent, "db")
        raise UserError(f"{path}: not a trace; {NOT_A_TRACE}")
    try:
        find_rank_folders(path)
    except NotAnAscendFolder:  # a broken profiler_info.json is that file's error, not "another format"
        loaded = _load_chrome_folder(path)
        emulated = [p for p in path.iterdir() if p.is_dir() and p.name.endswith("_ascend_pt")]
        if loaded is None and len(emulated) == 1:
            # the NPU emulator's output: a *_ascend_pt folder holding its host chrome trace, no Ascend tables
            loaded = _load_chrome_folder(emulated[0])
        if loaded is None and any(_RANK_FOLDER.match(p.name) for p in path.iterdir() if p.is_dir()):
            events = rank_folder_events(path, prefer)  # a multi-rank run's trace/ folder: rank0/, rank1/, ...
            loaded = LoadedTrace(path, "chrome", events, ranks=sorted(int(r) for r in events["rank"].unique()))
        if loaded is None:
            raise UserError(f"{path}: no trace in this folder; {NOT_A_TRACE}") from None
        return loaded
    return _load_ascend(path, prefer)


_RANK_FOLDER = re.compile(r"^rank(\d+)$")


def rank_folder_events(root: Path | str, prefer: str | None = None) -> pd.DataFrame:
    """The events of every `rank<N>/` trace folder under `root` (one per rank, as a multi-rank run keeps them),
    each with rank N; an empty table when there is none."""
    frames = []
    for folder in sorted(Path(root).iterdir()):
        match = _RANK_FOLDER.match(folder.name)
        if match and folder.is_dir():
            frames.append(load_trace(folder, prefer).events.assign(rank=int(match.group(1))))
    return concat_events(frames)


def parse_trace_path(path: Path | str, prefer: str | None = None) -> pd.DataFrame:
    """The events table of any trace `load_trace` accepts (`prefer`: see there)."""
    return load_trace(path, prefer).events
