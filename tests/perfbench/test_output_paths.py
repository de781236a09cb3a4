"""Output paths are checked before any work starts, and a write that fails (EACCES, ENOSPC) ends in one
`error:` line with exit 2 (never the gate's 1), leaving the previous file intact.

Tests run as root here, where file modes do not refuse anything, so an unwritable folder is simulated where
the kernel would refuse: creating a file in it raises EACCES (tempfile.mkstemp, which both the check and the
atomic writes use). A full disk is simulated at fsync, the last step of every atomic write.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections import namedtuple
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.output_paths import MIN_FREE_BYTES, check_output_dir, check_output_file

REPO = Path(__file__).resolve().parents[2]
BASELINE = REPO / "baselines" / "ci_smoke"
TRACE = REPO / "tests" / "fixtures" / "cpu_traces" / "graph_all_on.json.gz"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def assert_one_error_line(result, *needles: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def result_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    shutil.copytree(BASELINE, folder)
    return folder


@pytest.fixture
def locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder in which creating a file fails with EACCES, as an unwritable folder does for a non-root user."""
    folder = tmp_path / "locked"
    folder.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        where = Path(kwargs.get("dir") or (args[2] if len(args) > 2 else tempfile.gettempdir()))
        if where.resolve() == folder.resolve() or folder.resolve() in where.resolve().parents:
            raise PermissionError(errno.EACCES, "Permission denied", str(where))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return folder


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write that reaches fsync fails as on a full disk."""
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".perfbench-write")]


# ---- the shared check ---------------------------------------------------------------------------------------
def test_a_creatable_folder_passes_and_the_check_leaves_nothing_behind(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    assert check_output_dir(target, "--out") == target
    assert not (tmp_path / "a").exists() and list(tmp_path.iterdir()) == []
    assert check_output_file(tmp_path / "new" / "gate.md", "--summary") == tmp_path / "new" / "gate.md"
    assert list(tmp_path.iterdir()) == []


def test_paths_of_the_wrong_kind_are_refused_in_one_line(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [(lambda: check_output_dir(a_file, "--out"), "exists and is not a folder"),
             (lambda: check_output_dir(a_file / "sub" / "deeper", "--out"), "is a file, not a folder"),
             (lambda: check_output_file(tmp_path, "--summary"), "is a folder; give a file path"),
             (lambda: check_output_file(a_file / "gate.md", "--summary"), "is a file, not a folder")]
    for call, needle in cases:
        with pytest.raises(UserError, match=needle) as info:
            call()
        assert "\n" not in str(info.value)


def test_a_special_file_is_not_an_output_file(tmp_path):  # one more case of the class
    fifo = tmp_path / "gate.md"
    os.mkfifo(fifo)  # an atomic write would replace it; a plain write would block on it
    with pytest.raises(UserError, match="not a regular file"):
        check_output_file(fifo, "--summary")


# ---- each command checks before it works --------------------------------------------------------------------
def test_report_refuses_a_folder_whose_report_path_is_a_file(result_folder):
    (result_folder / "report").write_text("not a folder")
    assert_one_error_line(invoke("report", str(result_folder)), "FOLDER", "exists and is not a folder")
    assert not (result_folder / "report.html").exists()


def test_trace_out_under_a_file_is_refused_before_parsing(tmp_path):
    (tmp_path / "file").write_text("x")
    assert_one_error_line(invoke("trace", str(TRACE), "--out", str(tmp_path / "file" / "tables")),
                          "--out", "is a file, not a folder")


def test_baseline_save_to_a_destination_under_a_file_is_refused(result_folder, tmp_path):
    (tmp_path / "file").write_text("x")
    assert_one_error_line(invoke("baseline", "save", str(result_folder), str(tmp_path / "file" / "base")),
                          "DEST", "is a file, not a folder")


def test_gate_summary_under_a_file_is_exit_2_before_the_gate_runs(result_folder, tmp_path):
    (tmp_path / "file").write_text("x")
    result = invoke("gate", "--baseline", str(BASELINE), "--current", str(result_folder), "--summary",
                    str(tmp_path / "file" / "gate.md"))
    assert_one_error_line(result, "--summary", "is a file, not a folder")
    assert "gate:" not in result.stdout  # nothing was evaluated


def test_unwritable_locations_are_exit_2_for_every_command(result_folder, locked, tmp_path):
    cases = {
        "gate": ("gate", "--baseline", str(BASELINE), "--current", str(result_folder), "--summary",
                 str(locked / "gate.md")),
        "trace": ("trace", str(TRACE), "--out", str(locked / "tables")),
        "baseline": ("baseline", "save", str(result_folder), str(locked / "base")),
        "compare": ("compare", str(BASELINE), str(result_folder), "--out", str(locked)),
    }
    for name, args in cases.items():
        line = assert_one_error_line(invoke(*args), "Permission denied", str(locked))
        assert "cannot write in" in line, name
    shutil.copytree(BASELINE, locked / "results", dirs_exist_ok=True)
    assert_one_error_line(invoke("report", str(locked / "results")), "FOLDER", "Permission denied")
    assert list(locked.rglob("report*")) == [] and leftovers(tmp_path) == []


def test_a_nearly_full_disk_is_refused_before_work(result_folder, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 10**12 - 2**20, 2**20))
    assert MIN_FREE_BYTES > 2**20
    assert_one_error_line(invoke("report", str(result_folder)), "1.0 MiB free")
    assert not (result_folder / "report.html").exists()


# ---- a write that fails mid-way -----------------------------------------------------------------------------
def test_a_full_disk_while_writing_the_report_keeps_the_previous_report(result_folder, monkeypatch):
    assert invoke("report", str(result_folder)).exit_code == 0
    before = {p: p.read_bytes() for p in [result_folder / "report.html", *(result_folder / "report").glob("*")]}
    assert len(before) > 2
    full_disk(monkeypatch)
    assert_one_error_line(invoke("report", str(result_folder)), "No space left on device", "ENOSPC")
    assert {p: p.read_bytes() for p in before} == before and leftovers(result_folder) == []


def test_a_full_disk_while_writing_trace_tables_keeps_the_previous_tables(tmp_path, monkeypatch):
    out = tmp_path / "tables"
    assert invoke("trace", str(TRACE), "--out", str(out)).exit_code == 0
    before = {p: p.read_bytes() for p in out.glob("*.csv")}
    assert out / "per_op.csv" in before
    full_disk(monkeypatch)
    assert_one_error_line(invoke("trace", str(TRACE), "--out", str(out)), "No space left on device")
    assert {p: p.read_bytes() for p in out.glob("*.csv")} == before and leftovers(out) == []


def test_a_full_disk_while_writing_the_gate_summary_is_exit_2_not_1(result_folder, tmp_path, monkeypatch):
    summary = tmp_path / "gate.md"
    summary.write_text("previous summary\n")
    full_disk(monkeypatch)
    result = invoke("gate", "--baseline", str(BASELINE), "--current", str(result_folder), "--summary",
                    str(summary))
    assert_one_error_line(result, "No space left on device")
    assert summary.read_text() == "previous summary\n" and leftovers(tmp_path) == []
