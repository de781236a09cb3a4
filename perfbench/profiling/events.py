"""The canonical events table every parser produces and every table reads.

One row per op execution:

  name        op or kernel name as the profiler wrote it
  category    one of `categories.CATEGORIES`
  phase       "prefill" / "decode" / ... from the enclosing `pb|` annotations, else null
  layer       decoder layer index (Int64, nullable)
  layer_type  e.g. "linear_attention" / "full_attention", else null
  module      innermost annotated module (attn, gdn, moe, router, experts, ...), else null
  step        decode step index from a `pb|...|step=N` annotation, else the profiler step
              (`ProfilerStep#N`, Ascend `Step Id`); Int64, nullable
  side        "device" (a kernel or device task) or "host" (a CPU op)
  start_us    start in µs relative to the trace's first event (float)
  dur_us      duration in µs. Device rows: the kernel's duration. Host rows: exclusive (self) time, i.e. the
              op's duration minus its direct child ops, so nested aten ops are never counted twice.
  stream      device stream id, or the host thread id (str)
  rank        distributed rank the trace came from (int)
  launch_us   device rows: start of the host call that launched the kernel (CUDA: the runtime call its
              `correlation` names; NPU: the issuing op at the start of its async_npu flow), on the start_us
              clock; NaN where the trace does not link them, and on host rows

One optional column (`OPTIONAL_COLUMNS`): every parser writes it, `check_events` does not require it, so a
table built by hand without it is still an events table (read it with `df.get(...)`):

  input_shapes  the op's input shapes as the trace recorded them, dims joined by "," and inputs by ";"
                (`"1,4096;4096,1024"`; a non-tensor input is an empty entry); null when the trace has none.
                Ascend device rows: `Input Shapes` (kernel_details.csv, or COMPUTE_TASK_INFO of the .db);
                chrome traces recorded with record_shapes: `Input Dims` of the cpu_op, and of the op that
                launched a kernel for its device row. Ascend host rows carry none (profiler_formats.md 6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

NONE_LABEL = "(none)"  # a group key that is missing (no phase, no layer) in the tables

COLUMNS = (
    "name", "category", "phase", "layer", "layer_type", "module", "step", "side", "start_us", "dur_us",
    "stream", "rank", "launch_us",
)
DTYPES = {
    "name": "object", "category": "object", "phase": "object", "layer": "Int64", "layer_type": "object",
    "module": "object", "step": "Int64", "side": "object", "start_us": "float64", "dur_us": "float64",
    "stream": "object", "rank": "int64", "launch_us": "float64",
}
SIDES = ("device", "host")
OPTIONAL_COLUMNS = ("input_shapes",)
OPTIONAL_DTYPES = {"input_shapes": "object"}
ALL_COLUMNS = (*COLUMNS, *OPTIONAL_COLUMNS)


def empty_events() -> pd.DataFrame:
    """An events table with no rows and the canonical dtypes (optional columns included)."""
    return pd.DataFrame({col: pd.Series(dtype={**DTYPES, **OPTIONAL_DTYPES}[col]) for col in ALL_COLUMNS})


def events_from_columns(columns: Mapping[str, Sequence | np.ndarray]) -> pd.DataFrame:
    """Build an events table from equally long column sequences (None = null); missing columns become null,
    the optional ones included.

    `layer` and `step` accept ints or None; `start_us`/`dur_us` floats; `rank` ints (default 0).
    """
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"event columns differ in length: {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    data: dict[str, object] = {}
    for col in COLUMNS:
        values = columns.get(col)
        if values is None:
            values = [0] * n if col == "rank" else [None] * n
        if DTYPES[col] == "Int64":
            data[col] = pd.array(list(values), dtype="Int64")
        elif DTYPES[col] == "object":
            data[col] = pd.Series(values if isinstance(values, np.ndarray) else list(values), dtype="object")
        else:
            data[col] = np.asarray(values, dtype=DTYPES[col])
    for col in OPTIONAL_COLUMNS:
        values = columns.get(col)
        data[col] = pd.Series([None] * n if values is None else list(values), dtype="object")
    return pd.DataFrame(data, columns=list(ALL_COLUMNS)).reset_index(drop=True)


def check_events(df: pd.DataFrame) -> None:
    """Raise ValueError if `df` is not an events table (missing columns or an unknown side)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"not an events table: missing columns {missing}")
    bad = set(df["side"].dropna().unique()) - set(SIDES)
    if bad:
        raise ValueError(f"`side` must be one of {SIDES}, got {sorted(bad)}")


def concat_events(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate events tables, keeping the canonical dtypes and the optional columns (null in a frame that
    lacks one); an empty list gives an empty table."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty_events()
    out = pd.concat(frames, ignore_index=True)
    for col in OPTIONAL_COLUMNS:
        if col not in out:
            out[col] = None
    return out.astype({**{c: DTYPES[c] for c in COLUMNS}, **OPTIONAL_DTYPES})[list(ALL_COLUMNS)]


def primary_side(df: pd.DataFrame) -> str:
    """"device" when the table has any device rows (their time is what the model costs), else "host"."""
    return "device" if (df["side"] == "device").any() else "host"


def us_text_to_ns(text: str | float | int) -> int:
    """A µs timestamp to integer ns without float rounding: "1736408883704643.212\\t" -> 1736408883704643212.

    Profilers write epoch µs with ns digits; float64 cannot hold those exactly, so strings are parsed as
    decimals. Surrounding whitespace, tabs and quotes are ignored; digits past ns are rounded half-even.
    """
    if isinstance(text, int):
        return text * 1000
    if isinstance(text, float):
        return round(text * 1000)
    cleaned = text.strip().strip('"').strip()
    whole, dot, frac = cleaned.partition(".")
    if whole.isdigit() and (not dot or (frac.isdigit() and len(frac) <= 3)):
        return int(whole) * 1000 + int(frac.ljust(3, "0") or 0)
    try:
        return int((Decimal(cleaned) * 1000).to_integral_value())
    except InvalidOperation:
        raise ValueError(f"not a µs timestamp: {text!r}") from None


# Largest timestamp or duration a trace may hold, in µs: its ns must fit int64 (9.2e18), which every parser
# converts to. Epoch µs of today are 1.7e15; a larger value is corrupt and would wrap around silently.
MAX_TIME_US = 9.0e15


def time_problem(ts: Any, dur: Any) -> str | None:
    """Why a trace event's `ts` / `dur` (µs: numbers, or text for ts and dur as profilers write them) cannot
    be used, or None. Durations must be finite and within [0, MAX_TIME_US], timestamps within [0,
    MAX_TIME_US]."""
    if isinstance(dur, str):
        try:
            dur = float(dur)
        except ValueError:
            return "dur is not a number"
    if type(dur) is not float and type(dur) is not int:  # bool and null are not durations
        return "dur is not a number"
    if not 0 <= dur <= MAX_TIME_US:  # NaN fails both comparisons
        return "dur is non-finite, negative or out of range"
    if isinstance(ts, str):
        try:
            ns = us_text_to_ns(ts)
        except ValueError:
            return "ts is not a timestamp"
        return None if 0 <= ns <= MAX_TIME_US * 1000 else "ts is negative or out of range"
    if type(ts) is not float and type(ts) is not int:
        return "ts is missing or not a number"
    if not 0 <= ts <= MAX_TIME_US:
        return "ts is non-finite, negative or out of range"
    return None


@dataclass
class SkippedEvents:
    """Events a parser could not use, counted by reason with the first of each: reported to the user (a note
    per reason), never dropped silently."""

    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, where: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        self.first.setdefault(reason, where)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def notes(self, path: Path) -> list[str]:
        """One line per reason: `<file>: skipped N event(s): <reason> (first: <event>)`."""
        return [f"{path.name}: skipped {n} event{'s' if n != 1 else ''}: {reason} (first: {self.first[reason]})"
                for reason, n in self.counts.items()]

    def summary(self) -> str:
        """All reasons in one phrase, for an error when nothing was usable."""
        return "; ".join(f"{n} ({reason}; first: {self.first[reason]})" for reason, n in self.counts.items())


def event_label(index: int, event: Any) -> str:
    """`event #index 'name'` (or the raw value, shortened) for a note or an error."""
    if isinstance(event, dict):
        return f"event #{index} {str(event.get('name', ''))[:60]!r}"
    return f"event #{index} {event!r:.60}"
