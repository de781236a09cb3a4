"""docs/ci.md's recipe as written: six pipelines, each a depth-1 clone at its commit in one workspace path, each
writing its result folder to the same path and ingesting it (and an ab folder) into one SQLite and one PostgreSQL
store with the commands the document gives. Both stores keep six points in commit order, and `history changes`
places a planted step between the third and fourth commits. Synthetic folders stand in for the measured ones."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.history.series import Filters, load_series
from perfbench.history.store import open_store
from tests.perfbench.history.conftest import make_repo

# slow: every test clones repositories (depth-1 pipelines, a full clone) and ingests each through the CLI
pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[3] / "docs" / "ci.md"
# the step lands between the third and the fourth commit; separately timed synthetic sweeps have speed-up CIs of
# about +-17% (their host drift is not paired away), so three commits a side confirm a 36% step at p < 1e-4
PIPELINES, STEP_AT = 6, 3


def _recipe() -> tuple[list[str], str]:
    """The history job's perfbench commands of the GitHub example (the measuring `perfbench run` aside), and
    the ab job's ingest."""
    github = yaml.safe_load(re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)[0])
    history = [step["run"].strip() for step in github["jobs"]["history"]["steps"]
               if str(step.get("run", "")).startswith("perfbench history")]
    ab_ingest = next(step["run"].strip() for step in github["jobs"]["ab"]["steps"]
                     if str(step.get("run", "")).startswith("perfbench history ingest"))
    assert any(c.startswith("perfbench history ingest reports/sweep") for c in history), history
    assert any(c.startswith("perfbench history changes") for c in history), history
    return history, ab_ingest


def _ab_folder(folder: Path, sweep, sha: str, base: str, ratio: float, started_at: str) -> None:
    sweep(folder, sha=sha, started_at=started_at)
    (folder / "ab.json").write_text(json.dumps({
        "kind": "perfbench ab", "scenario": "syn", "emulation": None, "base": {"ref": "v1.0", "sha": base},
        "head": {"ref": "HEAD", "sha": sha, "dirty": False}, "exit_code": 0,
        "verdicts": {"gdr": {"tpot_ms": {"ratio": ratio, "ci_low": ratio / 1.02, "ci_high": ratio * 1.02,
                                         "pairs": 40, "clusters": 8, "method": "t", "level": 0.95, "band": 0.05,
                                         "verdict": "same"}}}}))


def _run(command: str) -> str:
    result = CliRunner().invoke(main, shlex.split(command)[1:])
    assert result.exit_code == 0, (command, result.output)
    return result.stdout


def test_six_depth_one_pipelines_keep_six_points_and_place_the_step(tmp_path, sweep, pg_db, monkeypatch):
    history, ab_ingest = _recipe()
    origin = tmp_path / "origin"
    shas = make_repo(origin, PIPELINES)
    workspace = tmp_path / "runner" / "work" / "repo"  # the one path every pipeline runs in
    stores = [str(tmp_path / "history.sqlite"), pg_db]
    for i, sha in enumerate(shas):
        subprocess.run(["git", "-C", str(origin), "branch", "-f", f"p{i}", sha], check=True)
        monkeypatch.chdir(tmp_path)
        shutil.rmtree(workspace, ignore_errors=True)  # a fresh checkout at the same path
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", f"p{i}", f"file://{origin}",
                        str(workspace)], check=True)
        monkeypatch.chdir(workspace)
        started = f"2026-12-01T1{i}:00:00+00:00"
        sweep(workspace / "reports" / "sweep", sha=sha, gdr=2.2 if i < STEP_AT else 1.4, started_at=started)
        _ab_folder(workspace / "reports" / "ab", sweep, sha, shas[0], 1.0 if i < STEP_AT else 1.25, started)
        for db in stores:
            monkeypatch.setenv("PERFBENCH_HISTORY_DB", db)
            out = _run(ab_ingest) + "".join(_run(c) for c in history)
            assert "is a shallow clone" in out and "added" in out, out
    monkeypatch.chdir(tmp_path)
    for db in stores:
        store = open_store(db)
        (gdr,) = load_series(store, Filters(family="speedup", plan="gdr", metric="ttft_ms"))
        assert [p.sha for p in gdr.ordered] == shas and [p.commit_order for p in gdr.ordered] == list(range(1, 7))
        changes = CliRunner().invoke(main, ["history", "changes", "--db", db, "--json"])
        found = {(c["key"]["family"], c["key"]["plan"], c["key"]["metric"]): (c["sha_before"], c["sha_after"])
                 for c in json.loads(changes.stdout)}
        step = (shas[STEP_AT - 1], shas[STEP_AT])
        assert found == {("speedup", "gdr", "ttft_ms"): step, ("median", "gdr", "ttft_ms"): step,
                         ("ab", "gdr", "tpot_ms"): step}, found
        store.engine.dispose()


def test_a_full_clone_later_places_the_commits_on_first_parent_history(tmp_path, sweep):
    origin = tmp_path / "origin"
    shas = make_repo(origin, 4)
    db = str(tmp_path / "h.sqlite")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{origin}", str(shallow)], check=True)
    folders = [str(sweep(tmp_path / f"c{i}", sha=sha)) for i, sha in enumerate(shas)]
    first = CliRunner().invoke(main, ["history", "ingest", *folders, "--db", db, "--repo", str(shallow)])
    assert first.exit_code == 0 and "is a shallow clone" in first.stdout
    (series,) = load_series(open_store(db), Filters(family="speedup", plan="gdr", metric="ttft_ms"))
    # only HEAD is in a depth-1 clone: it has a date; the others are one-offs until a full history is known
    assert [(p.sha, p.commit_order) for p in series.points if p.commit_order is not None] == [(shas[-1], 1)]
    full = CliRunner().invoke(main, ["history", "ingest", folders[0], "--db", db, "--repo", str(origin)])
    assert full.exit_code == 0 and "re-placed 4 stored commits on first-parent history" in full.stdout, full.output
    assert "shallow" not in full.stdout
    (series,) = load_series(open_store(db), Filters(family="speedup", plan="gdr", metric="ttft_ms"))
    assert [(p.sha, p.commit_order) for p in series.ordered] == list(zip(shas, range(1, 5)))


def _shallow_clone(origin: Path, sha: str, to: Path) -> Path:
    subprocess.run(["git", "-C", str(origin), "branch", "-f", f"at-{sha[:8]}", sha], check=True)
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", f"at-{sha[:8]}", f"file://{origin}", str(to)],
                   check=True)
    return to


def test_since_in_a_shallow_history_starts_at_the_first_commit_committed_since(tmp_path, sweep):
    origin = tmp_path / "origin"
    shas = make_repo(origin, 6)
    db = str(tmp_path / "h.sqlite")
    stored = (0, 1, 3, 4, 5)  # commit 2 was never measured
    for i in stored:  # each pipeline from a depth-1 clone of its commit
        clone = _shallow_clone(origin, shas[i], tmp_path / f"clone{i}")
        folder = sweep(tmp_path / f"c{i}", sha=shas[i], gdr=2.2 if i < 2 else 1.4)
        assert CliRunner().invoke(main, ["history", "ingest", str(folder), "--db", db, "--repo", str(clone)]
                                  ).exit_code == 0
    every = CliRunner().invoke(main, ["history", "changes", "--db", db, "--plan", "gdr", "--metric", "ttft_ms"])
    assert f"between {shas[1][:10]} and {shas[3][:10]}" in every.stdout, every.output
    # --since commit 2, known to a shallow clone by its date only: the history from commit 3 on, no change left
    clone2 = _shallow_clone(origin, shas[2], tmp_path / "since2")
    since = CliRunner().invoke(main, ["history", "changes", "--db", db, "--since", "HEAD", "--repo", str(clone2),
                                      "--plan", "gdr", "--metric", "ttft_ms"])
    assert since.exit_code == 0 and since.stdout.startswith("no change of 5% or more"), since.output
    # near miss: --since commit 0 keeps the change; a commit after every stored one is refused
    clone0 = _shallow_clone(origin, shas[0], tmp_path / "since0")
    kept = CliRunner().invoke(main, ["history", "changes", "--db", db, "--since", "HEAD", "--repo", str(clone0),
                                     "--plan", "gdr", "--metric", "ttft_ms"])
    assert f"between {shas[1][:10]} and {shas[3][:10]}" in kept.stdout, kept.output
    subprocess.run(["git", "-C", str(origin), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "later"], check=True)
    late = tmp_path / "late"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{origin}", str(late)], check=True)
    refused = CliRunner().invoke(main, ["history", "changes", "--db", db, "--since", "HEAD", "--repo", str(late)])
    assert refused.exit_code == 2 and "--since HEAD" in refused.stderr
