"""The two arms of `perfbench ab`: which code each arm's worker imports.

An arm is a git ref (checked out as a detached worktree in a temporary folder) or the working tree. Either way
the worker runs under the current harness: its sys.path starts with an overlay folder in which `model` links to
the arm's `model/` and `perfbench` to the current `perfbench/`. Weights and workloads come from the same seeded
specs, so the arms differ only in the model code.

The temporary folder (`perfbench-ab-*`) names its owner's pid in `owner.pid`. A job killed before it could remove
its worktrees (SIGKILL, a crashed host) leaves them registered in the user's repository; the next job's
`check_out` removes every perfbench worktree whose owner is no longer alive, and `git worktree prune` drops
the registrations of folders already gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from perfbench.errors import UserError
from perfbench.git_refs import checked_sha, git_command, resolve_commit

PERFBENCH_DIR = Path(__file__).resolve().parent.parent
WORKING_TREE = "working tree"
ROOT_PREFIX = "perfbench-ab-"
OWNER_FILE = "owner.pid"


@dataclass
class Arm:
    name: str  # "base" or "head"
    ref: str  # as the user gave it, or WORKING_TREE
    sha: str | None  # the commit, None for the working tree
    checkout: Path  # the folder holding the arm's model/
    overlay: Path  # first on the worker's sys.path
    worktree: Path | None = None  # to remove at the end
    dirty: bool = False  # the working tree differs from its HEAD

    def describe(self) -> str:
        if self.sha is None:
            return f"{self.name}: the working tree at {self.checkout}" + (" (uncommitted changes)" * self.dirty)
        return f"{self.name}: {self.ref} = {self.sha[:12]}"


def _git(repo: Path, *args: str) -> str:
    """git with perfbench's own arguments: a ref after --end-of-options, a sha checked, paths absolute."""
    try:
        done = subprocess.run(git_command(repo, *args), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        raise UserError(f"git {' '.join(args)}: {err}") from None
    if done.returncode:
        message = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise UserError(f"git {' '.join(args)}: {message}")
    return done.stdout.strip()


def _remove_worktree(repo: Path, tree: Path) -> None:
    # `tree` comes from `git worktree list` too: after --, and absolute, it is only ever a path
    subprocess.run(git_command(repo, "worktree", "remove", "--force", "--", str(tree.absolute())),
                   capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def repository_of(path: Path) -> Path:
    """The git repository holding `path` (the current checkout), or a one-line error."""
    return Path(_git(path, "rev-parse", "--show-toplevel"))


@dataclass
class ArmSet:
    """Both arms and the temporary folder that holds their worktrees and overlays."""

    base: Arm
    head: Arm
    root: Path
    repo: Path
    _removed: bool = field(default=False, repr=False)

    def close(self) -> None:
        if self._removed:
            return
        for arm in (self.base, self.head):
            if arm.worktree is not None:
                _remove_worktree(self.repo, arm.worktree)
        shutil.rmtree(self.root, ignore_errors=True)
        self._removed = True


def _overlay(root: Path, name: str, checkout: Path) -> Path:
    overlay = root / f"overlay-{name}"
    overlay.mkdir()
    if not (checkout / "model" / "__init__.py").is_file():
        raise UserError(f"{name} arm: {checkout} has no model/ package to import")
    (overlay / "model").symlink_to(checkout / "model", target_is_directory=True)
    (overlay / "perfbench").symlink_to(PERFBENCH_DIR, target_is_directory=True)
    return overlay


def _arm(name: str, ref: str | None, repo: Path, root: Path) -> Arm:
    if ref is None:
        dirty = bool(_git(repo, "status", "--porcelain", "--", "model"))
        return Arm(name, WORKING_TREE, None, repo, _overlay(root, name, repo), dirty=dirty)
    sha = resolve_commit(repo, ref) if ref else None
    if not sha:
        shallow = _git(repo, "rev-parse", "--is-shallow-repository") == "true"
        hint = "; this clone is shallow: `git fetch --unshallow` brings the history" if shallow else ""
        raise UserError(f"{name} arm: {ref!r} is not a commit in {repo}{hint}")
    tree = root / f"worktree-{name}"
    _git(repo, "worktree", "add", "--detach", "--force", "--", str(tree.absolute()), checked_sha(sha, name))
    return Arm(name, ref, sha, tree, _overlay(root, name, tree), worktree=tree)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune_stale(repo: Path) -> list[Path]:
    """Remove the worktrees of perfbench jobs that died without removing them; returns the folders removed."""
    removed = []
    listing = _git(repo, "worktree", "list", "--porcelain")
    for line in listing.splitlines():
        if not line.startswith("worktree "):
            continue
        tree = Path(line.removeprefix("worktree "))
        root = tree.parent
        if not root.name.startswith(ROOT_PREFIX) or not tree.name.startswith("worktree-"):
            continue
        try:
            owner = int((root / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            owner = -1
        if owner > 0 and _alive(owner):
            continue
        _remove_worktree(repo, tree)
        shutil.rmtree(root, ignore_errors=True)
        removed.append(tree)
    _git(repo, "worktree", "prune")
    return removed


def check_out(base: str, head: str | None, repo: Path) -> ArmSet:
    """Both arms ready to import (`head` None: the working tree). Close the result to remove the worktrees."""
    prune_stale(repo)
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
    (root / OWNER_FILE).write_text(f"{os.getpid()}\n")
    arms: list[Arm] = []
    try:
        for name, ref in (("base", base), ("head", head)):
            arms.append(_arm(name, ref, repo, root))
    except BaseException:
        for arm in arms:
            if arm.worktree is not None:
                _remove_worktree(repo, arm.worktree)
        shutil.rmtree(root, ignore_errors=True)
        raise
    return ArmSet(arms[0], arms[1], root, repo)
