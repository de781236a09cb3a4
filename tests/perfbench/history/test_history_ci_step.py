"""CI history as it happens: six pipelines, each from a depth-1 clone of its commit, ingest one sweep folder each
into one SQLite store. The folders scatter by a host factor of +-3% (every sample of a folder alike) and the base
run's TTFT samples are x1.25 from the fourth commit on. `history changes` must name that step (3 + 3 commits),
and only series it moved, also when the commits share one committer date (a rebase), given --repo a full clone."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.history import git_order
from perfbench.history.changes import change_points
from perfbench.history.series import commit_positions
from perfbench.results import write_results
from tests.perfbench.history.conftest import ENV, blocked_run

HOST = (1.00, 1.03, 0.97, 1.02, 0.98, 1.01)  # each pipeline's host speed
STEP_AT, STEP = 3, 1.25


def _origin(path: Path, dates: list[str]) -> list[str]:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=c", "-c", "user.email=c@c"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    shas = []
    for i, date in enumerate(dates):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"p{i}"], check=True,
                       env={**os.environ, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date})
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    return shas


def _folder(folder: Path, sha: str, host: float, slow: bool, started_at: str) -> Path:
    """A sweep of three runs timed separately; the base run's TTFT x STEP when `slow`."""
    env = {**ENV, "git_sha": sha}
    runs = [blocked_run("base", (), 100.0 * host * (STEP if slow else 1.0), 10.0 * host, env, blocks=False,
                        started_at=started_at),
            blocked_run("gdr", ("chunk_gdr",), 50.0 * host, 10.0 * host, env, blocks=False, started_at=started_at),
            blocked_run("rope", ("fused_rope",), 100.0 * host, 9.0 * host, env, blocks=False, started_at=started_at)]
    write_results(folder, runs)
    (folder / "scenario.json").write_text(json.dumps({"name": "syn"}))
    return folder


def _pipelines(tmp_path: Path, dates: list[str], started: list[str]) -> tuple[str, list[str], Path]:
    origin = tmp_path / "origin"
    shas = _origin(origin, dates)
    db = str(tmp_path / "h.sqlite")
    for i, sha in enumerate(shas):
        subprocess.run(["git", "-C", str(origin), "branch", "-f", f"at{i}", sha], check=True)
        clone = tmp_path / f"clone{i}"
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", f"at{i}", f"file://{origin}", str(clone)],
                       check=True)
        folder = _folder(tmp_path / f"run{i}", sha, HOST[i], i >= STEP_AT, started[i])
        done = CliRunner().invoke(main, ["history", "ingest", str(folder), "--db", db, "--repo", str(clone)])
        assert done.exit_code == 0 and "shallow clone" in done.stdout, done.output
    return db, shas, origin


def _changes(db: str, *args: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    done = CliRunner().invoke(main, ["history", "changes", "--db", db, "--json", *args])
    assert done.exit_code == 0, done.output
    return {(c["key"]["family"], c["key"]["plan"], c["key"]["metric"]): (c["sha_before"], c["sha_after"])
            for c in json.loads(done.stdout)}


MOVED = {("median", "all off", "ttft_ms"), ("speedup", "gdr", "ttft_ms"), ("speedup", "rope", "ttft_ms")}


def test_a_25_percent_step_over_three_and_three_shallow_pipelines_is_reported(tmp_path):
    hourly = [f"2026-11-02T0{i}:00:00+00:00" for i in range(6)]
    db, shas, _ = _pipelines(tmp_path, hourly, [f"2026-11-02T0{i}:30:00+00:00" for i in range(6)])
    found = _changes(db)
    assert set(found) == MOVED, found
    assert set(found.values()) == {(shas[STEP_AT - 1], shas[STEP_AT])}


def test_commits_of_one_second_are_placed_by_a_full_clone(tmp_path):
    """A rebase gives every commit one committer date; the pipelines' runs started out of order too. Read alone,
    the store cannot order them; `changes --repo` a full clone places them on its history."""
    same = ["2026-11-02T05:00:00+00:00"] * 6
    started = [f"2026-11-02T06:{m:02d}:00+00:00" for m in (50, 10, 40, 0, 30, 20)]
    db, shas, origin = _pipelines(tmp_path, same, started)
    found = _changes(db, "--repo", str(origin))
    assert set(found) == MOVED, found
    assert set(found.values()) == {(shas[STEP_AT - 1], shas[STEP_AT])}


def test_commits_of_one_date_follow_the_topological_order_of_a_repository(tmp_path):
    shas = _origin(tmp_path / "o", ["2026-11-02T05:00:00+00:00"] * 4)
    ranks = git_order.topo_ranks(tmp_path / "o", [shas[2], shas[0], "f" * 40, shas[3], shas[1], "--all"])
    assert ranks == {shas[0]: 0, shas[1]: 1, shas[2]: 2, shas[3]: 3}
    date = "2026-11-02T05:00:00+00:00"
    commits = {sha: (None, date) for sha in shas}
    ties = {sha: (rank, "") for sha, rank in ranks.items()}
    assert commit_positions(commits, ties) == {sha: i for i, sha in enumerate(shas, 1)}


@pytest.mark.parametrize("host", [(1.0, 1.03, 0.97, 1.02, 0.98, 1.01), (0.97, 1.03, 0.97, 1.03, 0.97, 1.03)])
def test_the_step_is_confirmed_whatever_the_width_of_the_medians_cis(host):
    """Medians of 5 samples have CIs of +-20%: far wider than the points' scatter. The test scales by the scatter
    the series shows around its segments, not by the CIs."""
    y = np.log(np.array(host) * 100.0)
    y[STEP_AT:] += np.log(STEP)
    for half in (0.02, 0.2, 0.4):
        (change,) = change_points(y, np.full(6, np.log1p(half) / 1.96))
        assert change.index == STEP_AT and change.size == pytest.approx(0.25, abs=0.03)
