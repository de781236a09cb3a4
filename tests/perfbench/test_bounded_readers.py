"""Every reader of someone else's file (chrome traces, Ascend profiler output and .db, the verify bundle) refuses
JSON nested 100,000 levels deep, a 2 GB (sparse) file or tar member and a wrongly typed field with one line naming
the file (and the field), quickly and without reading the file into memory (perfbench/bounded_files.py)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from perfbench.cli import main
from perfbench.tools.verify.summary import ItemResult, Summary
from tests.cli_helpers import one_error_line
from tests.perfbench.profiling.synthetic import V2, V3, npu_trace_view, write_json, write_kernel_details
from tests.records_kit import run_result

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000 + "]" * 100_000
TWO_GB = 2 * 1024**3
OUT = "ASCEND_PROFILER_OUTPUT"


def trace(path: Path, out: Path) -> Result:
    return CliRunner().invoke(main, ["trace", str(path), "--out", str(out)])


def read(path: Path) -> Result:
    return CliRunner().invoke(main, ["verify", "--read", str(path)])


def sparse(path: Path, size: int = TWO_GB) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)  # a hole: no disk, no memory
    return path


def ascend_run(root: Path) -> Path:
    """A minimal Ascend profiler folder: kernel_details.csv and trace_view.json of the synthetic run."""
    write_kernel_details(root / "run_ascend_pt" / OUT / "kernel_details.csv", V2)
    write_json(root / "run_ascend_pt" / OUT / "trace_view.json", npu_trace_view())
    return root / "run_ascend_pt"


def summary_dict() -> dict:
    summary = Summary(started="2026-01-01T00:00:00Z", platform="910b", series="A2", device_name="Ascend910B",
                      device_count=1, emulation=None, quick=True, devices=1, faults=[], versions={"torch": "2.9"},
                      items=[ItemResult("environment", "pass")])
    return summary.to_dict()


def bundle(root: Path, summary_text: str | None = None) -> Path:
    """DIR.tar.gz holding DIR/summary.json."""
    folder = root / "v"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(summary_text if summary_text is not None else json.dumps(summary_dict()))
    archive = root / "v.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="v")
    return archive


def synthetic_db(root: Path) -> Path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from ascend_text_to_db import text_to_db

    db = root / "db_ascend_pt" / OUT / "ascend_pytorch_profiler_0.db"
    db.parent.mkdir(parents=True)
    text_to_db(ascend_run(root / "text") / OUT, db)
    return db


class TestBoundedReaders:
    # ---- 100,000 levels of nesting -------------------------------------------------------------------

    def test_a_deep_chrome_trace(self, tmp_path: Path):
        path = tmp_path / "t.json"
        path.write_text(DEEP)
        assert one_error_line(trace(path, tmp_path / "o")).startswith(f"error: {path}: JSON nested deeper than")

    def test_a_deep_gzipped_chrome_trace(self, tmp_path: Path):
        import gzip

        path = tmp_path / "t.json.gz"
        path.write_bytes(gzip.compress(DEEP.encode()))
        assert one_error_line(trace(path, tmp_path / "o")).startswith(f"error: {path}: JSON nested deeper than")

    def test_a_deep_profiler_info(self, tmp_path: Path):
        run = ascend_run(tmp_path)
        (run / "profiler_info.json").write_text(DEEP)
        line = one_error_line(trace(run, tmp_path / "o"))
        assert line.startswith(f"error: {run / 'profiler_info.json'}: JSON nested deeper than")

    def test_a_deep_communication_json(self, tmp_path: Path):
        run = ascend_run(tmp_path)
        (run / OUT / "communication.json").write_text(DEEP)
        line = one_error_line(trace(run, tmp_path / "o"))
        assert line.startswith(f"error: {run / OUT / 'communication.json'}: JSON nested deeper than")

    def test_a_deep_summary_in_a_folder_and_in_a_bundle(self, tmp_path: Path):
        archive = bundle(tmp_path, DEEP)
        for target, named in ((archive, f"{archive}:v/summary.json"),
                              (tmp_path / "v", tmp_path / "v" / "summary.json")):
            assert one_error_line(read(target)).startswith(f"error: {named}: JSON nested deeper than")

    # ---- wrongly typed fields ------------------------------------------------------------------------

    @pytest.mark.parametrize("change,field", [
        ({"format": "x"}, "format"),
        ({"format": 1e400}, "format"),
        ({"versions": ["torch", "2.9"]}, "versions"),
        ({"items": [{"name": "ops", "status": "pass", "reason": 5}]}, "items.0.reason"),
        ({"items": [{"name": "ops", "status": "done"}]}, "items.0.status"),
        ({"device_count": "one"}, "device_count"),
    ], ids=["format-text", "format-1e400", "versions-list", "reason-int", "status-unknown", "count-text"])
    def test_a_wrongly_typed_summary_field(self, tmp_path: Path, change: dict, field: str):
        text = json.dumps({**summary_dict(), **change})  # json writes 1e400 as Infinity
        archive = bundle(tmp_path, text)
        assert one_error_line(read(archive)).startswith(f"error: {archive}:v/summary.json: {field}: ")

    def test_a_wrongly_typed_profiler_info_field(self, tmp_path: Path):
        run = ascend_run(tmp_path)
        write_json(run / "profiler_info.json", {"rank_id": [0]})
        assert one_error_line(trace(run, tmp_path / "o")) == \
            f"error: {run / 'profiler_info.json'}: rank_id: expected an integer, got list [0]"

    def test_garbage_in_communication_json_is_no_zero(self, tmp_path: Path):
        run = ascend_run(tmp_path)
        write_json(run / OUT / "communication.json", {"step1": {"collective": {"hcom_allReduce__1@g": {
            "Communication Time Info": {"Elapse Time(ms)": 1.0},
            "Communication Bandwidth Info": {"RDMA": {"Transit Size(MB)": "lots", "Transit Time(ms)": 1}}}}}})
        assert one_error_line(trace(run, tmp_path / "o")) == (
            f"error: {run / OUT / 'communication.json'}: step1/collective/hcom_allReduce__1@g/RDMA: "
            "Transit Size(MB): expected a number, got 'lots'")

    @pytest.mark.parametrize("name,header,row,column", [
        ("step_trace_time.csv", "Device_id,Step,Computing,Communication(Not Overlapped),Free", "0,1,12.5,oops,1",
         "Communication(Not Overlapped)"),
        ("op_statistic.csv", "Device_id,OP Type,Core Type,Count,Total Time(us)", "0,MatMul,AI_CORE,3,x1",
         "Total Time(us)"),
    ], ids=["step_trace_time", "op_statistic"])
    def test_garbage_in_a_profiler_csv_names_the_file_line_and_column(self, tmp_path: Path, name: str, header: str,
                                                                     row: str, column: str):
        run = ascend_run(tmp_path)
        (run / OUT / name).write_text(f"{header}\n0,1,1,1,1\n{row}\n")
        bad = row.split(",")[list(header.split(",")).index(column)]
        assert one_error_line(trace(run, tmp_path / "o")) == \
            f"error: {run / OUT / name}: line 3: {column}: expected a number, got {bad!r}"

    @pytest.mark.parametrize("sql,field", [
        ("UPDATE STEP_TIME SET id = 'step-a'", "STEP_TIME.id (row 1)"),
        ("DROP TABLE ENUM_API_TYPE; CREATE TABLE ENUM_API_TYPE (id, name); "
         "INSERT INTO ENUM_API_TYPE VALUES ('x', 'op')", "ENUM_API_TYPE.id of 'op'"),
    ], ids=["step_time", "enum_api_type"])
    def test_text_ids_in_a_profiler_db(self, tmp_path: Path, sql: str, field: str):
        db = synthetic_db(tmp_path)
        with sqlite3.connect(db) as conn:
            conn.executescript(sql)
        line = one_error_line(trace(db, tmp_path / "o"))
        assert line.startswith(f"error: {db}: {field}: expected an integer, got ")

    # ---- quadratic input -----------------------------------------------------------------------------

    def test_repeated_kernel_details_headers_are_refused_up_front(self, tmp_path: Path):
        csv = tmp_path / "kernel_details.csv"
        csv.write_text(",".join(["Name"] * 20_000) + "\n" + ",".join(["x"] * 20_000) + "\n")  # ~100 KB
        assert one_error_line(trace(csv, tmp_path / "o")) == \
            f"error: {csv}: header names 'Name' more than once: not a profiler's CSV"

    def test_a_real_kernel_details_header_has_no_duplicate(self, tmp_path: Path):
        for header in (V2, V3):
            csv = write_kernel_details(tmp_path / f"{len(header)}" / "kernel_details.csv", header)
            assert trace(csv, tmp_path / "o").exit_code == 0

    # ---- 2 GB sparse files and tar members -----------------------------------------------------------

    def test_two_gb_files_are_refused_before_they_are_read(self, tmp_path: Path):
        if shutil.which("tar") is None:
            pytest.skip("GNU tar writes the sparse member")
        member = sparse(tmp_path / "b" / "v" / "summary.json")
        archive = tmp_path / "v.tar.gz"
        subprocess.run(["tar", "-czSf", str(archive), "-C", str(tmp_path / "b"), "v/summary.json"], check=True)
        assert archive.stat().st_size < 1000
        run = ascend_run(tmp_path / "a")
        cases = {
            "chrome": sparse(tmp_path / "t.json"),
            "profiler_info": sparse(run / "profiler_info.json"),
            "communication": sparse(tmp_path / "c" / "communication.json"),
            "kernel_details": sparse(tmp_path / "k" / "kernel_details.csv"),
            "step_trace": sparse(tmp_path / "s" / "step_trace_time.csv"),
            "db": sparse(tmp_path / "d" / "ascend_pytorch_profiler_0.db"),
            "bundle": archive,
            "summary": member,
        }
        # each reader in one fresh process: its peak RSS is what these reads cost (plus the imports)
        script = textwrap.dedent("""
            import json, resource, sys, time
            from pathlib import Path
            from perfbench.errors import UserError
            from perfbench.profiling import load_trace
            from perfbench.profiling.ascend import STEP_TRACE_COLUMNS, _read_csv, parse_ascend_dir
            from perfbench.profiling.communication import read_communication
            from perfbench.tools.verify.read import load_summary
            cases = json.loads(sys.argv[1])
            readers = {"chrome": load_trace, "profiler_info": lambda p: parse_ascend_dir(p.parent),
                       "communication": lambda p: read_communication(p, 0), "kernel_details": load_trace,
                       "step_trace": lambda p: _read_csv(p, STEP_TRACE_COLUMNS, 0), "db": load_trace,
                       "bundle": load_summary, "summary": lambda p: load_summary(p.parent)}
            out = {}
            for name, path in cases.items():
                start = time.monotonic()
                try:
                    readers[name](Path(path))
                    message = "read without complaint"
                except UserError as err:
                    message = str(err)
                out[name] = [message, time.monotonic() - start]
            # this process image's peak (VmHWM): ru_maxrss would keep the forking pytest's peak across exec
            status = Path("/proc/self/status")
            hwm = [line.split()[1] for line in status.read_text().splitlines() if line.startswith("VmHWM:")] \
                if status.exists() else []
            out["maxrss_mb"] = int(hwm[0]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(json.dumps(out))
        """)
        proc = subprocess.run([sys.executable, "-c", script, json.dumps({k: str(v) for k, v in cases.items()})],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout)
        assert out.pop("maxrss_mb") < 500
        for name, (message, seconds) in out.items():
            assert seconds < 5, (name, seconds)
            assert "\n" not in message, (name, message)
            if name == "db":  # SQLite reads only the header page of a hole: not a database
                assert message.startswith(f"{cases[name]}: not an SQLite database"), message
            elif name == "bundle":
                assert message == f"{archive}:v/summary.json: 2,048.0 MiB, over the 16.0 MiB this reader takes"
            else:
                assert message.startswith(f"{cases[name]}: 2,048.0 MiB, over the "), (name, message)

    def test_a_result_folders_trace_table_with_repeated_headers_is_a_problem_not_a_hang(self, tmp_path: Path):
        from perfbench.analysis.trace_tables import read_trace_tables

        tables = tmp_path / "runs" / "r1" / "tables"
        tables.mkdir(parents=True)
        (tables / "per_category.csv").write_text(",".join(["category"] * 20_000) + "\n")
        run = run_result("r1")
        found = read_trace_tables(tmp_path, [run])
        assert not found.by_run and len(found.problems) == 1
        assert "'category' more than once" in found.problems[0]
