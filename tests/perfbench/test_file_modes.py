"""Files and folders perfbench writes through a temporary name (atomic writes, a baseline's staging folder, the
trace export) get the mode the umask gives any new file, not tempfile's 0600 / 0700."""

from __future__ import annotations

import gzip
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfbench.profiling.export import export_trace
from perfbench.results.files import atomic_write_json, atomic_write_text, create_temp_file, create_temp_folder


@pytest.fixture(params=[0o022, 0o002, 0o077, 0o027])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_atomically_written_file_has_the_umask_s_mode(tmp_path: Path, umask: int) -> None:
    atomic_write_text(tmp_path / "a.txt", "text")
    atomic_write_json(tmp_path / "sub" / "b.json", {"k": "é"})
    assert mode(tmp_path / "a.txt") == mode(tmp_path / "sub" / "b.json") == 0o666 & ~umask
    assert json.loads((tmp_path / "sub" / "b.json").read_text(encoding="utf-8")) == {"k": "é"}
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.txt", "b.json", "sub"]  # no temporary left


def test_a_rewrite_takes_the_umask_s_mode_and_replaces_the_content(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "a.txt"
    target.write_text("old")
    target.chmod(0o600)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and mode(target) == 0o666 & ~umask


def test_temporary_files_and_folders_have_the_umask_s_mode_and_fresh_names(tmp_path: Path, umask: int) -> None:
    fd, first = create_temp_file(tmp_path, ".x.")
    os.close(fd)
    fd, second = create_temp_file(tmp_path, ".x.")
    os.close(fd)
    folder = create_temp_folder(tmp_path, ".staging-")
    assert first != second and first.name.startswith(".x.") and first.name.endswith(".tmp")
    assert mode(first) == mode(second) == 0o666 & ~umask
    assert folder.is_dir() and mode(folder) == 0o777 & ~umask


def test_the_trace_export_has_the_umask_s_mode(tmp_path: Path, umask: int) -> None:
    source = tmp_path / "trace.json.gz"
    source.write_bytes(gzip.compress(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}).encode()))
    export_trace(source, tmp_path / "out" / "export.json.gz")
    assert mode(tmp_path / "out" / "export.json.gz") == 0o666 & ~umask
