"""The two arms of `perfbench ab`: which code each arm's worker imports.

An arm is a git ref (checked out as a detached worktree in a temporary folder) or the working tree. Either way
the worker runs under the current harness: its sys.path starts with an overlay folder in which `model` links to
the arm's `model/` and `perfbench` to the current `perfbench/`. Weights and workloads come from the same seeded
specs, so the arms differ only in the model code.

A job removes only what it made and can prove it made. At creation it draws a random token, kept in memory
(`ArmSet.token`) and written twice: into the temporary folder's `owner.json` (with its pid and the process's
start time) and into each worktree's own git admin folder (`.git/worktrees/<name>/perfbench-ab-token`, which
`git worktree remove` deletes with it). A job killed before it could remove its worktrees (SIGKILL, a crashed
host) leaves them registered; a later job's `check_out`, once its own arms are ready, removes a
`perfbench-ab-*/worktree-*` only when both tokens are there and match, the owner is dead (pid gone, or reused
by another process: the start time differs), and the worktree holds no change but Python's bytecode caches.
Anything else is left as it is: a folder a user named so, a worktree someone edited (said on stderr, with how to
remove it). `git worktree prune` drops the registrations of folders already gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from perfbench.errors import UserError
from perfbench.git_refs import checked_sha, git_command, resolve_commit

PERFBENCH_DIR = Path(__file__).resolve().parent.parent
WORKING_TREE = "working tree"
ROOT_PREFIX = "perfbench-ab-"
OWNER_FILE = "owner.json"  # {"pid", "started", "token"} of the job that made the folder
TOKEN_FILE = "perfbench-ab-token"  # in a worktree's git admin folder: the token of the job that added it
OWNER_BYTES = 4096  # an owner.json is ~100 bytes; a larger one is not perfbench's


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


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(git_command(repo, *args), capture_output=True, text=True, timeout=60, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None


def _token_of(tree: Path) -> str | None:
    """The token in `tree`'s git admin folder (written by the job that added it), None when there is none."""
    done = _run(tree, "rev-parse", "--absolute-git-dir")
    if done is None or done.returncode or not done.stdout.strip():
        return None
    try:
        with open(Path(done.stdout.strip()) / TOKEN_FILE, "rb") as handle:
            return handle.read(200).decode("ascii", "replace").strip() or None
    except OSError:
        return None


def _user_changes(tree: Path) -> list[str] | None:
    """What `git status` shows in `tree` besides Python's bytecode caches (the job's own imports write those);
    None when git cannot tell (then nothing is removed)."""
    done = _run(tree, "status", "--porcelain", "--untracked-files=all")
    if done is None or done.returncode:
        return None
    return [line for line in done.stdout.splitlines()
            if line.strip() and "__pycache__/" not in line and not line.endswith((".pyc", ".pyo"))]


def _remove_worktree(repo: Path, tree: Path, token: str) -> str | None:
    """Remove the worktree `tree` when it holds `token` (it is the job's that knows the token) and no change but
    bytecode caches; otherwise leave it. None when removed, else why it was left."""
    if _token_of(tree) != token:
        return "not made by this job (its token differs)"
    changes = _user_changes(tree)
    if changes is None:
        return "git status could not be read"
    if changes:
        return f"it holds changes ({len(changes)} path{'s' * (len(changes) != 1)}, e.g. {changes[0][3:][:60]})"
    # --force only for the caches: `tree` is a path after --, absolute, so never an option
    done = _run(repo, "worktree", "remove", "--force", "--", str(tree.absolute()))
    if done is None or done.returncode:
        return "git worktree remove failed" + (f" ({done.stderr.strip()[-120:]})" if done is not None else "")
    return None


def _remove_root(root: Path) -> None:
    """Remove what a job put in its temporary folder (overlays, owner.json, emptied worktree folders), then the
    folder when nothing else is in it; anything else someone put there stays."""
    for entry in root.glob("overlay-*"):
        shutil.rmtree(entry, ignore_errors=True)  # symlinks only: their targets are never followed
    for entry in root.glob("worktree-*"):
        if entry.is_dir() and not entry.is_symlink() and not any(entry.iterdir()):
            entry.rmdir()
    if not [e for e in root.iterdir() if e.name != OWNER_FILE]:
        (root / OWNER_FILE).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.rmdir()


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
    token: str = ""  # drawn at creation, written into owner.json and each worktree's admin folder
    _removed: bool = field(default=False, repr=False)

    def close(self) -> None:
        if self._removed:
            return
        _close(self.repo, self.root, self.token, [a.worktree for a in (self.base, self.head) if a.worktree])
        self._removed = True


def _close(repo: Path, root: Path, token: str, trees: list[Path]) -> None:
    kept = False
    for tree in trees:
        why = _remove_worktree(repo, tree, token) if tree.exists() else None
        if why is not None:
            kept = True
            print(f"ab: left the worktree {tree}: {why}; `git worktree remove --force {tree}` removes it",
                  file=sys.stderr)
    if kept:
        for entry in root.glob("overlay-*"):
            shutil.rmtree(entry, ignore_errors=True)
    else:
        _remove_root(root)


def _overlay(root: Path, name: str, checkout: Path) -> Path:
    overlay = root / f"overlay-{name}"
    overlay.mkdir()
    if not (checkout / "model" / "__init__.py").is_file():
        raise UserError(f"{name} arm: {checkout} has no model/ package to import")
    (overlay / "model").symlink_to(checkout / "model", target_is_directory=True)
    (overlay / "perfbench").symlink_to(PERFBENCH_DIR, target_is_directory=True)
    return overlay


def _arm(name: str, ref: str | None, repo: Path, root: Path, token: str) -> Arm:
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
    try:
        admin = Path(_git(tree, "rev-parse", "--absolute-git-dir"))
        (admin / TOKEN_FILE).write_text(f"{token}\n")  # the proof that this job made it (module docstring)
    except (OSError, UserError) as err:  # just added, by this job, unchanged: removed at once
        _run(repo, "worktree", "remove", "--force", "--", str(tree.absolute()))
        raise UserError(f"{name} arm: cannot mark the worktree {tree} as this job's ({err})") from None
    return Arm(name, ref, sha, tree, _overlay(root, name, tree), worktree=tree)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22), None where there is no /proc:
    with the pid it tells a live owner from a process that reused its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name (which may hold spaces): field 3 onwards
    return fields[19] if len(fields) > 19 else None


def _owner(root: Path) -> dict[str, object] | None:
    """owner.json of a job's folder: {"pid": int, "started": str | None, "token": hex}; None when it is missing or
    not in that shape (a folder perfbench did not make, or one of an older version: both left alone)."""
    try:
        with open(root / OWNER_FILE, "rb") as handle:
            data = handle.read(OWNER_BYTES + 1)
        owner = json.loads(data) if len(data) <= OWNER_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(owner, dict) and isinstance(owner.get("pid"), int) and isinstance(owner.get("token"), str)
            and len(owner["token"]) == 32 and all(c in "0123456789abcdef" for c in owner["token"])):
        return None
    return owner


def _owner_alive(owner: dict[str, object]) -> bool:
    pid = owner["pid"]
    if not isinstance(pid, int) or pid <= 0 or not _alive(pid):
        return False
    recorded, now = owner.get("started"), _started(pid)
    return recorded is None or now is None or recorded == now  # another start time: the pid was reused


def prune_stale(repo: Path) -> list[Path]:
    """Remove the worktrees of perfbench jobs that died without removing them (module docstring: only with both
    tokens matching, the owner dead and no change in them); returns the worktrees removed. One that was
    perfbench's but holds changes is left, said on stderr."""
    removed = []
    listing = _git(repo, "worktree", "list", "--porcelain")
    for line in listing.splitlines():
        if not line.startswith("worktree "):
            continue
        tree = Path(line.removeprefix("worktree "))
        root = tree.parent
        if not root.name.startswith(ROOT_PREFIX) or not tree.name.startswith("worktree-") or not tree.is_dir():
            continue
        owner = _owner(root)
        if owner is None or _owner_alive(owner):
            continue
        why = _remove_worktree(repo, tree, str(owner["token"]))
        if why is None:
            removed.append(tree)
            _remove_root(root)
        elif _token_of(tree) == owner["token"]:  # perfbench's, but someone changed it: say so, keep it
            print(f"ab: left the worktree {tree} of a perfbench ab job that died (pid {owner['pid']}): {why}; "
                  f"`git worktree remove --force {tree}` removes it", file=sys.stderr)
    _git(repo, "worktree", "prune")
    return removed


def check_out(base: str, head: str | None, repo: Path) -> ArmSet:
    """Both arms ready to import (`head` None: the working tree). Close the result to remove the worktrees.
    Stale worktrees of dead jobs are pruned once the arms are ready: a job refused (a ref that is no commit)
    touches nothing but its own folder."""
    token = secrets.token_hex(16)
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
    pid = os.getpid()
    (root / OWNER_FILE).write_text(json.dumps({"pid": pid, "started": _started(pid), "token": token}) + "\n")
    arms: list[Arm] = []
    try:
        for name, ref in (("base", base), ("head", head)):
            arms.append(_arm(name, ref, repo, root, token))
        prune_stale(repo)
    except BaseException:
        _close(repo, root, token, [tree for tree in (root / "worktree-base", root / "worktree-head")
                                   if tree.exists()])
        raise
    return ArmSet(arms[0], arms[1], root, repo, token)
