"""Long text in output tables: a trace or a record may carry a field of any length (an op name of 100 MB), and
every table row would copy it. Cells keep their first MAX_CELL_CHARS characters and say how many were cut."""

from __future__ import annotations

import re

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


# A cell a spreadsheet reads as a formula (CSV injection): text from a record or a trace (a CPU model, an op
# name, an error) that starts with one of these would run as `=HYPERLINK(...)` or `@SUM(...)|cmd` when the CSV is
# opened. Every CSV perfbench writes prefixes such text with a quote (`'=...`), as spreadsheets do themselves.
# Text that starts with + or - is quoted only when it could call something (a bracket, a pipe, a quote, ...):
# perfbench's own labels (-fused_rope, +gdr+graph) and signed numbers (-5, +12.5%) stay as they are.
FORMULA_START = ("=", "@", "\t", "\r")
SIGN_START = ("+", "-")
_CALLS = re.compile(r"[(|!\"'=@;:\\{}\[\]<>&$]")


def csv_safe(value: object) -> object:
    """`value` as a CSV cell: text that a spreadsheet would run as a formula gets a leading quote."""
    if isinstance(value, str) and (value.startswith(FORMULA_START)
                                   or (value.startswith(SIGN_START) and _CALLS.search(value))):
        return "'" + value
    return value


def csv_cells(table: pd.DataFrame, limit: int = MAX_CELL_CHARS) -> pd.DataFrame:
    """`table` as written to a CSV: long strings shortened (`short_cells`), formula-shaped text and column names
    quoted (`csv_safe`)."""
    table = short_cells(table, limit)
    risky = [c for c in table.columns if (is_object_dtype(table[c]) or is_string_dtype(table[c]))
             and table[c].map(lambda v: csv_safe(v) is not v).any()]
    names = {c: csv_safe(c) for c in table.columns if isinstance(c, str) and csv_safe(c) != c}
    if not risky and not names:
        return table
    out = table.copy()
    for column in risky:
        out[column] = out[column].map(csv_safe)
    return out.rename(columns=names)
