"""Is decode host-bound? Per decode step and layer type: device busy vs free time, host time per launch.

A decode step whose device sits idle between kernels while the host is busy issuing them is host-bound; graph
mode and fused ops exist to fix exactly that. Per (rank, layer type), means over the decode steps:

  steps               decode steps seen
  device_busy_us      union of the device kernels' intervals (NaN without device rows: CPU traces)
  device_free_us      the kernels' span (first start to last end) minus device_busy_us, per layer, summed
  host_busy_us        exclusive host op time
  host_span_us        first host op start to last host op end, per layer, summed
  launches            device kernels per step (host ops per step without device rows)
  host_us_per_launch  host_span_us / launches: host time between two launches

`layer_type` "(all)" is the whole step; "(none)" the work outside any annotated layer (embedding, sampling).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfbench.profiling.events import NONE_LABEL, check_events

ALL_LAYERS = "(all)"
COLUMNS = ["rank", "layer_type", "steps", "device_busy_us", "device_free_us", "host_busy_us", "host_span_us",
           "launches", "host_us_per_launch"]


def union_by_group(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.Series:
    """Length of the union of [start, end) intervals per group id, without a Python loop over groups."""
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    before = pd.Series(reach).groupby(g).shift(1).to_numpy()
    opens = np.isnan(before) | (s > before)
    segment = np.cumsum(opens)
    segments = pd.DataFrame({"g": g, "seg": segment, "s": s, "e": e}).groupby("seg").agg(
        g=("g", "first"), s=("s", "min"), e=("e", "max"))
    return (segments["e"] - segments["s"]).groupby(segments["g"]).sum()


def _measure(rows: pd.DataFrame, keys: list[str], has_device: bool) -> pd.DataFrame:
    """Per group of `keys`: the device and host columns of the module docstring (before the per-step mean)."""
    end = rows["start_us"] + rows["dur_us"]
    frame = rows.assign(end_us=end)
    host = frame[frame["side"] == "host"].groupby(keys, dropna=False).agg(
        host_busy_us=("dur_us", "sum"), host_first=("start_us", "min"), host_last=("end_us", "max"),
        host_ops=("dur_us", "size"))
    host["host_span_us"] = host["host_last"] - host["host_first"]
    table = host[["host_busy_us", "host_span_us", "host_ops"]]
    device = frame[frame["side"] == "device"]
    if has_device and len(device):
        group_id = device.groupby(keys, dropna=False).ngroup().to_numpy()
        busy = union_by_group(group_id, device["start_us"].to_numpy(dtype=float),
                               device["end_us"].to_numpy(dtype=float))
        stats = device.groupby(keys, dropna=False).agg(first=("start_us", "min"), last=("end_us", "max"),
                                                       launches=("dur_us", "size"))
        stats["device_busy_us"] = busy.sort_index().to_numpy()
        stats["device_free_us"] = stats["last"] - stats["first"] - stats["device_busy_us"]
        table = table.join(stats[["device_busy_us", "device_free_us", "launches"]], how="outer")
    else:
        table = table.assign(device_busy_us=np.nan, device_free_us=np.nan, launches=table["host_ops"])
    table["host_busy_us"] = table["host_busy_us"].fillna(0.0)
    return table.drop(columns=["host_ops"]).reset_index()


def host_bound(df: pd.DataFrame) -> pd.DataFrame:
    """The table in the module docstring; empty without decode steps."""
    check_events(df)
    decode = df[(df["phase"] == "decode") & df["step"].notna()]
    if decode.empty:
        return pd.DataFrame(columns=COLUMNS)
    has_device = bool((decode["side"] == "device").any())
    decode = decode.assign(layer_type=decode["layer_type"].astype(object).where(decode["layer_type"].notna(),
                                                                                NONE_LABEL),
                           layer=decode["layer"].astype("float64"))
    whole = _measure(decode, ["rank", "step"], has_device).assign(layer_type=ALL_LAYERS)
    # one layer at a time (layers of a type interleave with the other type), summed per type
    layers = _measure(decode, ["rank", "step", "layer_type", "layer"], has_device)
    per_type = layers.drop(columns=["layer"]).groupby(["rank", "step", "layer_type"], sort=True).sum(
        min_count=1).reset_index()
    per_step = pd.concat([whole, per_type], ignore_index=True)
    table = per_step.groupby(["rank", "layer_type"], sort=True).agg(
        steps=("step", "nunique"), device_busy_us=("device_busy_us", "mean"),
        device_free_us=("device_free_us", "mean"), host_busy_us=("host_busy_us", "mean"),
        host_span_us=("host_span_us", "mean"), launches=("launches", "mean")).reset_index()
    table["host_us_per_launch"] = table["host_span_us"] / table["launches"].replace(0, np.nan)
    return table[COLUMNS]
