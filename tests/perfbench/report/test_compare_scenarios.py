"""`perfbench compare` of folders that ran different scenarios says so, instead of only "(no matched runs)"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.results import load_results, write_results


@pytest.fixture
def folder(make_folder):
    """folder(path, scenario, batch_size): the synthetic ok runs of one batch size, relabelled `scenario`."""

    def make(path: Path, scenario: str, batch_size: int) -> Path:
        make_folder(path, failed=False, traces=False)
        runs = [r.replace(spec=r.spec.replace(scenario=scenario))
                for r in load_results(path) if r.spec.batch_size == batch_size]
        assert runs
        write_results(path, runs)
        (path / "scenario.json").write_text(json.dumps({"name": scenario}))
        return path

    return make


def test_different_scenarios_with_nothing_in_common_are_an_error_naming_both(tmp_path, folder):
    a, b = folder(tmp_path / "a", "ci_smoke", 1), folder(tmp_path / "b", "small_cpu", 4)
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--out", str(tmp_path / "out")])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "ci_smoke" in lines[0] and "small_cpu" in lines[0] and "different" not in result.stdout
    assert "(no matched runs)" not in result.output and "Traceback" not in result.output


def test_different_scenarios_whose_runs_match_are_compared_with_a_note(tmp_path, folder):
    a, b = folder(tmp_path / "a", "ci_smoke", 1), folder(tmp_path / "b", "ci_smoke_copy", 1)
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("note: ") and "ci_smoke" in first and "ci_smoke_copy" in first
    assert (tmp_path / "out" / "compare.html").is_file()


def test_same_scenario_with_nothing_matched_still_says_no_matched_runs(tmp_path, folder):
    a, b = folder(tmp_path / "a", "ci_smoke", 1), folder(tmp_path / "b", "ci_smoke", 4)
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0 and "(no matched runs)" in result.stdout and "note:" not in result.stdout
