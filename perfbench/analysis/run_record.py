"""The result record of the run a trace belongs to: `perfbench trace` on a run's trace (runs/<id>/trace[/rank<r>
[/<profiler folder>]]) reads its plan, mode and expert load from the nearest result.json above it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfbench.bounded_files import METADATA_BYTES, load_json
from perfbench.errors import UserError

RESULT_FILE = "result.json"


def result_record_near(trace_path: Path, levels: int = 4) -> dict[str, Any]:
    """The nearest result.json at or above `trace_path` (at most `levels` folders up), as parsed JSON; {} when
    there is none or it is not a JSON object."""
    for folder in [trace_path, *Path(trace_path).resolve().parents][:levels + 1]:
        result = Path(folder) / RESULT_FILE
        if result.is_file():
            try:
                raw = load_json(result, METADATA_BYTES)
            except UserError:  # unreadable, too big or too deep: as if there were none
                return {}
            return raw if isinstance(raw, dict) else {}
    return {}
