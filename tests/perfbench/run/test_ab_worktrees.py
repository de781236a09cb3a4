"""`ab` removes only the worktrees it made and can prove it made (a random token in its folder's owner.json and in
the worktree's git admin folder), of a job that is dead, and never one holding changes. Every test works in a
repository of its own under tmp_path, with the temporary folder there too: other jobs' worktrees are never seen."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.run import arms as ab_arms
from tests.cli_helpers import one_error_line

ROOT = Path(__file__).resolve().parents[3]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=w", "-c", "user.email=w@w", *args],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """Two commits holding model/__init__.py; temporary folders (the jobs' perfbench-ab-*) under tmp_path/tmp."""
    path = tmp_path / "repo"
    (path / "model").mkdir(parents=True)
    _git(path, "init", "-q")
    for i in range(2):
        (path / "model" / "__init__.py").write_text(f"VERSION = {i}\n")
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", f"v{i}")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return path


def _worktrees(repo: Path) -> list[str]:
    return [line.removeprefix("worktree ") for line in _git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")][1:]


def _users_worktree(repo: Path, tmp_path: Path) -> Path:
    """A worktree a user made in a folder named like a job's, with edits and a note of their own."""
    tree = tmp_path / "wt" / "perfbench-ab-mine" / "worktree-feature"
    tree.parent.mkdir(parents=True)
    _git(repo, "worktree", "add", "-q", str(tree), "HEAD~1")
    (tree / "NOTES.txt").write_text("my uncommitted work\n")
    with open(tree / "model" / "__init__.py", "a") as handle:
        handle.write("# an edit\n")
    return tree


def _intact(tree: Path, repo: Path) -> None:
    assert (tree / "NOTES.txt").read_text() == "my uncommitted work\n"
    assert (tree / "model" / "__init__.py").read_text().endswith("# an edit\n")
    assert str(tree) in _worktrees(repo)


def test_a_users_worktree_in_a_job_shaped_folder_survives_a_failed_and_a_finished_job(repo, tmp_path):
    tree = _users_worktree(repo, tmp_path)
    with pytest.raises(UserError, match="'nosuchref_zz' is not a commit"):
        ab_arms.check_out("nosuchref_zz", None, repo)
    _intact(tree, repo)
    arms = ab_arms.check_out("HEAD~1", None, repo)
    arms.close()
    _intact(tree, repo)
    assert _worktrees(repo) == [str(tree)] and not list(Path(tempfile.gettempdir()).iterdir())


def test_the_ab_command_refusing_a_bad_ref_touches_no_worktree(repo, tmp_path, monkeypatch):
    tree = _users_worktree(repo, tmp_path)
    monkeypatch.chdir(repo)
    line = one_error_line(CliRunner().invoke(main, ["ab", "nosuchref_zz", "--scenario", "ci_smoke",
                                                    "--out", str(tmp_path / "ab")]))
    assert "'nosuchref_zz' is not a commit" in line
    _intact(tree, repo)
    assert not list(Path(tempfile.gettempdir()).iterdir())


def test_a_forged_owner_file_without_the_worktrees_token_proves_nothing(repo, tmp_path):
    tree = _users_worktree(repo, tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tree.parent / ab_arms.OWNER_FILE).write_text(json.dumps({"pid": dead.pid, "started": None,
                                                              "token": "0" * 32}))
    (tree / "NOTES.txt").write_text("my uncommitted work\n")
    assert ab_arms.prune_stale(repo) == []
    _intact(tree, repo)
    # an owner.pid of an earlier perfbench proves nothing either
    (tree.parent / ab_arms.OWNER_FILE).unlink()
    (tree.parent / "owner.pid").write_text(f"{dead.pid}\n")
    assert ab_arms.prune_stale(repo) == []
    _intact(tree, repo)


def _killed_job(repo: Path) -> Path:
    """A job that checked out its arms and was killed (SIGKILL) before it could remove them: its folder."""
    code = ("import os, signal, sys; from pathlib import Path; from perfbench.run import arms; "
            "a = arms.check_out('HEAD~1', 'HEAD', Path(sys.argv[1])); print(a.root, flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    done = subprocess.run([sys.executable, "-c", code, str(repo)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": tempfile.gettempdir(), "PYTHONPATH": str(ROOT)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    root = Path(done.stdout.strip())
    assert len(_worktrees(repo)) == 2 and (root / "worktree-base").is_dir()
    return root


def test_the_worktrees_of_a_killed_job_are_pruned_by_the_next(repo):
    root = _killed_job(repo)
    (root / "worktree-base" / "model" / "__pycache__").mkdir()  # the job's imports leave caches: still its own
    (root / "worktree-base" / "model" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    removed = ab_arms.prune_stale(repo)
    assert sorted(removed) == [root / "worktree-base", root / "worktree-head"]
    assert _worktrees(repo) == [] and not root.exists()


def test_a_killed_jobs_worktree_someone_edited_is_left_and_said(repo, capsys):
    root = _killed_job(repo)
    (root / "worktree-head" / "DEBUG.txt").write_text("what I found\n")
    removed = ab_arms.prune_stale(repo)
    assert removed == [root / "worktree-base"]
    assert (root / "worktree-head" / "DEBUG.txt").read_text() == "what I found\n"
    assert _worktrees(repo) == [str(root / "worktree-head")]
    err = capsys.readouterr().err
    assert f"left the worktree {root / 'worktree-head'}" in err and "DEBUG.txt" in err


def test_a_live_owner_keeps_its_worktrees_and_a_reused_pid_does_not(repo):
    root = _killed_job(repo)
    owner = json.loads((root / ab_arms.OWNER_FILE).read_text())
    mine = {**owner, "pid": os.getpid(), "started": ab_arms._started(os.getpid())}
    (root / ab_arms.OWNER_FILE).write_text(json.dumps(mine))
    assert ab_arms.prune_stale(repo) == [] and len(_worktrees(repo)) == 2
    if mine["started"] is None:
        pytest.skip("no /proc: a reused pid cannot be told from its owner")
    (root / ab_arms.OWNER_FILE).write_text(json.dumps({**mine, "started": "1"}))  # this pid, another process
    assert len(ab_arms.prune_stale(repo)) == 2 and _worktrees(repo) == []


def test_a_job_closing_removes_its_own_worktrees_and_folder(repo):
    arms = ab_arms.check_out("HEAD~1", "HEAD", repo)
    assert len(_worktrees(repo)) == 2 and len(arms.token) == 32
    arms.close()
    assert _worktrees(repo) == [] and not arms.root.exists()
