"""A result folder has one owner: a lock while a sweep writes it, and the sweep's identity checked on resume.

The lock is an flock on `<folder>/.perfbench.lock` (released by the kernel when its holder dies, so a killed
sweep leaves no stale lock); the file names the holder's pid for the refusal message. The identity is every
setting that changes a measurement: the validated scenario (each section, the workload, the measure settings,
environment variables, toggles, the model and whether real weights are loaded), stored in `sweep.json`.
`--resume` of a folder whose identity differs is refused, naming the keys that differ, so that the stored runs and
the new ones never mix two measurements.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfbench.bounded_files import METADATA_BYTES, load_json
from perfbench.errors import UserError
from perfbench.results import atomic_write_json
from perfbench.results.env_allowlist import masked_values

LOCK_FILE = ".perfbench.lock"
IDENTITY_FILE = "sweep.json"
# settings that change how a sweep is supervised, not what it measures
NOT_IDENTITY = ("perfbench.measure.timeout_s",)


@contextlib.contextmanager
def owned(folder: Path) -> Iterator[None]:
    """Hold the folder's lock while the block runs; a folder another live sweep holds is refused."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"--out {folder}: another perfbench run (pid {_holder_pid(fd)}) is writing this folder; "
                            "wait for it, or choose another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder_pid(fd: int) -> str:
    return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"


@contextlib.contextmanager
def not_written(folder: Path, what: str) -> Iterator[None]:
    """While the block runs, no sweep may start writing `folder` (a shared hold of its lock); a folder a live sweep
    holds now is refused, naming the sweep's pid. `what` names the folder in the message (e.g. "FOLDER x")."""
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # never written by a sweep (or by hand): nothing to wait for
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"{what}: a live perfbench run (pid {_holder_pid(fd)}) is writing this folder; wait "
                            "for it to finish") from None
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (a folder, opened read-only) while the block runs, waiting for others."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{"a.b[0].c": value, ...} of nested dicts and lists."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(obj, list):
        out = {}
        for i, value in enumerate(obj):
            out.update(flatten(value, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: obj}


def identity(scenario: dict[str, Any]) -> dict[str, Any]:
    flat = flatten(scenario)
    return {k: v for k, v in flat.items() if not any(k == n or k.startswith(f"{n}.") for n in NOT_IDENTITY)
            and k != "source"}


def check_identity(folder: Path, scenario: dict[str, Any], resume: bool) -> None:
    """Store the sweep's identity, or, on resume, refuse a folder measured with other settings."""
    path = folder / IDENTITY_FILE
    mine = identity(masked_values(scenario))  # sweep.json holds no credential: a changed secret is not a change
    if resume and path.is_file():
        try:
            stored = load_json(path, METADATA_BYTES).get("identity", {})
        except (UserError, AttributeError):
            raise UserError(f"--resume: {path} is unreadable; it cannot tell what the stored runs measured") from None
        differ = sorted(k for k in set(stored) | set(mine) if stored.get(k, "<absent>") != mine.get(k, "<absent>"))
        if differ:
            shown = "; ".join(f"{k}: {stored.get(k, '<absent>')!r} -> {mine.get(k, '<absent>')!r}" for k in differ[:4])
            more = f" (and {len(differ) - 4} more)" if len(differ) > 4 else ""
            raise UserError(f"--resume {folder}: the settings differ from the stored sweep's ({shown}{more}); "
                            "resume with the same settings, or run into another folder")
        return
    atomic_write_json(path, {"identity": mine})
