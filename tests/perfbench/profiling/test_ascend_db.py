"""The Ascend `.db` export (ascend_pytorch_profiler_{rank}.db): the same events table as the text export.

Two independent checks. A real .db from the public MindStudio Insight test data, against the profiler's own
OVERLAP_ANALYSIS intervals and against the text export of the same program (a separate capture: the same ops
and counts). And the text fixture written in the documented schema by benchmarks/ascend_text_to_db.py (it
reads the text files with csv/json, not with perfbench), where both readers must give one events table.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.profiling import load_trace
from perfbench.profiling.ascend import parse_ascend_dir
from perfbench.profiling.tables import compute_vs_communication, per_category, per_op
from tests.cli_helpers import one_error_line

from .conftest import NPU_FIXTURES, require
from .synthetic import V2, npu_trace_view, write_json, write_kernel_details

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from ascend_text_to_db import text_to_db

TEXT_LEVEL1 = NPU_FIXTURES / "msinsight_pytorch_text_level1"
DB_LEVEL1 = NPU_FIXTURES / "msinsight_pytorch_db_level1"
DB_FILE = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
KEY = ["rank", "side", "start_us", "name", "stream"]


def _sorted(events: pd.DataFrame) -> pd.DataFrame:
    return events.sort_values(KEY, kind="stable").reset_index(drop=True)


def _as_db(text_run: Path, dest: Path) -> Path:
    """A run folder holding only the .db written from `text_run`'s rank 0 text export (and its profiler_info)."""
    output = dest / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    for info in (text_run / "rank0_ascend_pt").glob("profiler_info*.json"):
        shutil.copy(info, output.parent / info.name)
    text_to_db(text_run / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", output / "ascend_pytorch_profiler_0.db")
    return dest


def _synthetic_text(root: Path) -> Path:
    output = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    write_kernel_details(output / "kernel_details.csv", V2)
    write_json(output / "trace_view.json", npu_trace_view())
    return root


@pytest.mark.parametrize("make_text", [lambda tmp: require(TEXT_LEVEL1), lambda tmp: _synthetic_text(tmp / "t")],
                         ids=["level1_fixture", "synthetic_with_scopes"])
def test_text_and_db_readers_give_the_same_tables(tmp_path, make_text):
    text_run = make_text(tmp_path)
    text, db = parse_ascend_dir(text_run), parse_ascend_dir(_as_db(text_run, tmp_path / "db"))

    pd.testing.assert_frame_equal(_sorted(text.events), _sorted(db.events))
    for table in (per_op, per_category, compute_vs_communication):
        pd.testing.assert_frame_equal(table(text.events), table(db.events))
    assert db.level == text.level and db.ranks == text.ranks
    assert db.events["module"].notna().any() == text.events["module"].notna().any()


def test_synthetic_db_keeps_the_annotation_context(tmp_path):
    events = parse_ascend_dir(_as_db(_synthetic_text(tmp_path / "t"), tmp_path / "db")).events.set_index("name")
    matmul = events.loc["aclnnMatmul_MatMulV3Common_MatMulV3"]
    assert (matmul["phase"], matmul["layer"], matmul["layer_type"], matmul["module"], matmul["step"]) == (
        "decode", 3, "full_attention", "attn", 2)
    assert events.loc["hcom_allReduce__586_0_1", "module"] == "moe"


def _raw(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_real_db_matches_its_own_overlap_analysis():
    """The profiler's OVERLAP_ANALYSIS (types 0 compute, 2 communication not overlapped, 3 free; ns) holds the
    same intervals our compute_vs_communication computes from the tasks."""
    db = require(DB_LEVEL1 / DB_FILE)
    totals = dict(_raw(db, "SELECT type, SUM(endNs - startNs) FROM OVERLAP_ANALYSIS GROUP BY type"))
    kernels = _raw(db, "SELECT COUNT(*) FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId")
    collectives = _raw(db, "SELECT COUNT(*) FROM COMMUNICATION_OP")

    profile = parse_ascend_dir(DB_LEVEL1)
    ours = compute_vs_communication(profile.events).iloc[0]

    assert profile.level == "Level1" and profile.ranks == [0] and profile.notes == []
    assert (profile.events["side"] == "device").sum() == kernels[0][0] + collectives[0][0]
    assert ours["compute_us"] == pytest.approx(totals[0] / 1000, rel=1e-9)
    assert ours["communication_not_overlapped_us"] == pytest.approx(totals[2] / 1000, rel=1e-9)
    assert ours["free_us"] == pytest.approx(totals[3] / 1000, rel=1e-9)
    assert profile.events.query("side == 'device'")["step"].eq(50).all()


def test_real_db_has_the_ops_of_the_text_capture_of_the_same_program():
    """Another capture of the same training step (text export): every op, and how often it ran, agree."""
    counts = [per_op(parse_ascend_dir(require(p)).events).set_index(["side", "name", "category"])["count"]
              for p in (DB_LEVEL1, TEXT_LEVEL1)]
    pd.testing.assert_series_equal(counts[0].sort_index(), counts[1].sort_index())


def test_real_db_input_shapes_are_those_of_compute_task_info():
    db = require(DB_LEVEL1 / DB_FILE)
    rows = _raw(db, "SELECT s.value FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId "
                    "JOIN STRING_IDS s ON s.id = c.inputShapes ORDER BY t.startNs")
    expected = [v.strip('"') for (v,) in rows]
    events = parse_ascend_dir(DB_LEVEL1).events
    device = events[(events["side"] == "device") & (events["category"] != "communication")]
    assert device.sort_values("start_us")["input_shapes"].fillna("N/A").tolist() == expected


def test_perfbench_trace_reads_a_db_file_and_a_folder_holding_only_it(tmp_path):
    db = require(DB_LEVEL1 / DB_FILE)
    by_file, by_folder = load_trace(db), load_trace(DB_LEVEL1)
    pd.testing.assert_frame_equal(by_file.events, by_folder.events)
    assert by_file.kind == "ascend"

    result = CliRunner().invoke(main, ["trace", str(db), "--out", str(tmp_path / "tables")])
    assert result.exit_code == 0, result.output
    assert "Level1, rank 0; 191 device / 859 host events" in result.output
    assert (tmp_path / "tables" / "per_op.csv").is_file()


def test_prefer_db_reads_the_db_where_both_exports_are(tmp_path):
    both = tmp_path / "both" / "rank0_ascend_pt"
    shutil.copytree(require(TEXT_LEVEL1 / "rank0_ascend_pt"), both)
    shutil.copy(require(DB_LEVEL1 / DB_FILE), both / "ASCEND_PROFILER_OUTPUT")  # another capture: other times

    text_only, db_only = parse_ascend_dir(TEXT_LEVEL1).events, parse_ascend_dir(DB_LEVEL1).events
    pd.testing.assert_frame_equal(parse_ascend_dir(both).events, text_only)
    pd.testing.assert_frame_equal(parse_ascend_dir(both, prefer="db").events, db_only)
    pd.testing.assert_frame_equal(load_trace(both, prefer="db").events, db_only)

    asked = parse_ascend_dir(TEXT_LEVEL1, prefer="db")  # no .db there: the text export, with a note
    pd.testing.assert_frame_equal(asked.events, text_only)
    assert any("the .db export was asked for" in note for note in asked.notes)


# ---- hostile files ----

def _copy(tmp_path: Path) -> Path:
    db = tmp_path / "run" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    db.parent.mkdir(parents=True)
    shutil.copy(require(DB_LEVEL1 / DB_FILE), db)
    return db


def _edit(db: Path, *statements: str) -> None:
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.mark.parametrize(("content", "message"), [
    (b"", "empty file (0 bytes)"),
    (b"SQLite format 3\x00 but then nothing", "not an SQLite database"),
    (b"kernel,rows\n1,2\n", "not an SQLite database"),
])
def test_a_file_that_is_not_sqlite_is_one_line_naming_it(tmp_path, content, message):
    db = tmp_path / "ascend_pytorch_profiler_0.db"
    db.write_bytes(content)
    line = one_error_line(CliRunner().invoke(main, ["trace", str(db), "--out", str(tmp_path / "t")]))
    assert str(db) in line and message in line


@pytest.mark.parametrize(("statement", "message"), [
    ("DROP TABLE TASK", "no TASK table"),
    ("DROP TABLE STRING_IDS", "no STRING_IDS table"),
    ("ALTER TABLE TASK DROP COLUMN endNs", "table TASK lacks column(s) endNs"),
    ("ALTER TABLE COMPUTE_TASK_INFO RENAME COLUMN globalTaskId TO taskKey",
     "table COMPUTE_TASK_INFO lacks column(s) globalTaskId"),
    ("ALTER TABLE PYTORCH_API DROP COLUMN globalTid", "table PYTORCH_API lacks column(s) globalTid"),
])
def test_missing_tables_and_columns_name_the_file_and_table(tmp_path, statement, message):
    db = _copy(tmp_path)
    _edit(db, statement)
    with pytest.raises(UserError) as err:
        load_trace(db)
    assert str(err.value).startswith(f"{db}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_unusable_rows_are_skipped_and_counted(tmp_path):
    db = _copy(tmp_path)
    first, second, third = (r[0] for r in _raw(db, "SELECT t.rowid FROM TASK t JOIN COMPUTE_TASK_INFO c "
                                                   "ON c.globalTaskId = t.globalTaskId ORDER BY t.rowid LIMIT 3"))
    host_op = _raw(db, "SELECT rowid FROM PYTORCH_API WHERE type = 50001 ORDER BY rowid DESC LIMIT 1")[0][0]
    _edit(db, f"UPDATE TASK SET startNs = NULL WHERE rowid = {first}",
          f"UPDATE TASK SET startNs = 'soon' WHERE rowid = {second}",
          f"UPDATE TASK SET endNs = startNs - 5 WHERE rowid = {third}",
          f"UPDATE PYTORCH_API SET endNs = '17e17' WHERE rowid = {host_op}")

    profile = parse_ascend_dir(db.parent)

    assert (profile.events["side"] == "device").sum() == 191 - 3
    assert any("skipped 1 row: PYTORCH_API endNs is missing or not an integer ns" in n for n in profile.notes)
    notes = [n for n in profile.notes if "skipped" in n]
    assert any("skipped 2 rows: TASK startNs is missing or not an integer ns" in n for n in notes)
    assert any("skipped 1 row: TASK endNs before startNs" in n for n in notes)


def test_a_db_whose_every_kernel_row_is_unusable_is_an_error(tmp_path):
    db = _copy(tmp_path)
    _edit(db, "UPDATE TASK SET endNs = -1", "DELETE FROM COMMUNICATION_OP")
    with pytest.raises(UserError, match=r"no usable kernel row; skipped .*TASK endNs"):
        load_trace(db)


def test_a_db_without_host_data_has_kernels_without_context(tmp_path):
    db = _copy(tmp_path)
    _edit(db, "DROP TABLE PYTORCH_API")
    profile = parse_ascend_dir(db.parent)
    assert set(profile.events["side"]) == {"device"}
    assert any("has no PYTORCH_API table" in note for note in profile.notes)
