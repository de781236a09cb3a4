"""The history store: folders in, the same figures out, on SQLite and PostgreSQL; idempotent, all or nothing."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine

from perfbench.cli import main
from perfbench.history import schema
from perfbench.history.extract import snapshot
from perfbench.history.series import Filters, load_series
from perfbench.history.store import open_store, snapshots
from tests.cli_helpers import one_error_line

ROOT = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> object:
    return CliRunner().invoke(main, ["history", *args])


def _folders(tmp_path: Path, sweep, count: int) -> list[tuple[Path, float, float]]:
    """`count` sweeps with known values: gdr's TTFT speed-up and the baseline's TTFT vary by folder."""
    out = []
    for i in range(count):
        gdr, ttft = 1.5 + 0.01 * i, 100.0 + i
        out.append((sweep(tmp_path / f"f{i:02d}", sha=f"{i:040x}", gdr=gdr, ttft=ttft), gdr, ttft))
    return out


def _check_round_trip(db: str, tmp_path: Path, sweep) -> None:
    folders = _folders(tmp_path, sweep, 60)
    first = _cli("ingest", *(str(f) for f, _, _ in folders), "--db", db, "--repo", str(tmp_path))
    assert first.exit_code == 0, first.output
    assert first.stdout.count("added ") == 60
    store = open_store(db)
    stored = {s.path: s for s in snapshots(store)}
    assert len(stored) == 60
    for folder, gdr, ttft in folders:
        snap = stored[str(folder.resolve())]
        assert snap == snapshot(folder, tmp_path)  # every field and point as extracted
        by = {(p.family, p.plan, p.metric): p for p in snap.points}
        # gdr's every iteration takes 1/gdr of the baseline's, so the ratio of medians is gdr
        assert by["speedup", "gdr", "ttft_ms"].value == pytest.approx(gdr, rel=1e-9)
        assert by["speedup", "rope", "ttft_ms"].value == pytest.approx(1.0, rel=1e-9)
        # the drift factors' median is 1.025 (the 5th and 6th of 10 sorted: 1.0 and 1.05)
        assert by["median", "all off", "ttft_ms"].value == pytest.approx(ttft * 1.025)
        assert by["once", "gdr", "first_ttft_ms"].value == pytest.approx(ttft / gdr * 3)
        assert snap.sha == f"{int(folder.name[1:]):040x}" and snap.commit_order is None  # not in --repo's history
    again = _cli("ingest", *(str(f) for f, _, _ in folders), "--db", db, "--repo", str(tmp_path))
    assert again.exit_code == 0 and again.stdout.count("unchanged ") == 60
    assert snapshots(store) == list(stored.values())  # re-ingest is a no-op
    store.engine.dispose()


def test_sixty_folders_round_trip_through_sqlite(tmp_path, sweep):
    _check_round_trip(str(tmp_path / "h.sqlite"), tmp_path, sweep)


def test_sixty_folders_round_trip_through_postgresql(tmp_path, sweep, pg_db):
    _check_round_trip(pg_db, tmp_path, sweep)


def test_block_timed_sweeps_store_their_paired_speed_ups(tmp_path, sweep):
    snap = snapshot(sweep(tmp_path / "b", sha="a" * 40, gdr=1.8, blocks=True), tmp_path)
    gdr = next(p for p in snap.points if (p.family, p.plan, p.metric) == ("speedup", "gdr", "ttft_ms"))
    # every within-block pair has the ratio 1.8 (the drift is shared by the block), so the estimate is 1.8
    assert (gdr.basis, gdr.verdict, gdr.n) == ("blocks", "faster", 10)
    assert gdr.value == pytest.approx(1.8, rel=1e-9)


def test_a_series_never_mixes_machines_software_or_emulation(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    variants = [{}, {"cpu_model": "Other CPU"}, {"torch": "2.14.0+cpu"}, {"emulation": "emulated npu (910b)"}]
    for i, env in enumerate(variants):
        sweep(tmp_path / f"v{i}", sha=f"{i:040x}", env=env)
    assert _cli("ingest", *(str(tmp_path / f"v{i}") for i in range(4)), "--db", db).exit_code == 0
    found = load_series(open_store(db), Filters(family="speedup", plan="gdr", metric="ttft_ms"))
    assert len(found) == 4 and all(len(s.points) == 1 for s in found)
    assert {(s.key.machine_key, s.key.software_key, s.key.emulated) for s in found} == {
        ("cpu / Test CPU 9000 / torch +cpu", "torch 2.13.0", False),
        ("cpu / Other CPU / torch +cpu", "torch 2.13.0", False),
        ("cpu / Test CPU 9000 / torch +cpu", "torch 2.14.0", False),
        ("cpu / Test CPU 9000 / torch +cpu", "torch 2.13.0", True)}


def test_commits_are_ordered_on_first_parent_history(tmp_path, sweep):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for i in range(3):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    for i, sha in enumerate(shas):
        sweep(tmp_path / f"c{i}", sha=sha)
    db = str(tmp_path / "h.sqlite")
    result = _cli("ingest", *(str(tmp_path / f"c{i}") for i in (2, 0, 1)), "--db", db, "--repo", str(repo))
    assert result.exit_code == 0, result.output
    series = load_series(open_store(db), Filters(family="speedup", plan="gdr", metric="ttft_ms"))[0]
    assert [(p.sha, p.commit_order) for p in series.ordered] == [(shas[0], 1), (shas[1], 2), (shas[2], 3)]


def test_op_families_and_ab_verdicts_are_stored(tmp_path, sweep):
    folder = sweep(tmp_path / "t", sha="a" * 40, traces=True)
    ab = sweep(tmp_path / "ab", sha="b" * 40)
    (ab / "ab.json").write_text(json.dumps({
        "kind": "perfbench ab", "scenario": "syn", "emulation": None, "base": {"ref": "main", "sha": "c" * 40},
        "head": {"ref": "HEAD", "sha": "b" * 40, "dirty": False}, "exit_code": 1,
        "verdicts": {"gdr": {"ttft_ms": {"ratio": 1.12, "ci_low": 1.08, "ci_high": 1.16, "pairs": 20,
                                         "processes": 3, "band": 0.03, "verdict": "slower"}}}}))
    snaps = [snapshot(folder, tmp_path), snapshot(ab, tmp_path)]
    assert [(f.family, f.rank) for f in snaps[0].op_families] == [("matmul", 1), ("attention", 2), ("norm", 3)]
    assert snaps[1].kind == "ab" and snaps[1].base_sha == "c" * 40
    (point,) = snaps[1].points
    assert (point.family, point.run_id, point.value, point.low, point.high, point.verdict) == (
        "ab", "gdr", 1.12, 1.08, 1.16, "slower")


def test_a_baseline_saved_from_a_folder_is_the_same_content(tmp_path, sweep):
    folder = sweep(tmp_path / "r", sha="a" * 40)
    db = str(tmp_path / "h.sqlite")
    assert CliRunner().invoke(main, ["baseline", "save", str(folder), str(tmp_path / "b")]).exit_code == 0
    result = _cli("ingest", str(folder), str(tmp_path / "b"), "--db", db)
    assert result.exit_code == 0, result.output
    assert "unchanged" in result.stdout and "stored as" in result.stdout
    assert len(snapshots(open_store(db))) == 1


def test_a_folder_whose_content_changed_replaces_its_rows(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    folder = sweep(tmp_path / "r", sha="a" * 40, gdr=2.0)
    assert "added" in _cli("ingest", str(folder), "--db", db).stdout
    sweep(folder, sha="a" * 40, gdr=2.5)  # a resumed sweep rewrote it
    assert _cli("ingest", str(folder), "--db", db).stdout.startswith(f"replaced {folder.resolve()}")
    (stored,) = snapshots(open_store(db))
    gdr = next(p for p in stored.points if (p.family, p.plan, p.metric) == ("speedup", "gdr", "ttft_ms"))
    assert gdr.value == pytest.approx(2.5)


def test_export_writes_every_stored_folder_as_json(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    folders = [sweep(tmp_path / f"e{i}", sha=f"{i:040x}") for i in range(2)]
    assert _cli("ingest", *map(str, folders), "--db", db).exit_code == 0
    out = tmp_path / "export.json"
    result = _cli("export", "--db", db, "--out", str(out))
    assert result.exit_code == 0 and result.stdout.strip() == f"export: {out}"
    exported = json.loads(out.read_text())
    assert [e["path"] for e in exported] == [str(f.resolve()) for f in folders]
    assert exported == [s.model_dump(mode="json") for s in snapshots(open_store(db))]


def test_show_lists_series_then_one_series_point_by_point(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    assert _cli("ingest", str(sweep(tmp_path / "s", sha="a" * 40, gdr=2.0)), "--db", db).exit_code == 0
    listing = _cli("show", "--db", db)
    assert listing.exit_code == 0 and "give --plan and --metric" in listing.stdout
    one = _cli("show", "--db", db, "--family", "speedup", "--plan", "gdr", "--metric", "ttft_ms")
    lines = one.stdout.strip().splitlines()
    assert lines[0].startswith("gdr TTFT speed-up · syn · cpu / Test CPU 9000 / torch +cpu")
    # not on --repo's history: a one-off; the ratio of medians is exactly 2 (every gdr iteration takes half)
    assert lines[3].split()[:3] == ["one-off", "a" * 10, "2.000"] and lines[3].split()[-2:] == ["faster",
                                                                                            str(tmp_path / "s")]
    assert f"history store: {db}" in one.stderr


# ---- refused input: one line, exit 2, nothing stored lost ------------------------------------------------------

def _stored_count(db: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("select count(*) from points").fetchone()[0])


@pytest.fixture
def populated(tmp_path, sweep) -> str:
    db = str(tmp_path / "h.sqlite")
    assert _cli("ingest", str(sweep(tmp_path / "good", sha="a" * 40)), "--db", db).exit_code == 0
    return db


def test_a_truncated_folder_is_refused_naming_file_and_line(tmp_path, sweep, populated):
    before = _stored_count(populated)
    bad = sweep(tmp_path / "bad", sha="b" * 40)
    text = (bad / "results.jsonl").read_text()
    (bad / "results.jsonl").write_text(text[: len(text) - 40])
    other = sweep(tmp_path / "other", sha="c" * 40)
    line = one_error_line(_cli("ingest", str(other), str(bad), "--db", populated))
    assert "results.jsonl:3" in line and "not valid JSON" in line
    assert _stored_count(populated) == before  # neither folder stored: all or nothing


def test_a_future_schema_folder_is_refused(tmp_path, sweep, populated):
    bad = sweep(tmp_path / "bad", sha="b" * 40)
    lines = (bad / "results.jsonl").read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), "schema_version": 99})
    (bad / "results.jsonl").write_text("\n".join(lines) + "\n")
    line = one_error_line(_cli("ingest", str(bad), "--db", populated))
    assert "results.jsonl:2" in line and "schema_version 99 is newer" in line


def test_a_mixed_folder_is_refused(tmp_path, sweep, populated):
    bad = sweep(tmp_path / "bad", sha="b" * 40)
    lines = (bad / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[2])
    record["env"]["git_sha"] = "d" * 40
    lines[2] = json.dumps(record)
    (bad / "results.jsonl").write_text("\n".join(lines) + "\n")
    line = one_error_line(_cli("ingest", str(bad), "--db", populated))
    assert "results.jsonl:3: a mixed folder: run rope has commit" in line


def test_a_folder_that_is_not_there_is_refused(tmp_path):
    line = one_error_line(_cli("ingest", str(tmp_path / "nope"), "--db", str(tmp_path / "h.sqlite")))
    assert "nope: not a folder" in line
    assert not (tmp_path / "h.sqlite").exists()


def test_a_store_path_under_a_file_is_refused(tmp_path, sweep):
    (tmp_path / "file").write_text("x")
    line = one_error_line(_cli("show", "--db", str(tmp_path / "file" / "h.sqlite")))
    assert "is a file, not a folder" in line


def test_a_corrupt_store_is_refused_and_left_as_it_was(tmp_path):
    corrupt = tmp_path / "h.sqlite"
    corrupt.write_bytes(b"not a database" * 100)
    line = one_error_line(_cli("show", "--db", str(corrupt)))
    assert "file is not a database" in line
    assert corrupt.read_bytes() == b"not a database" * 100


def test_another_database_is_not_taken_for_a_store(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("create table accounts (id int)")
    assert "not a perfbench history store" in one_error_line(_cli("show", "--db", str(other)))


def test_an_unreachable_postgresql_is_one_line(monkeypatch):
    monkeypatch.setenv("PERFBENCH_HISTORY_WAIT_S", "2")
    line = one_error_line(_cli("show", "--db", "postgresql://nobody@127.0.0.1:9/none"))
    assert line.startswith("error: --db postgresql://nobody@127.0.0.1:9/none:")


def test_a_locked_sqlite_store_is_one_line_and_loses_nothing(tmp_path, sweep, populated, monkeypatch):
    before = _stored_count(populated)
    monkeypatch.setenv("PERFBENCH_HISTORY_WAIT_S", "0.2")
    holder = sqlite3.connect(populated, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line = one_error_line(_cli("ingest", str(sweep(tmp_path / "n", sha="e" * 40)), "--db", populated))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "database is locked" in line
    assert _stored_count(populated) == before


def test_a_newer_store_is_refused(tmp_path, populated):
    with sqlite3.connect(populated) as conn:
        conn.execute("update schema_version set version = 99")
    assert "schema version 99 is newer" in one_error_line(_cli("show", "--db", populated))


# the tables as perfbench created them at schema version 1 (before op families, before version 3's identity by
# content): an old store is built from this DDL, not from today's tables
V1_DDL = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE folders (id {id}, identity VARCHAR NOT NULL, content_hash VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    sha VARCHAR, dirty BOOLEAN, commit_order INTEGER, base_sha VARCHAR, scenario VARCHAR NOT NULL,
    machine_key VARCHAR NOT NULL, software_key VARCHAR NOT NULL, emulated BOOLEAN NOT NULL,
    recorded_at VARCHAR NOT NULL, ingested_at VARCHAR NOT NULL, PRIMARY KEY (id), UNIQUE (content_hash));
CREATE INDEX folders_identity ON folders (identity);
CREATE TABLE points (id {id}, folder_id INTEGER NOT NULL, family VARCHAR NOT NULL, run_id VARCHAR NOT NULL,
    "plan" VARCHAR NOT NULL, shape VARCHAR NOT NULL, metric VARCHAR NOT NULL, value FLOAT NOT NULL, low FLOAT,
    high FLOAT, n INTEGER NOT NULL, verdict VARCHAR NOT NULL, basis VARCHAR NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(folder_id) REFERENCES folders (id) ON DELETE CASCADE);
CREATE INDEX points_series ON points (family, "plan", metric);
CREATE INDEX points_folder ON points (folder_id);
INSERT INTO schema_version (version) VALUES (1);
INSERT INTO folders (identity, content_hash, kind, sha, dirty, commit_order, scenario, machine_key, software_key,
    emulated, recorded_at, ingested_at) VALUES
    ('/old/a', 'h1', 'results', '{a}', false, 1, 'syn', 'm', 's', false, '2026-01-01', '2026-01-01'),
    ('/old/b', 'h2', 'results', '{b}', false, 1, 'syn', 'm', 's', false, '2026-01-02', '2026-01-02'),
    ('/old/c', 'h3', 'results', '{c}', false, 7, 'syn', 'm', 's', false, '2026-01-03', '2026-01-03');
INSERT INTO points (folder_id, family, run_id, "plan", shape, metric, value, low, high, n, verdict, basis) VALUES
    (1, 'speedup', 'gdr', 'gdr', 'x', 'ttft_ms', 2.0, 1.9, 2.1, 10, 'faster', 'blocks');
"""


def _check_old_store_migrates(db: str, tmp_path: Path, sweep, id_type: str, first_write: str) -> None:
    engine = create_engine(db.replace("postgresql://", "postgresql+psycopg://") if "://" in db else f"sqlite:///{db}")
    with engine.begin() as conn:
        for statement in V1_DDL.format(id=id_type, a="a" * 40, b="b" * 40, c="c" * 40).split(";"):
            if statement.strip():
                conn.exec_driver_sql(statement)
    engine.dispose()
    # a read neither migrates nor waits: it says what to run, and leaves the store as it was
    line = one_error_line(_cli("show", "--db", db))
    assert "schema version 1" in line and "perfbench history migrate" in line
    if first_write == "migrate":
        assert _cli("migrate", "--db", db).stdout.strip() == f"migrated from schema version 1 to {schema.LATEST}"
    result = _cli("ingest", str(sweep(tmp_path / "new", sha="d" * 40, traces=True)), "--db", db)
    assert result.exit_code == 0, result.output
    assert _cli("migrate", "--db", db).stdout.strip() == f"already at schema version {schema.LATEST}"
    store = open_store(db)
    old_a, old_b, old_c, new = snapshots(store)
    assert (old_a.path, old_a.points[0].value, old_a.points[0].level, old_a.op_families) == ("/old/a", 2.0, 0.95, [])
    assert len({old_a.run_key, old_b.run_key, old_c.run_key, new.run_key}) == 4
    # position 1 held by two commits was read in a shallow clone: cleared; a position of its own is kept
    assert (old_a.commit_order, old_b.commit_order, old_c.commit_order) == (None, None, 7)
    assert new.op_families and new.path == str((tmp_path / "new").resolve())
    store.engine.dispose()


def test_a_version_1_sqlite_store_migrates_only_on_a_write(tmp_path, sweep):
    _check_old_store_migrates(str(tmp_path / "v1.sqlite"), tmp_path, sweep, "INTEGER NOT NULL", "ingest")


def test_a_version_1_postgresql_store_migrates_only_on_a_write(tmp_path, sweep, pg_db):
    _check_old_store_migrates(pg_db, tmp_path, sweep, "SERIAL NOT NULL", "migrate")


def _ingest_at_once(db: str, tmp_path: Path, sweep) -> list:
    halves = [[sweep(tmp_path / f"p{k}-{i}", sha=f"{k}{i:039x}") for i in range(4)] for k in (1, 2)]
    code = ("import sys; from perfbench.cli import main; "
            "main(['history', 'ingest', *sys.argv[1:]], standalone_mode=True)")
    procs = [subprocess.Popen([sys.executable, "-c", code, *map(str, half), "--db", db], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for half in halves]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    stored = snapshots(open_store(db))
    assert len(stored) == 8 and all(len(s.points) == 16 for s in stored)
    assert not any(math.isnan(p.value) for s in stored for p in s.points)
    return stored


def test_two_processes_ingesting_at_once_into_sqlite_lose_nothing(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    _ingest_at_once(db, tmp_path, sweep)
    with sqlite3.connect(db) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"


def test_two_processes_ingesting_at_once_into_postgresql_lose_nothing(tmp_path, sweep, pg_db):
    # both start on an empty database: the advisory lock also keeps the schema's creation to one of them
    _ingest_at_once(pg_db, tmp_path, sweep)
