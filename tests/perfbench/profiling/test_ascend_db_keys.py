"""An Ascend `.db` is read with the keys the format promises: a crafted file whose join keys repeat is refused in
one line naming the table and key, never multiplied into millions of kernels (or a query that never ends)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.profiling import load_trace
from tests.cli_helpers import one_error_line

from .conftest import NPU_FIXTURES, require

DB_FILE = (NPU_FIXTURES / "msinsight_pytorch_db_level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
           / "ascend_pytorch_profiler_0.db")


def _write(db: Path, *statements: str) -> Path:
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)
    return db


def _shared_task_id(db: Path, tasks: int) -> Path:
    """`tasks` TASK rows and as many COMPUTE_TASK_INFO rows, all with one globalTaskId (a product of tasks**2)."""
    return _write(
        db,
        "CREATE TABLE STRING_IDS(id INTEGER, value TEXT)",
        "INSERT INTO STRING_IDS VALUES (10, 'aclnnAdd'), (11, 'Add'), (12, 'AI_VECTOR_CORE'), (13, '\"4,4\"')",
        "CREATE TABLE TASK(startNs INTEGER, endNs INTEGER, globalTaskId INTEGER, streamId INTEGER)",
        f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {tasks}) "
        "INSERT INTO TASK SELECT 5000 + 20 * i, 5000 + 20 * i + 7, 42, 3 FROM n",
        "CREATE TABLE COMPUTE_TASK_INFO(globalTaskId INTEGER, name INTEGER, opType INTEGER, taskType INTEGER, "
        "inputShapes INTEGER)",
        f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {tasks}) "
        "INSERT INTO COMPUTE_TASK_INFO SELECT 42, 10, 11, 12, 13 FROM n")


def _trace_line(db: Path, out: Path) -> str:
    line = one_error_line(CliRunner().invoke(main, ["trace", str(db), "--out", str(out)]))
    assert str(db) in line
    return line


def test_a_globaltaskid_shared_by_many_rows_is_refused_not_multiplied(tmp_path):
    db = _shared_task_id(tmp_path / "jb" / "ascend_pytorch_profiler_0.db", 150)
    line = _trace_line(db, tmp_path / "out")
    assert "table TASK repeats its key globalTaskId" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_repeat_in_compute_task_info_alone_is_refused(tmp_path):
    db = _shared_task_id(tmp_path / "jb" / "ascend_pytorch_profiler_0.db", 3)
    _write(db, "UPDATE TASK SET globalTaskId = rowid")  # TASK unique now; COMPUTE_TASK_INFO still repeats 42
    _write(db, "UPDATE COMPUTE_TASK_INFO SET globalTaskId = 1 WHERE rowid <= 2")
    with pytest.raises(UserError, match=r"table COMPUTE_TASK_INFO repeats its key globalTaskId \(1\)") as err:
        load_trace(db)
    assert "\n" not in str(err.value)


def _copy(tmp_path: Path) -> Path:
    db = tmp_path / "run" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    db.parent.mkdir(parents=True)
    shutil.copy(require(DB_FILE), db)
    return db


def test_string_ids_repeating_an_id_is_refused_in_one_line(tmp_path):
    db = _write(_copy(tmp_path),
                "ALTER TABLE STRING_IDS RENAME TO KEPT",
                "CREATE TABLE STRING_IDS(id INTEGER, value TEXT)",
                "INSERT INTO STRING_IDS SELECT id, value FROM KEPT",
                "INSERT INTO STRING_IDS SELECT id, value || '_again' FROM KEPT",
                "INSERT INTO STRING_IDS SELECT id, value || '_thrice' FROM KEPT",
                "DROP TABLE KEPT")
    line = _trace_line(db, tmp_path / "out")
    assert "table STRING_IDS repeats its key id" in line


def test_rows_beyond_the_table_read_are_refused_whatever_the_key_check_saw(tmp_path):
    """An untyped id column holds 1 and '1' (distinct to GROUP BY) and both match an INTEGER name column: the
    kernel query's row cap (TASK's row count) refuses what the key check could not see."""
    db = _shared_task_id(tmp_path / "aff" / "ascend_pytorch_profiler_0.db", 4)
    _write(db, "UPDATE TASK SET globalTaskId = rowid", "UPDATE COMPUTE_TASK_INFO SET globalTaskId = rowid",
           "DROP TABLE STRING_IDS", "CREATE TABLE STRING_IDS(id, value)",
           "INSERT INTO STRING_IDS VALUES (10, 'aclnnAdd'), ('10', 'aclnnAdd2'), (11, 'Add'), (12, 'AI_CORE')")
    with pytest.raises(UserError, match=r"reading table TASK gives more rows than its 4") as err:
        load_trace(db)
    assert str(err.value).startswith(f"{db}: ")


def test_host_ops_sharing_a_connection_id_are_refused(tmp_path):
    db = _write(_copy(tmp_path), "UPDATE PYTORCH_API SET connectionId = (SELECT min(id) FROM CONNECTION_IDS)")
    line = _trace_line(db, tmp_path / "out")
    assert "PYTORCH_API.connectionId" in line and "a connectionId repeats" in line


def test_the_real_export_still_reads(tmp_path):
    profile = load_trace(_copy(tmp_path))
    assert (profile.events["side"] == "device").sum() == 191


def test_a_table_whose_name_holds_a_quote_is_no_error(tmp_path):
    """Any table name SQLite takes is listed safely: the identifier is quoted with its quotes doubled."""
    db = _write(_copy(tmp_path), 'CREATE TABLE "we""ird" (x INTEGER)')
    profile = load_trace(db)
    assert (profile.events["side"] == "device").sum() == 191
