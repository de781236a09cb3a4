"""Long text in output tables: a trace or a record may carry a field of any length (an op name of 100 MB), and
every table row would copy it. Cells keep their first MAX_CELL_CHARS characters and say how many were cut."""

from __future__ import annotations

import pandas as pd
from pandas.api.types import is_object_dtype, is_string_dtype

MAX_CELL_CHARS = 1000


def cell_text(text: str, limit: int = MAX_CELL_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def short_cells(table: pd.DataFrame, limit: int = MAX_CELL_CHARS) -> pd.DataFrame:
    """`table` with every string longer than `limit` shortened (the same table when none is)."""
    long = [c for c in table.columns if (is_object_dtype(table[c]) or is_string_dtype(table[c]))
            and (table[c].map(lambda v: isinstance(v, str) and len(v) > limit)).any()]
    if not long:
        return table
    out = table.copy()
    for column in long:
        out[column] = out[column].map(lambda v: cell_text(v, limit) if isinstance(v, str) else v)
    return out
