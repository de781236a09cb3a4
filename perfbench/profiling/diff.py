"""Op-level diff of two events tables (events.py): per op, where it ran, the time and count on each side.

An op is its `tables.op_family` (what `per_op` groups by: per-call ids of collectives and content hashes of
compiled graphs dropped), on its side (device kernel time and host self time are never mixed) and category,
split further by the `by` keys: phase, module and input shapes by default, layer / layer_type / step on
request. Each row has count and total µs in A and in B, B - A, B / A, and whether both traces ran it; rows
are sorted biggest movers first (|B - A|). Summed over the `by` keys, each side's counts and totals are that
side's `per_op` table. Ops (families) that only one trace ran are listed apart, with their count and time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfbench.profiling.events import NONE_LABEL, check_events
from perfbench.profiling.tables import op_family

OP_KEYS = ("side", "op", "category")  # always: what per_op groups by
BY_COLUMNS = {"phase": "phase", "module": "module", "shape": "input_shapes", "layer": "layer",
              "layer_type": "layer_type", "step": "step"}  # `by` key -> events column
DEFAULT_BY = ("phase", "module", "shape")
ONLY_A, ONLY_B, BOTH = "only A", "only B", "both"
NUMBERS = ["count_a", "total_us_a", "count_b", "total_us_b", "delta_us", "ratio"]


@dataclass
class OpDiff:
    """rows: the key columns (`keys`), NUMBERS and `present` (both / only A / only B), biggest movers first.
    only_a / only_b: side, op, count, total_us of the ops (families) only that trace ran, largest first.
    totals: per side, total_us_a, total_us_b and their ratio."""

    keys: list[str]
    rows: pd.DataFrame
    only_a: pd.DataFrame
    only_b: pd.DataFrame
    totals: pd.DataFrame

    @property
    def changed(self) -> bool:
        """Anything differs: a time, a count, or an op on one side only."""
        return bool(len(self.only_a) or len(self.only_b) or (self.rows["present"] != BOTH).any()
                    or (self.rows["delta_us"] != 0).any() or (self.rows["count_a"] != self.rows["count_b"]).any())


def diff_keys(by: Sequence[str] = DEFAULT_BY) -> list[str]:
    """The row keys of a diff split by `by` (names of BY_COLUMNS); ValueError for an unknown one."""
    unknown = [b for b in by if b not in BY_COLUMNS]
    if unknown:
        raise ValueError(f"unknown diff key {unknown[0]!r}; choose from {', '.join(BY_COLUMNS)}")
    return [*OP_KEYS, *(BY_COLUMNS[b] for b in dict.fromkeys(by))]


def _labelled(events: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The events with an `op` column and every key as an object column, "(none)" where null."""
    check_events(events)
    names = events["name"]
    frame = pd.DataFrame({"op": names.map({n: op_family(n) for n in pd.unique(names)}),
                          "dur_us": events["dur_us"].to_numpy(dtype=float)}, index=events.index)
    for key in keys:
        if key == "op":
            continue
        column = events[key] if key in events else pd.Series(None, index=events.index, dtype="object")
        frame[key] = column.astype(object).where(column.notna(), NONE_LABEL)
    return frame


def _totals(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.groupby(keys, sort=False, dropna=False)["dur_us"].agg(count="count", total_us="sum")


def op_diff(a: pd.DataFrame, b: pd.DataFrame, by: Sequence[str] = DEFAULT_BY) -> OpDiff:
    """The diff of events table `b` against `a` (see the module docstring)."""
    keys = diff_keys(by)
    frame_a, frame_b = _labelled(a, keys), _labelled(b, keys)
    # merge, not join: keys mix ints and "(none)" (layer, step), which an outer index join would try to sort
    rows = _totals(frame_a, keys).reset_index().merge(_totals(frame_b, keys).reset_index(), on=keys, how="outer",
                                                      suffixes=("_a", "_b"), sort=False)
    present = np.where(rows["count_a"].isna(), ONLY_B, np.where(rows["count_b"].isna(), ONLY_A, BOTH))
    rows[NUMBERS[:4]] = rows[NUMBERS[:4]].fillna(0.0)
    rows["count_a"], rows["count_b"] = rows["count_a"].astype(int), rows["count_b"].astype(int)
    rows["delta_us"] = rows["total_us_b"] - rows["total_us_a"]
    with np.errstate(divide="ignore", invalid="ignore"):
        rows["ratio"] = np.where(rows["total_us_a"] > 0, rows["total_us_b"] / rows["total_us_a"].where(
            rows["total_us_a"] > 0, 1.0), np.where(rows["total_us_b"] > 0, np.inf, np.nan))
    rows["present"] = present
    order = np.lexsort((rows["op"].astype(str).to_numpy(), -rows["delta_us"].abs().to_numpy()))
    rows = rows.iloc[order].reset_index(drop=True)[[*keys, *NUMBERS, "present"]]
    ops_a, ops_b = _totals(frame_a, ["side", "op"]), _totals(frame_b, ["side", "op"])
    only_a = ops_a.loc[ops_a.index.difference(ops_b.index)].reset_index()
    only_b = ops_b.loc[ops_b.index.difference(ops_a.index)].reset_index()
    sides_a = frame_a.groupby("side")["dur_us"].sum().rename("total_us_a")
    sides_b = frame_b.groupby("side")["dur_us"].sum().rename("total_us_b")
    totals = pd.concat([sides_a, sides_b], axis=1).fillna(0.0).reset_index().rename(columns={"index": "side"})
    with np.errstate(divide="ignore", invalid="ignore"):
        totals["ratio"] = totals["total_us_b"] / totals["total_us_a"].replace(0.0, np.nan)
    return OpDiff(keys, rows, _largest(only_a), _largest(only_b), totals)


def _largest(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(["side", "total_us", "op"], ascending=[True, False, True],
                             kind="stable").reset_index(drop=True)
