"""Latency tables from an events table (see events.py): per op, category, phase, layer type, compute vs comm.

All times are µs. Host rows carry exclusive (self) time, device rows kernel time; the two are never added
up: every table keeps `side` as a key, and `share_pct` is the share within that side. Rows whose annotation
did not say a phase or layer type are grouped under "(none)".
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from perfbench.profiling.events import NONE_LABEL, check_events, primary_side
from perfbench.profiling.graph_mode import hide_per_layer
from perfbench.profiling.host_bound import host_bound
from perfbench.profiling.idle import idle
from perfbench.results import atomic_write_text
from perfbench.results.cells import csv_cells

ALL_OPS = "(all ops)"  # the key of the total in `op_counts_per_decode_step`
_GRAPH_HASH = re.compile(r"^(## Call CompiledFxGraph) \w+")
_DYNAMO_FRAME = re.compile(r"^(Torch-Compiled Region): \d+/\d+$")
_HCOM_INSTANCE = re.compile(r"^(hcom_[A-Za-z]+?)_+\d+(_\d+)*$")


def op_family(name: str) -> str:
    """The op a name stands for: an Ascend collective's name carries a per-call id, dropped here
    (`hcom_allReduce__586_0_1` -> `hcom_allReduce`); a compiled graph's call carries its content hash, which
    changes with any code change (`## Call CompiledFxGraph f2tw7n... ##` -> `## Call CompiledFxGraph ##`); a
    compiled region carries dynamo's frame/recompile ids, which follow the order functions were first compiled
    in the process (`Torch-Compiled Region: 3/1` -> `Torch-Compiled Region`)."""
    match = _HCOM_INSTANCE.match(name)
    if match:
        return match.group(1)
    return _DYNAMO_FRAME.sub(r"\1", _GRAPH_HASH.sub(r"\1", name))


def _op_families(names: pd.Series) -> pd.Series:
    # One regex per distinct name, not per row: a decode trace repeats a few hundred names a million times.
    return names.map({name: op_family(name) for name in pd.unique(names)})


def _with_share(table: pd.DataFrame) -> pd.DataFrame:
    side_total = table.groupby("side")["total_us"].transform("sum")
    share = 100.0 * table["total_us"] / side_total.replace(0, np.nan)
    table["share_pct"] = share.fillna(0.0)
    return table


def _grouped(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    labelled = {k: df[k].astype(object).where(df[k].notna(), NONE_LABEL) for k in keys if k != "side"}
    frame = df.assign(**labelled)
    table = (frame.groupby(keys, dropna=False)["dur_us"]
             .agg(count="count", total_us="sum", mean_us="mean", min_us="min", max_us="max").reset_index())
    table = _with_share(table)
    table = table.sort_values(["side", "total_us"], ascending=[True, False], kind="stable")
    return table.reset_index(drop=True)


def per_op(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (side, op, category): count, total_us, mean_us, min_us, max_us, share_pct; largest
    first. Ascend collectives are grouped by op (`op_family`)."""
    check_events(df)
    return _grouped(df.assign(name=_op_families(df["name"])), ["side", "name", "category"])


def per_category(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (side, category): count, total_us, mean_us, min_us, max_us, share_pct; largest first."""
    check_events(df)
    return _grouped(df, ["side", "category"])


def per_phase(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (side, phase): count, total_us, mean_us, min_us, max_us, share_pct."""
    check_events(df)
    return _grouped(df, ["side", "phase"])


def per_layer_type(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (side, layer_type): layers (distinct layer indices), count, total_us, mean_us_per_layer,
    share_pct. mean_us_per_layer = total_us / layers (total_us when no layer index was annotated)."""
    check_events(df)
    table = _grouped(df, ["side", "layer_type"])[["side", "layer_type", "count", "total_us", "share_pct"]]
    frame = df.assign(layer_type=df["layer_type"].astype(object).where(df["layer_type"].notna(), NONE_LABEL))
    layers = frame.groupby(["side", "layer_type"])["layer"].nunique().rename("layers").reset_index()
    table = table.merge(layers, on=["side", "layer_type"], how="left")
    table["layers"] = table["layers"].fillna(0).astype(int)
    table["mean_us_per_layer"] = table["total_us"] / table["layers"].clip(lower=1)
    return table[["side", "layer_type", "layers", "count", "total_us", "mean_us_per_layer", "share_pct"]]


def union_us(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals [start, end) (same unit as the inputs)."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    opens = np.empty(len(s), dtype=bool)
    opens[0] = True
    opens[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    return float((np.maximum.reduceat(e, first) - s[first]).sum())


def compute_vs_communication(df: pd.DataFrame) -> pd.DataFrame:
    """Compute and communication time per (rank, step), on the device when the table has device rows.

    Columns: rank, step, side, compute_us, communication_us, overlapped_us, communication_not_overlapped_us,
    wall_us, free_us, communication_share_pct.

    Device (same definitions as Ascend's step_trace_time.csv): compute_us = length of the union of non-comm
    kernel intervals; communication_us = sum of comm durations; overlapped_us = time when a comm op runs while
    some compute kernel runs; communication_not_overlapped_us = union of comm intervals minus overlapped_us;
    wall_us = first start to last end; free_us = wall_us minus the union of all kernels.
    Host only: compute_us / communication_us are sums of exclusive op times; host ops' self time is not one
    interval, so overlapped/not-overlapped/free are NaN.
    """
    check_events(df)
    columns = ["rank", "step", "side", "compute_us", "communication_us", "overlapped_us",
               "communication_not_overlapped_us", "wall_us", "free_us", "communication_share_pct"]
    if df.empty:
        return pd.DataFrame(columns=columns)
    side = primary_side(df)
    rows = []
    for (rank, step), group in df[df["side"] == side].groupby(["rank", "step"], dropna=False, sort=True):
        start = group["start_us"].to_numpy(dtype=float)
        end = start + group["dur_us"].to_numpy(dtype=float)
        comm = (group["category"] == "communication").to_numpy()
        communication = float(group["dur_us"].to_numpy(dtype=float)[comm].sum())
        wall = float(end.max() - start.min())
        if side == "device":
            compute = union_us(start[~comm], end[~comm])
            comm_union = union_us(start[comm], end[comm])
            overlapped = compute + comm_union - union_us(start, end)
            not_overlapped, free = comm_union - overlapped, wall - union_us(start, end)
        else:
            compute = float(group["dur_us"].to_numpy(dtype=float)[~comm].sum())
            overlapped = not_overlapped = free = float("nan")
        busy = compute + communication
        rows.append([rank, step, side, compute, communication, overlapped, not_overlapped, wall, free,
                     100.0 * communication / busy if busy > 0 else 0.0])
    table = pd.DataFrame(rows, columns=columns)
    table["step"] = table["step"].astype("Int64")
    return table


def op_counts_per_decode_step(df: pd.DataFrame) -> dict[str, float]:
    """Mean number of executions of each op per decode step, plus `ALL_OPS` (total ops per step).

    Uses rows with phase == "decode" and a step, on the device when the table has device rows (kernels are
    what a fused op saves), else host ops. Steps are counted per rank. Largest first; {} without decode steps.
    """
    check_events(df)
    if df.empty:
        return {}
    rows = df[(df["side"] == primary_side(df)) & (df["phase"] == "decode") & df["step"].notna()]
    steps = rows[["rank", "step"]].drop_duplicates().shape[0]
    if steps == 0:
        return {}
    counts = _op_families(rows["name"]).value_counts() / steps
    out = {ALL_OPS: len(rows) / steps}
    out.update({str(name): float(count) for name, count in counts.items()})
    return out


def trace_tables(df: pd.DataFrame, mode: str | None = None, emulation: str | None = None) -> dict[str, pd.DataFrame]:
    """Every table above, host_bound and idle, by CSV stem. `mode`: the execution mode the trace measured
    (perfbench/config/execution_mode.py); a graph mode's per-layer tables carry what the graph hides instead of
    an attribution (graph_mode.hide_per_layer), labelled with `emulation` where the run was emulated."""
    counts = op_counts_per_decode_step(df)
    tables = {
        "per_op": per_op(df),
        "per_category": per_category(df),
        "per_phase": per_phase(df),
        "per_layer_type": per_layer_type(df),
        "compute_vs_communication": compute_vs_communication(df),
        "op_counts_per_decode_step": pd.DataFrame(
            {"op": list(counts), "count_per_step": list(counts.values())}),
        "host_bound": host_bound(df),
        "idle": idle(df),
    }
    return hide_per_layer(tables, mode, emulation) if mode is not None else tables


def write_table_files(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    """Each table as `<stem>.csv` in `out_dir` (created); returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, table in tables.items():
        path = out_dir / f"{name}.csv"
        # atomic: a full disk mid-write leaves the previous table, not a truncated one
        atomic_write_text(path, csv_cells(table).to_csv(index=False, float_format="%.3f"))
        paths.append(path)
    return paths


def write_tables(df: pd.DataFrame, out_dir: Path, mode: str | None = None,
                 emulation: str | None = None) -> list[Path]:
    """`trace_tables` written as CSV into `out_dir` (created); returns the paths written."""
    return write_table_files(trace_tables(df, mode, emulation), out_dir)
