"""Change points: found where a step is, within one commit, and (almost) never where none is. Seeded synthetic
series shaped like real ones: log speed-ups with 95% CI half-widths of 2-6%, 60 commits."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.history.changes import change_points
from tests.cli_helpers import one_error_line

N_SERIES, N_POINTS = 100, 60


def _series(rng: np.random.Generator, step_at: int | None, step: float = 0.9, scatter: float = 1.0
            ) -> tuple[np.ndarray, np.ndarray]:
    """60 log speed-ups around 2.2x with 95% CI half-widths of 2-6%; `scatter`: the points spread that many times
    more than their CIs say (CIs that understate the variation between processes)."""
    half = rng.uniform(0.02, 0.06, N_POINTS)  # each point's CI half-width, relative
    se = np.log1p(half) / 1.96
    y = math.log(2.2) + rng.normal(0.0, se * scatter)
    if step_at is not None:
        y[step_at:] += math.log(step)
    return y, se


def test_a_ten_percent_step_is_found_within_one_commit_in_95_of_100_series():
    rng = np.random.default_rng(20261202)
    found = 0
    for _ in range(N_SERIES):
        at = int(rng.integers(5, N_POINTS - 5))
        changes = change_points(*_series(rng, at))
        found += len(changes) == 1 and abs(changes[0].index - at) <= 1
    assert found >= 95


def test_series_without_a_step_give_at_most_one_false_change_in_100():
    rng = np.random.default_rng(7)
    assert sum(len(change_points(*_series(rng, None))) for _ in range(N_SERIES)) <= 1


@pytest.mark.parametrize("scatter", [1.5, 2.0])
def test_cis_that_understate_the_scatter_do_not_make_false_changes(scatter):
    rng = np.random.default_rng(11)
    assert sum(len(change_points(*_series(rng, None, scatter=scatter))) for _ in range(N_SERIES)) <= 1


def test_a_step_is_still_found_when_the_cis_understate_the_scatter():
    rng = np.random.default_rng(12)
    found = 0
    for _ in range(N_SERIES):
        at = int(rng.integers(5, N_POINTS - 5))
        changes = change_points(*_series(rng, at, scatter=1.5))
        found += len(changes) == 1 and abs(changes[0].index - at) <= 1
    assert found >= 90


def test_a_change_below_the_threshold_is_never_reported():
    rng = np.random.default_rng(3)
    # a 4% step with CIs so narrow it is certain: real, but below the 5% band
    for _ in range(20):
        half = np.full(N_POINTS, 0.002)
        se = np.log1p(half) / 1.96
        y = rng.normal(0.0, se)
        y[30:] += math.log(0.96)
        assert change_points(y, se) == []
        assert len(change_points(y, se, min_magnitude=0.03)) == 1


def test_the_size_and_sides_of_a_change_are_its_segments():
    se = np.full(20, 0.01)
    y = np.log(np.r_[np.full(8, 2.2), np.full(12, 1.71)])
    (change,) = change_points(y, se)
    assert (change.index, change.n_before, change.n_after) == (8, 8, 12)
    assert change.before == pytest.approx(2.2) and change.after == pytest.approx(1.71)
    assert change.size == pytest.approx(1.71 / 2.2 - 1)


def _repo(path: Path, commits: int) -> list[str]:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for i in range(commits):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    return shas


def test_changes_command_names_the_commits_either_side(tmp_path, sweep):
    shas = _repo(tmp_path / "repo", 12)
    folders = [str(sweep(tmp_path / f"c{i}", sha=sha, gdr=2.2 if i < 7 else 1.71)) for i, sha in enumerate(shas)]
    db = str(tmp_path / "h.sqlite")
    runner = CliRunner()
    assert runner.invoke(main, ["history", "ingest", *folders, "--db", db, "--repo", str(tmp_path / "repo")]
                         ).exit_code == 0
    result = runner.invoke(main, ["history", "changes", "--db", db])
    assert result.exit_code == 0, result.output
    # gdr's TTFT moved, as a speed-up and as a median (x 1.025, the drift factors' median); rope and TPOT did not
    lines = result.stdout.strip().splitlines()
    assert max(len(line) for line in lines) <= 120
    median, where, line, _ = lines
    match = re.fullmatch(rf"gdr TTFT speed-up 2\.20x -> 1\.71x between {shas[6][:10]} and {shas[7][:10]} "
                         r"\(-22\.3%, p=([\d.e-]+), 7 commits before, 5 after\)", line)
    assert match and float(match[1]) < 1e-4, line  # confirmed at ALPHA
    assert where == ("    syn · tiny cpu float32 ws=1 bs=1 in=128 out=16 · cpu / Test CPU 9000 / torch +cpu · "
                     "torch 2.13.0")
    assert median.startswith(f"gdr TTFT median {100 / 2.2 * 1.025:.2f} ms -> {100 / 1.71 * 1.025:.2f} ms")
    as_json = json.loads(runner.invoke(main, ["history", "changes", "--db", db, "--json"]).stdout)
    assert [(c["sha_before"], c["sha_after"]) for c in as_json] == [(shas[6], shas[7])] * 2
    since = runner.invoke(main, ["history", "changes", "--db", db, "--since", shas[8][:8]])
    assert since.stdout.startswith("no change of 5% or more")
    bigger = runner.invoke(main, ["history", "changes", "--db", db, "--min-magnitude", "0.3"])
    assert bigger.stdout.startswith("no change of 30% or more")
    assert "--since nope" in one_error_line(runner.invoke(main, ["history", "changes", "--db", db, "--since", "nope",
                                                                 "--repo", str(tmp_path / "repo")]))


def test_binary_segmentation_finds_each_step_of_a_long_series_and_none_in_a_flat_one():
    from perfbench.history.changes import binary_segmentation

    rng = np.random.default_rng(5)
    n = 5000
    se = np.full(n, 0.02)
    flat = rng.normal(0.0, 0.02, n)
    assert binary_segmentation(flat, 1 / se**2, penalty=3.0 * math.log(n)) == []
    stepped = flat.copy()
    stepped[1200:] += math.log(0.9)
    stepped[3700:] += math.log(1.2)
    assert binary_segmentation(stepped, 1 / se**2, penalty=3.0 * math.log(n)) == [1200, 3700]
    assert [c.index for c in change_points(stepped, se)] == [1200, 3700]


def test_a_t_interval_is_read_with_its_degrees_of_freedom_and_level():
    """A CI over 3 clusters (df 2) is t(2) = 4.30 standard errors wide, not 1.96: read as normal, its point would
    count 4.8 times too much. A 90% CI is narrower than a 95% one for the same standard error."""
    from scipy import stats as scipy_stats

    from perfbench.history.changes import _per_commit
    from perfbench.history.series import SeriesPoint

    def point(df: float | None, level: float = 0.95) -> SeriesPoint:
        return SeriesPoint(sha="a" * 40, dirty=False, commit_order=1, folder="/f", kind="results", recorded_at="",
                           value=2.0, low=2.0 / 1.1, high=2.0 * 1.1, n=12, verdict="", df=df, level=level)

    (_, _, se_t), = _per_commit([point(2.0)])
    (_, _, se_z), = _per_commit([point(None)])
    (_, _, se_90), = _per_commit([point(None, 0.90)])
    assert se_z / se_t == pytest.approx(scipy_stats.t.ppf(0.975, 2) / scipy_stats.norm.ppf(0.975))
    assert se_t == pytest.approx(math.log(1.1) / scipy_stats.t.ppf(0.975, 2))
    assert se_90 / se_z == pytest.approx(scipy_stats.norm.ppf(0.975) / scipy_stats.norm.ppf(0.95))


def test_ab_ratios_are_a_change_series(tmp_path, sweep):
    shas = _repo(tmp_path / "repo", 8)
    folders = []
    for i, sha in enumerate(shas):
        folder = sweep(tmp_path / f"ab{i}", sha=sha, started_at=f"2026-12-01T1{i}:00:00+00:00")
        ratio = 1.0 if i < 4 else 1.3
        (folder / "ab.json").write_text(json.dumps({
            "kind": "perfbench ab", "scenario": "syn", "emulation": None, "base": {"ref": "v1", "sha": shas[0]},
            "head": {"ref": "HEAD", "sha": sha, "dirty": False}, "exit_code": 0,
            "verdicts": {"gdr": {"tpot_ms": {"ratio": ratio, "ci_low": ratio / 1.03, "ci_high": ratio * 1.03,
                                             "pairs": 40, "clusters": 8, "method": "t", "level": 0.95,
                                             "band": 0.05, "verdict": "same"}}}}))
        folders.append(str(folder))
    db = str(tmp_path / "h.sqlite")
    runner = CliRunner()
    assert runner.invoke(main, ["history", "ingest", *folders, "--db", db, "--repo", str(tmp_path / "repo")]
                         ).exit_code == 0
    line = runner.invoke(main, ["history", "changes", "--db", db]).stdout.splitlines()[0]
    assert line.startswith(f"gdr TPOT head/base 1.00x -> 1.30x between {shas[3][:10]} and {shas[4][:10]}"), line
