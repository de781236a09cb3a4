"""Weak inputs a user meets (reliability, fourth round): a negative numerics error in a results file, a damaged
reference cache on `--resume`, formula-shaped text in CSVs, a quote in a .db's table name, and read-only SQLite
files in WAL mode (a trace on a read-only mount, a history store there)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.pages.table import Column, Table
from perfbench.results.cells import csv_cells, csv_safe
from tests.cli_helpers import one_error_line

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "baselines" / "ci_smoke"
FORMULAS = ["=HYPERLINK(\"http://x/\",\"c\")", "@SUM(1+1)*cmd|' /C calc'!A0", "+cmd|x", "-2+3+cmd|x"]


def _crafted(tmp_path: Path, change) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path / "cur"
    shutil.copytree(SMOKE, folder)
    (folder / "baseline.json").unlink()
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]
    for record in records:
        change(record)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.mark.parametrize(("key", "value"), [("max_rel_error", -5.0), ("max_abs_logit_diff", -1e308),
                                            ("compared", -1)])
def test_a_negative_numerics_error_is_refused_not_passed(tmp_path: Path, key: str, value: float):
    folder = _crafted(tmp_path, lambda r: r["numerics"].update({key: value}))
    result = CliRunner().invoke(main, ["gate", "--baseline", str(SMOKE), "--current", str(folder), "--no-confirm"])
    line = one_error_line(result)
    assert f"numerics.{key}" in line and "never negative" in line


def test_nan_numerics_still_read_and_fail_the_gate(tmp_path: Path):
    folder = _crafted(tmp_path, lambda r: r["numerics"].update({"max_rel_error": float("nan")}))
    result = CliRunner().invoke(main, ["gate", "--baseline", str(SMOKE), "--current", str(folder), "--no-confirm"])
    assert result.exit_code == 1 and "FAIL numerics" in result.output


def test_csv_cells_that_a_spreadsheet_would_run_are_quoted():
    for text in FORMULAS:
        assert csv_safe(text) == "'" + text
    for kept in ["-5", "+1.5e3", "-12.5%", "+1.05x", "-", "-fused_rope", "+gdr+graph", "aten::add", 3, None]:
        assert csv_safe(kept) == kept
    table = csv_cells(pd.DataFrame({"name": [FORMULAS[0], "ok"], "total_us": [1.0, -2.0], "=x": [1, 2]}))
    assert table["name"].tolist() == ["'" + FORMULAS[0], "ok"] and table["total_us"].tolist() == [1.0, -2.0]
    assert list(table.columns) == ["name", "total_us", "'=x"]
    page_csv = Table("t", [Column("a", "a")], [{"a": FORMULAS[1]}, {"a": -3.5}]).csv_text()
    assert list(csv.reader(page_csv.splitlines())) == [["a"], ["'" + FORMULAS[1]], ["-3.5"]]


def test_no_csv_of_a_report_or_a_baseline_starts_a_formula(tmp_path: Path):
    def plant(record: dict) -> None:
        record["env"]["cpu_model"] = FORMULAS[1]
        record["env"]["hostname"] = FORMULAS[0]
        record["error"] = FORMULAS[2]

    folder = _crafted(tmp_path, plant)
    for stale in [*folder.glob("report*"), folder / "results.csv"]:
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    assert CliRunner().invoke(main, ["report", str(folder)]).exit_code == 0
    saved = tmp_path / "bl"
    done = CliRunner().invoke(main, ["baseline", "save", str(folder), str(saved), "--allow-dirty"])
    assert done.exit_code == 0, done.output
    files = [*(folder / "report").rglob("*.csv"), saved / "results.csv"]
    assert any(p.name == "environment.csv" for p in files)
    cells = [cell for p in files for row in csv.reader(p.read_text().splitlines()) for cell in row]
    assert any(cell.startswith("'@SUM") for cell in cells)
    assert [cell for cell in cells if csv_safe(cell) != cell] == []  # no cell left that a spreadsheet would run


# ---- the reference cache on --resume ---------------------------------------------------------------------------

def _reference_setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    from model.backend import detect_capabilities
    from model.config import load_config
    from perfbench.measure.iteration import make_workload
    from perfbench.measure.run_steps import reference_key
    from perfbench.results import RunSpec

    spec = RunSpec(run_id="r", scenario="s", model="tiny", num_layers=1, batch_size=1, input_len=8, output_len=2)
    vocab = load_config(spec.model, spec.num_layers).vocab_size
    cache = tmp_path / "reference"
    cache.mkdir()
    return spec, detect_capabilities("cpu"), make_workload(spec, vocab), cache, vocab, \
        cache / f"{reference_key(spec)}.safetensors"


def test_a_damaged_reference_cache_is_named_and_decoded_anew(tmp_path: Path):
    from safetensors.torch import load_file, save_file

    from perfbench.measure.run_steps import _cached_reference, all_off_reference

    spec, caps, workload, cache, vocab, path = _reference_setup(tmp_path)
    good = all_off_reference(spec, caps, workload, cache, vocab)
    tensors = {k: v.clone() for k, v in load_file(str(path)).items()}  # not the file's mapping: it is replaced
    damaged = path.with_name("damaged")
    variants = {
        "random bytes": lambda: damaged.write_bytes(b"\x00\xff" * 300),
        "no logits": lambda: save_file({k: v for k, v in tensors.items() if k != "logits"}, str(damaged)),
        "cut logits": lambda: save_file({**tensors, "logits": tensors["logits"][..., :7].contiguous()},
                                        str(damaged)),
        "huge tap count": lambda: save_file({**tensors, "tap.count": torch.tensor(10**9)}, str(damaged)),
    }
    for name, damage in variants.items():
        damage()
        damaged.replace(path)  # a new file, as a hand edit or another tool writes one
        with pytest.raises(RuntimeError, match="cached reference") as err:
            _cached_reference(path, workload, vocab)
        assert str(path) in str(err.value), name
        again = all_off_reference(spec, caps, workload, cache, vocab)
        assert str(path) in again.note and "decoded anew" in again.note, name
        assert torch.equal(again.logits, good.logits), name
        assert _cached_reference(path, workload, vocab).source == str(path)  # the file was replaced
        umask = os.umask(0)
        os.umask(umask)
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as readable as the folder's other files


# ---- SQLite: a quote in a table name, and a WAL file on a read-only mount --------------------------------------

DB_FIXTURE = (REPO / "tests" / "fixtures" / "npu_profiler" / "msinsight_pytorch_db_level1" / "rank0_ascend_pt"
              / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")


def _db_copy(tmp_path: Path) -> Path:
    if not DB_FIXTURE.is_file() or DB_FIXTURE.stat().st_size < 1024:
        pytest.skip("the .db fixture is not checked out")
    dest = tmp_path / "run" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / DB_FIXTURE.name
    dest.parent.mkdir(parents=True)
    shutil.copy(DB_FIXTURE, dest)
    return dest


def test_a_table_name_with_a_quote_does_not_break_the_reader(tmp_path: Path):
    from perfbench.profiling.ascend_db import read_ascend_db

    db = _db_copy(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE "we""ird" (x INTEGER)')
    conn.close()
    assert len(read_ascend_db(db).details.table) > 0


def test_a_wal_db_on_a_read_only_mount_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from perfbench.profiling import ascend_db

    db = _db_copy(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    real = sqlite3.connect

    def read_only_mount(database: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        # what SQLite says for a WAL file whose folder it cannot write (the test runs as any user, root too)
        if "immutable=1" not in database:
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *args, **kwargs)

    monkeypatch.setattr(ascend_db.sqlite3, "connect", read_only_mount)
    assert len(ascend_db.read_ascend_db(db).details.table) > 0


def test_a_history_store_on_a_read_only_mount_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    store = tmp_path / "h.sqlite"
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.close()

    def read_only_mount(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(sqlite3.dbapi2, "connect", read_only_mount)  # the module SQLAlchemy's driver calls
    line = one_error_line(CliRunner().invoke(main, ["history", "show", "--db", str(store)]))
    assert str(store) in line and "read-only" in line and "writable folder" in line


@pytest.mark.parametrize(("name", "value"), [("MASTER_ADDR", "https%3A%2F%2Fu%3APLANTEDpw%40host"),
                                             ("HCCL_IF_IP", "10.0.0.1?tok=PLANTEDzz"),
                                             ("ASCEND_HOME_PATH", "/opt/ascend;password:PLANTEDx")])
def test_an_allowed_name_with_a_credential_in_another_shape_is_withheld(name: str, value: str):
    from perfbench.results.env_allowlist import is_recorded, recorded_env

    assert not is_recorded(name, value)
    assert recorded_env({name: value}).env == {} and recorded_env({name: value}).withheld == 1
    assert is_recorded(name, {"MASTER_ADDR": "10.0.0.2", "HCCL_IF_IP": "10.0.0.1",
                              "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest"}[name])


@pytest.mark.slow
def test_a_reference_that_cannot_be_replayed_names_its_file_on_resume(tmp_path: Path):
    from safetensors.torch import load_file, save_file

    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps({"perfbench": {
        "device": "cpu", "model": "tiny", "num_layers": 1, "seed": 0,
        "toggles": {"fused_rope": False, "fused_attention": False, "fused_rmsnorm": False, "chunk_gdr": False,
                    "mm_all_reduce": False, "moe_dispatch_combine": False, "graph_mode": False,
                    "merged_projections": False, "grouped_moe": False},
        "workload": {"batch_sizes": [1], "input_lens": [8], "output_len": 2},
        "measure": {"warmup": 1, "iterations": 1, "profile": False},
        "sweep": {"design": "explicit", "runs": [{}]}}}))
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["run", str(scenario), "--out", str(out)]).exit_code == 0
    [path] = (out / "reference").glob("*.safetensors")
    tensors = {k: v.clone() for k, v in load_file(str(path)).items()}
    tensors["tap.0.inputs"] = tensors["tap.0.inputs"][..., :5].contiguous()  # cut: shapes no longer fit the model
    save_file(tensors, str(path.with_name("cut")))
    path.with_name("cut").replace(path)
    (out / "results.jsonl").write_text("")  # the run is measured again on --resume
    result = CliRunner().invoke(main, ["run", str(scenario), "--out", str(out), "--resume"])
    [record] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert str(path) in (record["numerics"].get("not_compared") or record.get("error") or ""), result.output[-2000:]
    assert "delete it" in record["numerics"]["not_compared"]
