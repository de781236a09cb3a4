"""Idle and launch analysis per phase and per layer (`idle.csv`): how much of each span the device ran no kernel,
how long the gaps between kernels and the launches were, and on CPU the dispatch overhead that stands for them.

Windows: every (rank, phase, step) for the phase rows (layer_type "(all)"), every (rank, phase, step, layer) for
the layer rows; a row sums its windows (`windows` counts them), so a share is over the whole phase or layer.
Work outside any annotated layer (embedding, lm_head, sampling) counts in its phase row only.
Rows come from the trace's primary side: device rows when it has any, else host rows (CPU traces).

Device (kernels, memcpys, collectives):
  span_us              first start to last end, per window
  busy_us              length of the union of the rows' intervals
  free_us              span_us - busy_us: no kernel running
  gap_mean_us/_max_us  one kernel's end to the next one's start on the same stream (0 where they overlap)
  launch_delay_*       host launch -> device start of the kernels the trace links to their launch (`launch_us`:
                       CUDA correlation, NPU async_npu flow); linked_launches counts them
Host only: the dispatch overhead, on the busiest host thread of each window:
  span_us              first op start to the last op's start + self time (the events table keeps self time)
  busy_us              self time of the compute ops: every op but `BOOKKEEPING` (views, reshapes, allocations,
                       scalar reads, dynamo's cache lookup and guards: dispatch work, no arithmetic)
  free_us              span_us - busy_us: the dispatch overhead (the interpreter between ops plus bookkeeping)
  no_op_us             span_us minus every op's self time: the part of free_us with no op running at all (the
                       gaps between top-level ops)
Both: free_share_pct = 100 * free_us / span_us; launches = rows (kernels, or host ops on the thread);
host_bound = free_share_pct >= HOST_BOUND_FREE_PCT.

HOST_BOUND_FREE_PCT (30, perfbench/analysis/advisor.py; why: docs/advisor.md, rule host-bound-decode) is the
advisor's threshold: a device idle for a third of its span waits on the host, the regime graph mode and fused
ops exist to fix; on CPU a third of the host's time outside arithmetic is the same dispatch cost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfbench.analysis.advisor import HOST_BOUND_FREE_PCT
from perfbench.profiling.events import NONE_LABEL, check_events, primary_side
from perfbench.profiling.host_bound import union_by_group

__all__ = ["BOOKKEEPING", "COLUMNS", "HOST_BOUND_FREE_PCT", "idle"]
ALL_LAYERS = "(all)"
COLUMNS = ["rank", "phase", "layer_type", "layer", "side", "windows", "span_us", "busy_us", "free_us",
           "free_share_pct", "no_op_us", "launches", "gap_mean_us", "gap_max_us", "linked_launches",
           "launch_delay_mean_us", "launch_delay_max_us", "host_bound"]
# host ops that move no data through arithmetic: metadata views, allocations, scalar reads, dtype dispatch, and
# the compiled-code wrappers' own time (guard checks, cache lookup); their self time is dispatch overhead
BOOKKEEPING = (
    r"^aten::(?:view|_unsafe_view|as_strided_?|reshape|_reshape_alias|select|slice|narrow|transpose_?|t|"
    r"permute|unsqueeze_?|squeeze_?|expand|expand_as|flatten|unflatten|alias|detach_?|lift_fresh|"
    r"resolve_conj|resolve_neg|contiguous|empty|empty_like|empty_strided|new_empty|new_empty_strided|split|"
    r"split_with_sizes|chunk|unbind|movedim|item|_local_scalar_dense|is_nonzero|to|_to_copy|type_as|"
    r"result_type|size|stride|dim|numel|lift)$"
    r"|^TorchDynamo Cache Lookup$|^Pregraph bytecode$|^Torch-Compiled Region|^AOTDispatcher"
)
_PHASE_ORDER = {"prefill": 0, "decode": 1}
_WINDOW = ["rank", "phase", "step"]
_LAYER = ["layer_type", "layer"]


def _keyed(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with sentinel keys (groupby drops nothing) and their end."""
    return rows.assign(
        phase=rows["phase"].astype(object).where(rows["phase"].notna(), NONE_LABEL),
        layer_type=rows["layer_type"].astype(object).where(rows["layer_type"].notna(), NONE_LABEL),
        step=rows["step"].astype("float64").fillna(-1.0), layer=rows["layer"].astype("float64").fillna(-1.0),
        end_us=rows["start_us"] + rows["dur_us"])


def _device_windows(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per window of `keys`: span, busy, launches, gap and launch-delay sums / counts / maxima."""
    grouped = frame.groupby(keys, sort=True)
    table = grouped.agg(first=("start_us", "min"), last=("end_us", "max"), launches=("dur_us", "size"))
    busy = union_by_group(grouped.ngroup().to_numpy(), frame["start_us"].to_numpy(dtype=float),
                          frame["end_us"].to_numpy(dtype=float))
    table["span_us"] = table["last"] - table["first"]
    table["busy_us"] = busy.sort_index().to_numpy()
    table["no_op_us"] = np.nan
    ordered = frame.sort_values([*keys, "stream", "start_us"], kind="stable")
    lane = [*keys, "stream"]
    # the latest end so far on the stream, before each kernel: a kernel inside another's span has no gap
    reached = ordered.assign(reach=ordered.groupby(lane, sort=False)["end_us"].cummax())
    previous = reached.groupby(lane, sort=False)["reach"].shift(1)
    gaps = (ordered["start_us"] - previous).clip(lower=0.0)
    gap_frame = ordered[keys].assign(gap=gaps)[gaps.notna()]
    gap_stats = gap_frame.groupby(keys).agg(gap_sum=("gap", "sum"), gap_count=("gap", "size"),
                                            gap_max_us=("gap", "max"))
    delay = frame["start_us"] - frame["launch_us"]
    delay_frame = frame[keys].assign(delay=delay)[delay.notna()]
    delay_stats = delay_frame.groupby(keys).agg(delay_sum=("delay", "sum"), linked_launches=("delay", "size"),
                                                launch_delay_max_us=("delay", "max"))
    return table.join(gap_stats).join(delay_stats)


def _host_windows(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per window of `keys`, on its busiest host thread: span, compute (busy) and idle time, ops."""
    per_thread = frame.groupby([*keys, "stream"], sort=True)["dur_us"].sum()
    busiest = per_thread.groupby(level=list(range(len(keys)))).idxmax().tolist()
    thread_key = pd.MultiIndex.from_frame(frame[[*keys, "stream"]])
    rows = frame[thread_key.isin(pd.MultiIndex.from_tuples(busiest, names=[*keys, "stream"]))]
    compute = rows["dur_us"].where(~rows["name"].str.contains(BOOKKEEPING, regex=True), 0.0)
    table = rows.assign(compute=compute).groupby(keys, sort=True).agg(
        first=("start_us", "min"), last=("end_us", "max"), self_us=("dur_us", "sum"), busy_us=("compute", "sum"),
        launches=("dur_us", "size"))
    table["span_us"] = table["last"] - table["first"]
    table["no_op_us"] = (table["span_us"] - table["self_us"]).clip(lower=0.0)
    for column in ("gap_sum", "gap_count", "gap_max_us", "delay_sum", "linked_launches", "launch_delay_max_us"):
        table[column] = np.nan
    return table


def _rows(windows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Windows summed per `keys`, with the shares and means."""
    table = windows.reset_index().groupby(keys, sort=True).agg(
        windows=("span_us", "size"), span_us=("span_us", "sum"), busy_us=("busy_us", "sum"),
        no_op_us=("no_op_us", lambda s: s.sum(min_count=1)), launches=("launches", "sum"),
        gap_sum=("gap_sum", "sum"), gap_count=("gap_count", "sum"), gap_max_us=("gap_max_us", "max"),
        delay_sum=("delay_sum", "sum"), linked_launches=("linked_launches", "sum"),
        launch_delay_max_us=("launch_delay_max_us", "max")).reset_index()
    table["busy_us"] = np.minimum(table["busy_us"], table["span_us"])
    table["free_us"] = table["span_us"] - table["busy_us"]
    table["free_share_pct"] = 100.0 * table["free_us"] / table["span_us"].replace(0.0, np.nan)
    table["gap_mean_us"] = table["gap_sum"] / table["gap_count"].replace(0, np.nan)
    table["launch_delay_mean_us"] = table["delay_sum"] / table["linked_launches"].replace(0, np.nan)
    table["linked_launches"] = table["linked_launches"].fillna(0).astype(int)
    table["host_bound"] = table["free_share_pct"] >= HOST_BOUND_FREE_PCT
    return table


def idle(df: pd.DataFrame) -> pd.DataFrame:
    """The table in the module docstring: phase rows, then each phase's layer rows; empty without events."""
    check_events(df)
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    side = primary_side(df)
    frame = _keyed(df[df["side"] == side])
    measure = _device_windows if side == "device" else _host_windows
    phases = _rows(measure(frame, _WINDOW), ["rank", "phase"]).assign(layer_type=ALL_LAYERS, layer=-1.0)
    # rows outside any annotated layer (embedding, lm_head, sampling) sit at both ends of a step: as a "layer"
    # their span would be the whole step's; the phase row holds them
    in_layers = frame[frame["layer"] >= 0]
    layers = _rows(measure(in_layers, [*_WINDOW, *_LAYER]), ["rank", "phase", *_LAYER]) if len(in_layers) else None
    table = pd.concat([phases, *([layers] if layers is not None else [])], ignore_index=True).assign(side=side)
    table["order"] = table["phase"].map(_PHASE_ORDER).fillna(len(_PHASE_ORDER))
    table["level"] = (table["layer_type"] != ALL_LAYERS).astype(int)
    table = table.sort_values(["rank", "order", "phase", "level", "layer", "layer_type"], kind="stable")
    table["layer"] = pd.array([None if v < 0 else int(v) for v in table["layer"]], dtype="Int64")
    return table[COLUMNS].reset_index(drop=True)
