"""communication.json and communication_matrix.json (torch_npu Level1+) -> per-op, per-link and matrix tables.

Link types of "Communication Bandwidth Info" are RDMA (between servers) and SDMA (inside a server); HCCS, PCIE
and SIO are the physical links SDMA traffic went over, so their sizes are already inside SDMA's
(profiler_formats.md 4.5). An op's transfer is RDMA + SDMA (the sum of its sub-links when SDMA is absent).
Times in these files are ms; the tables use µs. Bandwidth is size / time: MB per ms is GB/s, the profiler's unit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfbench.bounded_files import TRACE_BYTES, load_json
from perfbench.errors import UserError

COMMUNICATION_TIMES = {
    "Elapse Time(ms)": "elapse_us", "Transit Time(ms)": "transit_us", "Wait Time(ms)": "wait_us",
    "Synchronization Time(ms)": "synchronization_us", "Idle Time(ms)": "idle_us",
}
TOTAL_KEY = "Total Op Info"
SDMA_SUB_LINKS = ("HCCS", "PCIE", "SIO")
LINK_COLUMNS = ["rank", "step", "kind", "op_name", "group", "link", "part_of", "transit_size_mb",
                "transit_time_us", "bandwidth_gb_s"]
MATRIX_COLUMNS = ["rank", "step", "kind", "op", "group", "src_rank", "dst_rank", "transport", "transit_size_mb",
                  "transit_time_us", "bandwidth_gb_s", "op_name"]


def _read_json(path: Path) -> dict[str, Any]:
    data = load_json(path, TRACE_BYTES)  # size and depth capped (perfbench/bounded_files.py)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object keyed by step")
    return data


def _step(key: str) -> int | None:
    match = re.search(r"(\d+)$", key)
    return int(match.group(1)) if match else None


def _float(value: Any, where: str) -> float:
    """A number of the profiler's JSON (absent or empty: 0); anything else is a one-line UserError at `where`."""
    if value is None or value == "":
        return 0.0
    if not isinstance(value, bool):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    shown = repr(value)
    raise UserError(f"{where}: expected a number, got {shown if len(shown) <= 40 else shown[:37] + '...'}")


def _entries(value: Any, where: str) -> dict[str, Any]:
    """A nested object of the profiler's JSON (absent: empty); anything else is a one-line UserError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def bandwidth_gb_s(size_mb: np.ndarray | float, time_us: np.ndarray | float) -> np.ndarray:
    """Size / time in GB/s (MB per ms); NaN where nothing took time."""
    size, time_ms = np.asarray(size_mb, dtype=float), np.asarray(time_us, dtype=float) / 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(time_ms > 0, size / np.where(time_ms > 0, time_ms, 1.0), np.nan)


def op_transfer(links: dict[str, Any], where: str = "communication.json") -> tuple[float, float]:
    """(size MB, time ms) an op moved: RDMA + SDMA, where SDMA already holds its HCCS/PCIE/SIO sub-links."""
    def size(name: str) -> float:
        return _float(_entries(links.get(name), f"{where}/{name}").get("Transit Size(MB)"),
                      f"{where}/{name}: Transit Size(MB)")

    def time(name: str) -> float:
        return _float(_entries(links.get(name), f"{where}/{name}").get("Transit Time(ms)"),
                      f"{where}/{name}: Transit Time(ms)")

    if "SDMA" in links:
        sdma_size, sdma_time = size("SDMA"), time("SDMA")
    else:
        sdma_size, sdma_time = sum(map(size, SDMA_SUB_LINKS)), sum(map(time, SDMA_SUB_LINKS))
    return size("RDMA") + sdma_size, time("RDMA") + sdma_time


def read_communication(path: Path, rank: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """communication.json -> (ops, links).

    ops: one row per collective/p2p op: rank, step, kind (collective|p2p), op_name, group, elapse_us,
    transit_us, wait_us, synchronization_us, idle_us, transit_size_mb, transit_time_us, bandwidth_gb_s.
    links: one row per (op, link type) that moved data: the LINK_COLUMNS (`part_of` is "SDMA" for its sub-links).
    The per-step "Total Op Info" entries are the profiler's own sums, not ops; they are left out.
    """
    ops, links = [], []
    for step_key, kinds in _read_json(path).items():
        step = _step(step_key)
        for kind, entries in _entries(kinds, f"{path}: {step_key}").items():
            for op_key, info in _entries(entries, f"{path}: {step_key}/{kind}").items():
                if op_key == TOTAL_KEY or not isinstance(info, dict):
                    continue
                where = f"{path}: {step_key}/{kind}/{op_key}"
                op_name, _, group = op_key.partition("@")
                times = _entries(info.get("Communication Time Info"), f"{where}: Communication Time Info")
                row: dict[str, Any] = {"rank": rank, "step": step, "kind": kind, "op_name": op_name,
                                       "group": group}
                for src, dst in COMMUNICATION_TIMES.items():
                    value = times.get(src)
                    row[dst] = _float(value, f"{where}: {src}") * 1000.0 if value is not None else None
                bandwidth = _entries(info.get("Communication Bandwidth Info"), f"{where}: Communication Bandwidth Info")
                size_mb, time_ms = op_transfer(bandwidth, where)
                row["transit_size_mb"], row["transit_time_us"] = size_mb, time_ms * 1000.0
                ops.append(row)
                for link, values in bandwidth.items():
                    link_info = _entries(values, f"{where}/{link}")
                    link_size = _float(link_info.get("Transit Size(MB)"), f"{where}/{link}: Transit Size(MB)")
                    if link_size > 0:
                        links.append([rank, step, kind, op_name, group, link,
                                      "SDMA" if link in SDMA_SUB_LINKS else None, link_size,
                                      _float(link_info.get("Transit Time(ms)"),
                                             f"{where}/{link}: Transit Time(ms)") * 1000.0, 0.0])
    op_table = pd.DataFrame(ops)
    if len(op_table):
        op_table["step"] = op_table["step"].astype("Int64")
        op_table["bandwidth_gb_s"] = bandwidth_gb_s(op_table["transit_size_mb"], op_table["transit_time_us"])
    link_table = pd.DataFrame(links, columns=LINK_COLUMNS)
    link_table["step"] = link_table["step"].astype("Int64")
    link_table["bandwidth_gb_s"] = bandwidth_gb_s(link_table["transit_size_mb"], link_table["transit_time_us"])
    return op_table, link_table


def read_communication_matrix(path: Path, rank: int) -> pd.DataFrame:
    """communication_matrix.json -> one row per (step, op group, src-dst link): the MATRIX_COLUMNS.

    `op` is the profiler's key before `@` (e.g. "allreduce-top1", "allreduce-total"); times in µs.
    """
    rows = []
    for step_key, kinds in _read_json(path).items():
        step = _step(step_key)
        for kind, entries in _entries(kinds, f"{path}: {step_key}").items():
            for op_key, pairs in _entries(entries, f"{path}: {step_key}/{kind}").items():
                op, _, group = op_key.partition("@")
                for pair, info in _entries(pairs, f"{path}: {step_key}/{kind}/{op_key}").items():
                    src, _, dst = str(pair).partition("-")
                    if not isinstance(info, dict) or not src.isdigit() or not dst.isdigit():
                        continue
                    where = f"{path}: {step_key}/{kind}/{op_key}/{pair}"
                    rows.append([rank, step, kind, op, group, int(src), int(dst),
                                 str(info.get("Transport Type", "")),
                                 _float(info.get("Transit Size(MB)"), f"{where}: Transit Size(MB)"),
                                 _float(info.get("Transit Time(ms)"), f"{where}: Transit Time(ms)") * 1000.0, 0.0,
                                 info.get("Op Name")])
    table = pd.DataFrame(rows, columns=MATRIX_COLUMNS)
    table["step"] = table["step"].astype("Int64")
    table["bandwidth_gb_s"] = bandwidth_gb_s(table["transit_size_mb"], table["transit_time_us"])
    return table


def link_bandwidth(links: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, link): ops, transit_size_mb, transit_time_us and bandwidth_gb_s (total size / total time)."""
    columns = ["rank", "link", "part_of", "ops", "transit_size_mb", "transit_time_us", "bandwidth_gb_s"]
    if links.empty:
        return pd.DataFrame(columns=columns)
    table = (links.assign(part_of=links["part_of"].fillna(""))
             .groupby(["rank", "link", "part_of"], sort=True)
             .agg(ops=("op_name", "count"), transit_size_mb=("transit_size_mb", "sum"),
                  transit_time_us=("transit_time_us", "sum")).reset_index())
    table["bandwidth_gb_s"] = bandwidth_gb_s(table["transit_size_mb"], table["transit_time_us"])
    table["part_of"] = table["part_of"].replace("", None)
    return table[columns]
