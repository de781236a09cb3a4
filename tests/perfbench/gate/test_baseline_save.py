"""`perfbench baseline save`: never overwrites a baseline without --force, never records failed runs without
--allow-failed, and every error names options the command has."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner, Result

from perfbench.cli import main
from perfbench.results import RunResult, write_results
from tests.cli_helpers import one_error_line
from tests.records_kit import run_result


def run(run_id: str, status: str = "ok") -> RunResult:
    return run_result(run_id, status=status, samples={"tpot_ms": [1.0, 1.1]} if status == "ok" else {},
                      error=None if status == "ok" else "killed by signal 9")


def save(*args: str) -> Result:
    return CliRunner().invoke(main, ["baseline", "save", *args])



def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def real_options() -> set[str]:
    command = main.commands["baseline"].commands["save"]  # type: ignore[attr-defined]
    return {opt for param in command.params if isinstance(param, click.Option) for opt in param.opts}


def assert_names_real_options(line: str) -> None:
    named = set(re.findall(r"--[a-z][a-z-]*", line))
    assert named <= real_options(), f"{line!r} names {named - real_options()}"


def test_an_existing_baseline_is_not_overwritten_without_force(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_results(first, [run("r1")])
    write_results(second, [run("r1"), run("r2")])
    dest = tmp_path / "baseline"
    assert save(str(first), str(dest)).exit_code == 0
    before = snapshot(dest)
    line = one_error_line(save(str(second), str(dest)))
    assert "already holds a baseline" in line and "--force" in line
    assert_names_real_options(line)
    assert snapshot(dest) == before  # nothing already recorded is lost
    assert save(str(second), str(dest), "--force").exit_code == 0
    assert (dest / "results.jsonl").read_text() == (second / "results.jsonl").read_text()


def test_a_stray_or_corrupt_baseline_counts_as_one(tmp_path: Path) -> None:
    """My own case: a DEST left by an interrupted save (results.jsonl, garbage baseline.json) is not
    silently replaced either."""
    source = tmp_path / "run"
    write_results(source, [run("r1")])
    dest = tmp_path / "baseline"
    dest.mkdir()
    (dest / "baseline.json").write_text("{not json")
    (dest / "results.jsonl").write_text("half a line")
    line = one_error_line(save(str(source), str(dest)))
    assert "already holds a baseline" in line
    assert (dest / "results.jsonl").read_text() == "half a line"
    empty = tmp_path / "empty-dest"
    empty.mkdir()
    assert save(str(source), str(empty)).exit_code == 0  # an empty folder holds no baseline


def test_a_folder_with_failed_runs_is_refused_unless_allowed(tmp_path: Path) -> None:
    source = tmp_path / "run"
    write_results(source, [run("r1"), run("r2", status="killed"), run("r3", status="timeout")])
    dest = tmp_path / "baseline"
    line = one_error_line(save(str(source), str(dest)))
    assert "2 of 3 runs are not ok" in line and "r2 killed" in line and "--allow-failed" in line
    assert_names_real_options(line)
    assert not dest.exists()  # refused before anything is written
    result = save(str(source), str(dest), "--allow-failed")
    assert result.exit_code == 0, result.output
    assert (dest / "results.jsonl").read_text() == (source / "results.jsonl").read_text()


def test_errors_name_the_arguments_and_options_that_exist(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    lines = [one_error_line(save(str(empty), str(tmp_path / "dest")))]
    source = tmp_path / "run"
    write_results(source, [run("r1")])
    lines.append(one_error_line(save(str(source), str(source))))
    (tmp_path / "file").write_text("x")
    lines.append(one_error_line(save(str(source), str(tmp_path / "file"))))
    (source / "results.jsonl").write_text("")
    lines.append(one_error_line(save(str(source), str(tmp_path / "dest"))))
    assert [line.split(" ", 2)[1] for line in lines] == ["FOLDER", "DEST", "DEST", "FOLDER"]
    for line in lines:
        assert "--folder" not in line
        assert_names_real_options(line)


def test_a_folder_measured_with_uncommitted_changes_is_refused_unless_allowed(tmp_path: Path) -> None:
    # a dirty tree reproduces under no commit: gate --confirm could confirm nothing against such a baseline
    dirty, clean = tmp_path / "dirty", tmp_path / "clean"
    runs = [run("r1"), run("r2")]
    for r in runs:
        r.env.update({"git_sha": "a" * 40, "git_dirty": False})
    write_results(clean, runs)
    runs[1].env.update({"git_dirty": True})
    write_results(dirty, runs)
    dest = tmp_path / "baseline"
    line = one_error_line(save(str(dirty), str(dest)))
    assert "1 of 2 runs were measured with uncommitted changes" in line and "--allow-dirty" in line
    assert_names_real_options(line)
    assert not dest.exists()  # refused before anything is written
    assert save(str(clean), str(dest)).exit_code == 0  # the near miss: a clean tree saves as before
    result = save(str(dirty), str(tmp_path / "forced"), "--allow-dirty")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "forced" / "results.jsonl").read_text() == (dirty / "results.jsonl").read_text()
