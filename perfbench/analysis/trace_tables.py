"""The trace tables of a folder's runs (runs/<run_id>/tables/*.csv), read once per folder analysis: the advisor's
rules and the report's time breakdown both read them from here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfbench.bounded_files import csv_header
from perfbench.results import RunResult

TABLE_BYTES = 256 * 1024**2  # a run's trace tables are aggregates: kilobytes to a few MB


@dataclass
class TraceTables:
    """The trace tables of the ok runs, and the problems met reading them."""

    by_run: dict[str, dict[str, pd.DataFrame]] = field(default_factory=dict)  # run_id -> stem -> table
    problems: list[str] = field(default_factory=list)


def read_trace_tables(folder: Path, runs: Sequence[RunResult]) -> TraceTables:
    out = TraceTables()
    for r in runs:
        table_dir = folder / "runs" / r.run_id / "tables"
        for path in sorted(table_dir.glob("*.csv")) if table_dir.is_dir() else []:
            try:
                csv_header(path, TABLE_BYTES)  # a shared folder's tables: size cap, no duplicate header names
                frame = pd.read_csv(path)
            except (OSError, ValueError, pd.errors.ParserError) as err:  # UserError is a ValueError
                out.problems.append(f"{r.run_id}/{path.name}: unreadable ({str(err).splitlines()[0]})")
                continue
            out.by_run.setdefault(r.run_id, {})[path.stem] = frame
    return out
