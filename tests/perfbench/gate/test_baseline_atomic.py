"""`baseline save` writes a baseline atomically under a lock: two saves to one DEST never mix, and a folder a live
sweep is writing is refused, naming the sweep's pid."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from perfbench.gate import engine
from perfbench.results import write_results
from perfbench.run.folder_owner import owned
from tests.cli_helpers import one_error_line
from tests.perfbench.gate.test_baseline_save import run, save


class TestBaselines:
    def test_concurrent_saves_to_one_dest_never_mix(self, tmp_path: Path, monkeypatch):
        folders = {}
        for name in ("a", "b"):
            folders[name] = tmp_path / name
            write_results(folders[name], [run(f"{name}1"), run(f"{name}2")])
        dest = tmp_path / "dest"
        a_writing, b_done = threading.Event(), threading.Event()
        write_json = engine.atomic_write_json

        def held_up(path, obj):
            # save "a" stops right before its baseline.json until save "b" is done (or 2 s have passed: with the
            # lock, "b" waits for "a", so "b" can only be done after "a")
            if path.name == "baseline.json" and threading.current_thread().name == "a":
                a_writing.set()
                b_done.wait(timeout=2)
            write_json(path, obj)

        monkeypatch.setattr(engine, "atomic_write_json", held_up)
        errors: list[BaseException] = []

        def saver(name: str) -> None:
            try:
                engine.save_baseline(folders[name], dest, force=True)
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                errors.append(err)
            finally:
                if name == "b":
                    b_done.set()

        first = threading.Thread(target=saver, args=("a",), name="a")
        first.start()
        assert a_writing.wait(timeout=60)
        second = threading.Thread(target=saver, args=("b",), name="b")
        second.start()
        first.join(timeout=60)
        second.join(timeout=60)
        assert not errors
        provenance = json.loads((dest / "baseline.json").read_text())
        source = Path(provenance["source"])
        assert (dest / "results.jsonl").read_text() == (source / "results.jsonl").read_text()
        assert (dest / "results.csv").read_text() == (source / "results.csv").read_text()
        assert source == folders["b"].resolve()  # the later save wins, whole
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "dest"]  # no staging folder left

    def test_a_folder_a_live_sweep_holds_is_refused_naming_its_pid(self, tmp_path: Path):
        source = tmp_path / "sweep"
        write_results(source, [run("r1")])
        with owned(source):  # what `perfbench run` holds while it writes the folder
            line = one_error_line(save(str(source), str(tmp_path / "dest")))
        assert line.startswith(f"error: FOLDER {source}: a live perfbench run (pid {os.getpid()})")
        assert not (tmp_path / "dest").exists()

    def test_a_failed_swap_keeps_the_earlier_baseline(self, tmp_path: Path, monkeypatch):
        source = tmp_path / "run"
        write_results(source, [run("r1")])
        dest = tmp_path / "dest"
        engine.save_baseline(source, dest)
        (dest / "NOTES.md").write_text("kept")  # not the baseline's: a save keeps it
        before = {p.name: p.read_bytes() for p in dest.iterdir()}
        rename = os.rename

        def failing(src, dst):
            if Path(dst) == dest and ".saving-" in Path(src).name:
                raise OSError(28, "No space left on device")
            rename(src, dst)

        monkeypatch.setattr(engine.os, "rename", failing)
        write_results(source, [run("r1"), run("r2")])
        try:
            engine.save_baseline(source, dest, force=True)
        except OSError:
            pass
        else:
            raise AssertionError("the swap was meant to fail")
        assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
        monkeypatch.setattr(engine.os, "rename", rename)
        engine.save_baseline(source, dest, force=True)
        assert (dest / "NOTES.md").read_text() == "kept" and "r2" in (dest / "results.jsonl").read_text()
