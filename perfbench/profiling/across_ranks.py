"""Across ranks: one step table for every rank, the slowest rank and link, and the lines that say so.

A rank's rows come from whichever files it has: its events when it has any (kernels, or host ops on CPU),
else the profiler's step_trace_time.csv (Ascend ranks often ship only that and communication.json). Preparing
and Bubble come from step_trace_time.csv wherever the profiler recorded them.
"""

from __future__ import annotations

import pandas as pd

from perfbench.analysis.slowest import slowest
from perfbench.profiling.communication import bandwidth_gb_s
from perfbench.profiling.tables import compute_vs_communication

__all__ = ["cluster_record", "link_pairs", "per_rank_steps", "rank_summary", "slowest"]

STEP_COLUMNS = ["rank", "step", "source", "side", "compute_us", "communication_us", "overlapped_us",
                "communication_not_overlapped_us", "free_us", "step_us", "preparing_us", "bubble_us"]
EVENTS_SOURCE = "events"
STEP_TRACE_SOURCE = "step_trace_time.csv"
_FROM_STEP_TRACE = {"computing_us": "compute_us", "communication_us": "communication_us",
                    "overlapped_us": "overlapped_us",
                    "communication_not_overlapped_us": "communication_not_overlapped_us", "free_us": "free_us",
                    "stage_us": "step_us", "preparing_us": "preparing_us", "bubble_us": "bubble_us"}


def per_rank_steps(events: pd.DataFrame, step_trace: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (rank, step) for every rank: the STEP_COLUMNS.

    step_us is the step's length: the profiler's Stage where step_trace_time.csv has it, else the events' first
    start to last end. Host-only traces (CPU runs) have compute and communication as summed exclusive host time,
    and `wait_us` = step_us - compute - communication is left to the caller (see `rank_summary`).
    """
    frames = []
    ours = compute_vs_communication(events) if len(events) else pd.DataFrame()
    if len(ours):
        ours = ours.rename(columns={"wall_us": "step_us"}).assign(source=EVENTS_SOURCE)
        frames.append(ours)
    theirs = step_trace if step_trace is not None else pd.DataFrame()
    if len(theirs):
        theirs = theirs.rename(columns=_FROM_STEP_TRACE)
        theirs = theirs.assign(step=theirs["step"].astype("Int64"), side="device")
        extra = [c for c in ("step_us", "preparing_us", "bubble_us") if c in theirs]
        if len(ours):
            # Preparing/Bubble (and the profiler's step length) for ranks that have events too.
            frames[0] = frames[0].drop(columns=["step_us"]).merge(
                theirs[["rank", "step", *extra]], on=["rank", "step"], how="left")
            missing_step = frames[0]["step_us"].isna()
            frames[0].loc[missing_step, "step_us"] = ours.loc[missing_step.to_numpy(), "step_us"].to_numpy()
        without_events = theirs[~theirs["rank"].isin(set(ours["rank"]) if len(ours) else set())]
        frames.append(without_events.assign(source=STEP_TRACE_SOURCE))
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=STEP_COLUMNS)
    table = pd.concat(frames, ignore_index=True)
    for column in STEP_COLUMNS:
        if column not in table:
            table[column] = float("nan")
    table["step"] = table["step"].astype("Int64")
    return table[STEP_COLUMNS].sort_values(["rank", "step"], kind="stable").reset_index(drop=True)


def rank_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank: steps, mean step_us, compute_us, communication_us, wait_us (step time not spent in compute or
    communication not overlapped with compute: free time on a device, idle host time on CPU) and
    slower_than_median_pct."""
    columns = ["rank", "steps", "step_us", "compute_us", "communication_us", "wait_us", "slower_than_median_pct"]
    if steps.empty:
        return pd.DataFrame(columns=columns)
    known = steps[steps["step"].notna()] if steps["step"].notna().any() else steps
    exposed = known["communication_not_overlapped_us"].fillna(known["communication_us"])
    table = known.assign(exposed_us=exposed).groupby("rank").agg(
        steps=("step", "nunique"), step_us=("step_us", "mean"), compute_us=("compute_us", "mean"),
        communication_us=("communication_us", "mean"), exposed_us=("exposed_us", "mean")).reset_index()
    table["wait_us"] = (table["step_us"] - table["compute_us"] - table["exposed_us"]).clip(lower=0)
    median = table["step_us"].median()
    table["slower_than_median_pct"] = 100.0 * (table["step_us"] / median - 1.0) if median > 0 else 0.0
    return table[columns]


def link_pairs(matrix: pd.DataFrame) -> pd.DataFrame:
    """Per (src_rank, dst_rank, transport) of a communication matrix, local copies left out: size, time,
    bandwidth_gb_s and `link` ("0->1 (HCCS)")."""
    pairs = matrix[matrix["src_rank"] != matrix["dst_rank"]]
    pairs = pairs.groupby(["src_rank", "dst_rank", "transport"], as_index=False).agg(
        transit_size_mb=("transit_size_mb", "sum"), transit_time_us=("transit_time_us", "sum"))
    pairs["bandwidth_gb_s"] = bandwidth_gb_s(pairs["transit_size_mb"], pairs["transit_time_us"])
    pairs["link"] = [f"{s}->{d} ({t})" for s, d, t in zip(pairs["src_rank"], pairs["dst_rank"], pairs["transport"])]
    return pairs


def cluster_record(steps: pd.DataFrame) -> dict[str, object]:
    """What a multi-rank run records in its results: the per-rank means and the slowest rank."""
    ranks = rank_summary(steps)
    rank, pct = slowest(ranks, "rank", "step_us")
    rows = [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
            for row in ranks.to_dict(orient="records")]
    return {"per_rank": rows, "slowest_rank": None if rank is None else int(rank),
            "slowest_rank_over_median_pct": pct}
