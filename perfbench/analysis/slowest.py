"""The slowest of a set (ranks, links) and how far it is from the median: what the cluster lines and the advisor
say about a multi-rank run."""

from __future__ import annotations

from typing import Any

import pandas as pd


def slowest(table: pd.DataFrame, key: str, value: str, higher_is_slower: bool = True) -> tuple[Any, float]:
    """(key of the slowest row, how far it is from the median in %) of `value`: % above the median for a time
    (`higher_is_slower`), % below it for a rate. (None, 0) for fewer than two rows."""
    values = table[value].astype(float)
    if len(table) < 2 or values.isna().all():
        return None, 0.0
    median = values.median()
    index = values.idxmax() if higher_is_slower else values.idxmin()
    worst = values[index]
    if median <= 0 or worst <= 0:
        return table.loc[index, key], 0.0
    pct = 100.0 * (worst / median - 1.0) if higher_is_slower else 100.0 * (1.0 - worst / median)
    return table.loc[index, key], pct
