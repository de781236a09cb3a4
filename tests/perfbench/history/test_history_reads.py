"""Reads never wait for a writer and never migrate: `show`, `changes` and `page` complete while another process
holds an ingest's transaction open (its lock taken, rows written, not committed), on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.history.store import ADVISORY_LOCK

# what an ingest holds while it writes: the writer's lock and an uncommitted folder row
SQLITE_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO folders (path, run_key, content_hash, kind, scenario, machine_key, software_key, emulated,"
             " recorded_at, ingested_at) VALUES ('/x', 'k', 'uncommitted', 'results', 's', 'm', 's', 0, '', '')")
print("held", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""
POSTGRES_HOLDER = f"""
import psycopg, sys
conn = psycopg.connect(sys.argv[1])
conn.execute("SELECT pg_advisory_xact_lock({ADVISORY_LOCK})")
conn.execute("INSERT INTO folders (path, run_key, content_hash, kind, scenario, machine_key, software_key, emulated,"
             " recorded_at, ingested_at) VALUES ('/x', 'k', 'uncommitted', 'results', 's', 'm', 's', false, '', '')")
print("held", flush=True)
sys.stdin.readline()
conn.rollback()
"""


def _reads_beside_a_writer(db: str, holder: str, tmp_path: Path, sweep, monkeypatch) -> None:
    runner = CliRunner()
    folders = [str(sweep(tmp_path / f"c{i}", sha=c * 40)) for i, c in enumerate("abcd")]
    assert runner.invoke(main, ["history", "ingest", *folders, "--db", db]).exit_code == 0
    monkeypatch.setenv("PERFBENCH_HISTORY_WAIT_S", "1")  # a read that waited for the lock would fail in 1 s
    proc = subprocess.Popen([sys.executable, "-c", holder, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        show = runner.invoke(main, ["history", "show", "--db", db])
        assert show.exit_code == 0 and "give --plan and --metric" in show.stdout, show.output
        changes = runner.invoke(main, ["history", "changes", "--db", db])
        assert changes.exit_code == 0 and "series" in changes.stdout, changes.output
        page = runner.invoke(main, ["history", "page", "--db", db, "--out", str(tmp_path / "t.html")])
        assert page.exit_code == 0, page.output
        # near miss: a second writer does wait for the first, and says so in one line after the wait
        ingest = runner.invoke(main, ["history", "ingest", str(sweep(tmp_path / "e", sha="e" * 40)), "--db", db])
        assert ingest.exit_code == 2 and "lock" in ingest.stderr, ingest.output
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_read_completes_while_an_ingest_holds_a_sqlite_store(tmp_path, sweep, monkeypatch):
    _reads_beside_a_writer(str(tmp_path / "h.sqlite"), SQLITE_HOLDER, tmp_path, sweep, monkeypatch)


def test_a_read_completes_while_an_ingest_holds_a_postgresql_store(tmp_path, sweep, pg_db, monkeypatch):
    pytest.importorskip("psycopg")
    _reads_beside_a_writer(pg_db, POSTGRES_HOLDER, tmp_path, sweep, monkeypatch)


def test_a_read_of_a_missing_sqlite_store_creates_nothing(tmp_path):
    db = tmp_path / "none" / "h.sqlite"
    result = CliRunner().invoke(main, ["history", "show", "--db", str(db)])
    assert result.exit_code == 0 and result.stdout.startswith("no series matches")
    assert not db.parent.exists()
