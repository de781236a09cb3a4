"""Result files: written atomically, read back through the record models (a bad record is one line)."""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfbench.bounded_files import METADATA_BYTES, TRACE_BYTES, load_json, loads_json, read_capped
from perfbench.errors import UserError
from perfbench.results.cells import csv_safe
from perfbench.results.env_allowlist import masked_values
from perfbench.results.run_record import CSV_COLUMNS, RunResult

_TRIES = 100


def _unique_name(parent: Path, prefix: str, suffix: str) -> Path:
    return parent / f"{prefix}{secrets.token_hex(8)}{suffix}"


def create_temp_file(parent: Path, prefix: str, suffix: str = ".tmp") -> tuple[int, Path]:
    """A new file in `parent` (open for writing) and its path, with the mode any new file of this user gets
    (0666 less the umask), where tempfile.mkstemp gives 0600 whatever the umask: the file is renamed into place
    and must be as readable as one written directly."""
    for _ in range(_TRIES):
        path = _unique_name(parent, prefix, suffix)
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free temporary name after {_TRIES} tries")


def create_temp_folder(parent: Path, prefix: str) -> Path:
    """A new folder in `parent` with the mode any new folder of this user gets (0777 less the umask; tempfile's
    mkdtemp gives 0700), for a folder that is filled and then renamed into place."""
    for _ in range(_TRIES):
        path = _unique_name(parent, prefix, "")
        try:
            path.mkdir(0o777)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free temporary name after {_TRIES} tries")


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + rename: readers never see a half-written file. UTF-8 whatever
    the locale; the file's mode is what the umask gives a new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp_file(path.parent, f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def load_results(folder: str | Path) -> list[RunResult]:
    """Results of a folder, last record per run_id winning (a resumed sweep may have rewritten a run)."""
    path = Path(folder) / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results.jsonl (is {folder} a perfbench result folder?)")
    by_id: dict[str, RunResult] = {}
    text = read_capped(path, TRACE_BYTES).decode(errors="replace")  # size-capped: folders get shared
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = loads_json(line, f"{path}:{lineno}", "valid JSON")
        except UserError as err:
            raise ValueError(str(err)) from None
        result = RunResult.from_dict(raw, f"{path}:{lineno}")
        by_id[result.run_id] = result
    return list(by_id.values())


@dataclass
class ResultFolder:
    """A result (or baseline) folder as read: its runs by run_id, scenario.json and baseline.json if any."""

    path: Path
    runs: dict[str, RunResult]
    scenario: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None  # baseline.json, for a saved baseline

    @property
    def results(self) -> list[RunResult]:
        return list(self.runs.values())


def _read_json_object(path: Path) -> dict[str, Any] | None:
    try:
        data = load_json(path, METADATA_BYTES)
    except UserError:  # unreadable, too big or too deep: as absent
        return None
    return data if isinstance(data, dict) else None


def load_folder(path: str | Path, name: str | None = None) -> ResultFolder:
    """Every command's folder loader: anything unreadable is a one-line UserError starting with `name` (how
    the user gave the folder, e.g. "--baseline <path>"; default the path)."""
    path = Path(path)
    name = name or str(path)
    if not path.exists():
        raise UserError(f"{name}: no such folder")
    if not path.is_dir():
        raise UserError(f"{name}: not a folder (give a result or baseline folder)")
    if not (path / "results.jsonl").is_file():
        raise UserError(f"{name}: no results.jsonl (not a perfbench result or baseline folder)")
    try:
        results = load_results(path)
    except (ValueError, TypeError) as err:
        raise UserError(f"{name}: unreadable results.jsonl ({err})") from None
    scenario = _read_json_object(path / "scenario.json")
    # a scenario.json written before the masking rule: no credential is read back (report, gate, baseline save)
    return ResultFolder(path, {r.run_id: r for r in results}, None if scenario is None else masked_values(scenario),
                        _read_json_object(path / "baseline.json"))


def write_results(folder: str | Path, results: list[RunResult]) -> None:
    """Rewrite results.jsonl and results.csv atomically from the full list."""
    folder = Path(folder)
    lines = "".join(json.dumps(r.to_dict(), default=str) + "\n" for r in results)
    atomic_write_text(folder / "results.jsonl", lines)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS))
    writer.writeheader()
    for r in results:
        writer.writerow({key: csv_safe(value) for key, value in r.csv_row().items()})
    atomic_write_text(folder / "results.csv", buf.getvalue())
