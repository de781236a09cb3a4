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

from perfbench.profiling.events import check_events
from perfbench.profiling.tables import NONE_LABEL, union_us

ALL_LAYERS = "(all)"
COLUMNS = ["rank", "layer_type", "steps", "device_busy_us", "device_free_us", "host_busy_us", "host_span_us",
           "launches", "host_us_per_launch"]


def _per_group(rows: pd.DataFrame, has_device: bool) -> dict[str, float]:
    device = rows[rows["side"] == "device"]
    host = rows[rows["side"] == "host"]
    out = {"device_busy_us": np.nan, "device_free_us": np.nan, "host_busy_us": float(host["dur_us"].sum()),
           "host_span_us": np.nan}
    if len(host):
        host_end = host["start_us"] + host["dur_us"]
        out["host_span_us"] = float(host_end.max() - host["start_us"].min())
    if has_device and len(device):
        start = device["start_us"].to_numpy(dtype=float)
        end = start + device["dur_us"].to_numpy(dtype=float)
        busy = union_us(start, end)
        out["device_busy_us"], out["device_free_us"] = busy, float(end.max() - start.min()) - busy
    out["launches"] = float(len(device) if has_device else len(host))
    return out


def host_bound(df: pd.DataFrame) -> pd.DataFrame:
    """The table in the module docstring; empty without decode steps."""
    check_events(df)
    decode = df[(df["phase"] == "decode") & df["step"].notna()]
    if decode.empty:
        return pd.DataFrame(columns=COLUMNS)
    has_device = bool((decode["side"] == "device").any())
    decode = decode.assign(layer_type=decode["layer_type"].astype(object).where(decode["layer_type"].notna(),
                                                                                NONE_LABEL))
    rows = []
    for (rank, step), group in decode.groupby(["rank", "step"], sort=True):
        rows.append({"rank": rank, "step": step, "layer_type": ALL_LAYERS, **_per_group(group, has_device)})
        # one layer at a time (layers of a type interleave with the other type), summed per type
        for (layer_type, _), part in group.groupby(["layer_type", "layer"], sort=True, dropna=False):
            rows.append({"rank": rank, "step": step, "layer_type": layer_type, **_per_group(part, has_device)})
    per_layer = pd.DataFrame(rows)
    per_step = per_layer.groupby(["rank", "step", "layer_type"], sort=True).sum(min_count=1).reset_index()
    table = per_step.groupby(["rank", "layer_type"], sort=True).agg(
        steps=("step", "nunique"), device_busy_us=("device_busy_us", "mean"),
        device_free_us=("device_free_us", "mean"), host_busy_us=("host_busy_us", "mean"),
        host_span_us=("host_span_us", "mean"), launches=("launches", "mean")).reset_index()
    table["host_us_per_launch"] = table["host_span_us"] / table["launches"].replace(0, np.nan)
    return table[COLUMNS]
