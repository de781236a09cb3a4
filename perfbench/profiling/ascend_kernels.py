"""kernel_details.csv (torch_npu profiler) -> the events table, across its header variants.

The file has no fixed schema (profiler_formats.md 3.1): columns are found by header name, with aliases
(`Block Dim`/`Block Num`, `Mix Block Dim`/`Mix Block Num`, `Step Id`/`Step ID`, and CANN op_summary
names), and `Device_id`, `Step Id`, `OP State`, `HF32 Eligible`, shapes and PMU columns are optional. `N/A`
and empty cells are null. At Level0 `Type` and `Accelerator Core` are `N/A`, so categories come from kernel
names. A row whose start or duration cannot be used (missing, not a number, non-finite, negative, beyond
`events.MAX_TIME_US`: a truncated or corrupt file) is skipped and counted (`KernelDetails.skipped`, reported
as a note naming the first such row); an empty file, or one whose every row is unusable, is a UserError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from perfbench.bounded_files import csv_header
from perfbench.errors import UserError
from perfbench.profiling.categories import categorize
from perfbench.profiling.events import SkippedEvents, events_from_columns, time_problem, us_text_to_ns
from perfbench.profiling.scopes import EMPTY_SCOPE, Scope, scope_columns

# Older or CANN op_summary header -> the current torch_npu name (torch_npu doc, kernel_details Table 1).
HEADER_ALIASES = {
    "Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num", "Step ID": "Step Id",
    "Stream Id": "Stream ID", "Device Id": "Device_id", "Device_Id": "Device_id", "Op Name": "Name",
    "OP Type": "Type", "Task Type": "Accelerator Core", "Task Start Time(us)": "Start Time(us)",
    "Task Duration(us)": "Duration(us)", "Task Wait Time(us)": "Wait Time(us)",
}
REQUIRED_COLUMNS = ("Name", "Start Time(us)", "Duration(us)")
# What the events table uses beyond the required columns; absent ones are reported to the user.
EXPECTED_COLUMNS = ("Type", "Accelerator Core", "Step Id", "Stream ID")
COMMUNICATION_CORES = frozenset({"COMMUNICATION", "HCCL"})
NULL_TEXT = frozenset({"", "N/A", "NA"})
# Kept as text even when every cell reads as a number (a 1-D shape "64", a stream id)
TEXT_COLUMNS = frozenset({"Name", "Type", "Accelerator Core", "Start Time(us)", "Stream ID", "Input Shapes",
                          "Output Shapes"})


@dataclass
class KernelDetails:
    """One kernel_details.csv, parsed.

    `table` keeps every column under its canonical header (strings with quotes and padding removed, numbers as
    numbers, `N/A` as null) plus `start_ns` (exact integer ns, epoch); `missing_columns` are the absent
    `EXPECTED_COLUMNS`; `all_na_columns` the expected ones present but `N/A` on every row (Level0).
    """

    path: Path
    table: pd.DataFrame
    missing_columns: list[str] = field(default_factory=list)
    all_na_columns: list[str] = field(default_factory=list)
    dropped_rows: int = 0  # rows without a usable start or duration
    skipped: SkippedEvents = field(default_factory=SkippedEvents)  # those rows by reason, with the first


def _clean_text(series: pd.Series) -> pd.Series:
    # Cells can carry a trailing TAB and CSV quotes inside quotes (`"""1,4096"""` -> `"1,4096"`).
    cleaned = series.str.strip().str.strip('"').str.strip()
    return cleaned.where(~cleaned.isin(NULL_TEXT), None)


def read_kernel_details(path: Path) -> KernelDetails:
    """Read one kernel_details.csv (any known header variant); UserError if a required column is absent."""
    csv_header(path)  # size cap; duplicate header names refused before pandas (quadratic in them)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise UserError(f"{path}: empty file ({path.stat().st_size} bytes): no kernel_details.csv header "
                        "or rows (an interrupted profiler export?)") from None
    except (OSError, ValueError, UnicodeDecodeError) as err:  # ParserError is a ValueError
        raise UserError(f"{path}: cannot read kernel_details.csv ({str(err).splitlines()[0]})") from None
    raw.columns = [HEADER_ALIASES.get(c.strip(), c.strip()) for c in raw.columns]
    missing_required = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing_required:
        raise UserError(f"{path}: kernel_details.csv lacks required column(s) {', '.join(missing_required)}")
    table = pd.DataFrame(index=raw.index)
    for col in raw.columns:
        values = _clean_text(raw[col])
        if col not in TEXT_COLUMNS:
            numeric = pd.to_numeric(values, errors="coerce")
            if numeric.notna().sum() == values.notna().sum():
                values = numeric
        table[col] = values
    starts = table["Start Time(us)"]
    durations = pd.to_numeric(table["Duration(us)"], errors="coerce")
    skipped = SkippedEvents()
    keep = []
    for i, (start, duration, name) in enumerate(zip(starts.tolist(), durations.tolist(), table["Name"].tolist())):
        problem = time_problem(start if isinstance(start, str) else None, duration)
        if problem is not None:
            column = "Start Time(us)" if problem.startswith("ts ") else "Duration(us)"
            skipped.add(f"{column} {problem.split(' ', 1)[1]}", f"line {i + 2} {name!r}")  # line 1: header
        keep.append(problem is None)
    usable = pd.Series(keep, index=table.index, dtype=bool)
    if skipped.total and not usable.any():
        raise UserError(f"{path}: no usable kernel row; skipped {skipped.summary()}")
    table = table[usable].reset_index(drop=True)
    table["Duration(us)"] = durations[usable].to_numpy(dtype=float)
    table["start_ns"] = np.asarray([us_text_to_ns(s) for s in table["Start Time(us)"]], dtype=np.int64)
    missing = [c for c in EXPECTED_COLUMNS if c not in table.columns]
    all_na = [c for c in EXPECTED_COLUMNS if c in table.columns and len(table) and table[c].isna().all()]
    return KernelDetails(path, table, missing, all_na, skipped.total, skipped)


def _lookup_scope(scopes: dict[int, Scope], start_ns: int) -> Scope:
    # kernel_details and trace_view round some HCCL starts differently by 1 ns (profiler_formats.md 5).
    return scopes.get(start_ns) or scopes.get(start_ns - 1) or scopes.get(start_ns + 1) or EMPTY_SCOPE


def _lookup_launch(launches: dict[int, int], start_ns: int) -> int | None:
    # the same +/- 1 ns join as `_lookup_scope`
    for key in (start_ns, start_ns - 1, start_ns + 1):
        if key in launches:
            return launches[key]
    return None


def kernel_events(details: KernelDetails, rank: int, origin_ns: int,
                  scopes: dict[int, Scope] | None = None, launches: dict[int, int] | None = None) -> pd.DataFrame:
    """The events table of one kernel_details.csv (all rows side="device").

    Args:
        details: the parsed file.
        rank: rank of these kernels.
        origin_ns: start_us is measured from this epoch ns (the first kernel start across ranks).
        scopes: device start ns -> annotation context from trace_view.json (`TraceView.scope_by_start`).
        launches: device start ns -> start ns of the issuing op (`TraceView.launch_by_start`).

    input_shapes: `Input Shapes` (Level1+ or record_shapes), quotes removed by `read_kernel_details`.
    Category: communication when `Accelerator Core` is COMMUNICATION/HCCL or the name is hcom_*; otherwise
    `categorize(Name, Type, module)` (Type null at Level0: the name decides). Step: the annotation's step if
    any, else `Step Id`.
    """
    table = details.table
    n = len(table)
    names = table["Name"].astype(str).tolist()
    types = _texts(table, "Type")
    cores = _texts(table, "Accelerator Core")
    step_ids = table["Step Id"].tolist() if "Step Id" in table else [None] * n
    streams = _texts(table, "Stream ID")
    starts = table["start_ns"].tolist()
    row_scopes = [_lookup_scope(scopes, s) for s in starts] if scopes else [EMPTY_SCOPE] * n
    row_launches = [_lookup_launch(launches, s) for s in starts] if launches else [None] * n
    categories = []
    for name, op_type, core, scope in zip(names, types, cores, row_scopes):
        if core in COMMUNICATION_CORES or name.startswith("hcom_"):
            categories.append("communication")
        else:
            categories.append(categorize(name, op_type, scope.module))
    steps = [s.step if s.step is not None else _int_or_none(sid) for s, sid in zip(row_scopes, step_ids)]
    return events_from_columns({
        "name": names,
        "category": categories,
        **scope_columns(row_scopes, steps),
        "side": ["device"] * n,
        "start_us": (np.asarray(starts, dtype=np.int64) - origin_ns) / 1000.0,
        "dur_us": table["Duration(us)"].to_numpy(dtype=float),
        "stream": [s or "" for s in streams],
        "rank": [rank] * n,
        "input_shapes": _texts(table, "Input Shapes"),
        "launch_us": [None if ns is None else (ns - origin_ns) / 1000.0 for ns in row_launches],
    })


def _texts(table: pd.DataFrame, column: str) -> list[str | None]:
    """A text column as str or None per row (pandas keeps nulls of str columns as NaN)."""
    if column not in table:
        return [None] * len(table)
    return [v if isinstance(v, str) else None for v in table[column].tolist()]


def _int_or_none(value: object) -> int | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def op_time_by_shape(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernel time per (rank, op Type, Input Shapes) where the profiler recorded shapes (record_shapes, or
    Level1+): count, total_us, mean_us, min_us, max_us; largest total first. Empty without shapes."""
    columns = ["rank", "op", "input_shapes", "count", "total_us", "mean_us", "min_us", "max_us"]
    if kernels.empty or "Input Shapes" not in kernels or kernels["Input Shapes"].isna().all():
        return pd.DataFrame(columns=columns)
    op = kernels["Type"] if "Type" in kernels else kernels["Name"]
    frame = pd.DataFrame({"rank": kernels["rank"], "op": op.fillna(kernels["Name"]),
                          "input_shapes": kernels["Input Shapes"], "dur": kernels["Duration(us)"]})
    frame = frame[frame["input_shapes"].notna()]
    table = frame.groupby(["rank", "op", "input_shapes"], sort=False)["dur"].agg(
        count="count", total_us="sum", mean_us="mean", min_us="min", max_us="max").reset_index()
    return table.sort_values(["rank", "total_us"], ascending=[True, False], kind="stable").reset_index(drop=True)


TASK_TYPE_COLUMNS = ["rank", "task_type", "name", "op", "count", "total_us", "max_us"]


def time_by_task_type(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernel time per (rank, task type (`Accelerator Core`: AI_CORE, AI_CPU, ...), kernel name, op Type):
    count, total_us, max_us; what the advisor's `aicpu-fallback` reads. Empty where the profiler wrote no task
    types (Level0 `N/A`)."""
    if kernels.empty or "Accelerator Core" not in kernels or kernels["Accelerator Core"].isna().all():
        return pd.DataFrame(columns=TASK_TYPE_COLUMNS)
    op = kernels["Type"] if "Type" in kernels else kernels["Name"]
    frame = pd.DataFrame({"rank": kernels["rank"], "task_type": kernels["Accelerator Core"],
                          "name": kernels["Name"], "op": op.fillna(kernels["Name"]), "dur": kernels["Duration(us)"]})
    table = frame.dropna(subset=["task_type"]).groupby(["rank", "task_type", "name", "op"], sort=False)["dur"].agg(
        count="count", total_us="sum", max_us="max").reset_index()
    return table.sort_values(["rank", "total_us"], ascending=[True, False], kind="stable").reset_index(drop=True)
