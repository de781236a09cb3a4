"""`history ingest` checks a folder's files against their readers' caps before hashing them, and hashes them in
chunks: an oversized (sparse) results.jsonl costs neither its size in memory nor a partial store."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tracemalloc

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.history.extract import content_hash
from tests.cli_helpers import one_error_line

MiB = 1024**2


@pytest.fixture
def small_caps(monkeypatch):
    """The results reader's cap at 1 MiB (it is 1 GiB), so a test needs a file of megabytes, not gigabytes."""
    monkeypatch.setattr("perfbench.results.files.TRACE_BYTES", MiB)
    monkeypatch.setattr("perfbench.history.extract.TRACE_BYTES", MiB, raising=False)


def test_an_oversized_results_file_is_refused_before_it_is_read(tmp_path, sweep, small_caps, monkeypatch):
    monkeypatch.chdir(tmp_path)
    good = sweep(tmp_path / "good", sha="a" * 40)
    big = tmp_path / "big"
    big.mkdir()
    (big / "scenario.json").write_text('{"name": "syn"}')
    with open(big / "results.jsonl", "wb") as handle:  # sparse: 256 MiB that take no disk
        handle.truncate(256 * MiB)
    db = tmp_path / "h.sqlite"
    tracemalloc.start()
    try:
        result = CliRunner().invoke(main, ["history", "ingest", str(good), str(big), "--db", str(db)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    line = one_error_line(result)
    assert str(big / "results.jsonl") in line and "over the 1.0 MiB this reader takes" in line
    assert peak < 64 * MiB, f"peak {peak / MiB:.1f} MiB: the file was read before its size was checked"
    if db.exists():  # nothing of the call is stored: the good folder waits for a call without the bad one
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM folders").fetchone()[0] == 0


def test_the_hash_of_a_folder_is_that_of_its_whole_bytes(tmp_path, sweep):
    """Chunked hashing keeps every stored content_hash: the same digest as of the bytes read at once."""
    folder = sweep(tmp_path / "f", sha="b" * 40)
    raw = (folder / "results.jsonl").read_bytes()
    assert content_hash(folder) == hashlib.sha256(b"results.jsonl\0" + raw + b"\0").hexdigest()


def test_an_oversized_ab_record_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr("perfbench.history.extract.AB_BYTES", MiB, raising=False)
    folder = tmp_path / "ab"
    folder.mkdir()
    (folder / "results.jsonl").write_text("")
    with open(folder / "ab.json", "wb") as handle:
        handle.truncate(32 * MiB)
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match="over the 1.0 MiB this reader takes"):
            content_hash(folder)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB
    assert os.path.getsize(folder / "ab.json") == 32 * MiB
