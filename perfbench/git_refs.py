"""Commit names that reach git: a value read from a result folder, an ab record, a baseline, a bisect state or a
history store is data, never an option.

A recorded commit is a hexadecimal object name (4 to 64 digits: abbreviated, SHA-1 or SHA-256), or one of the
placeholders perfbench itself writes when no commit is known ("unknown", "working tree"). Anything else
("HEAD~1", "--output=FILE", "--stdin") is refused where it is read, in one line. A ref the user types (GOOD, BAD,
BASE, --since) is resolved with `git rev-parse --verify --end-of-options REF^{commit}`, so git reads it as a
revision even when it looks like an option, and only the sha git answers is passed on. tests/perfbench/
test_subprocess_guards.py walks every subprocess call site of perfbench and checks its guard.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from perfbench.errors import UserError

SHA_PATTERN = re.compile(r"[0-9a-fA-F]{4,64}")
# what perfbench records when it knows no commit: run/ab.py's working-tree arm, measure/git_state.py outside git
NO_COMMIT = ("unknown", "working tree")
END_OF_OPTIONS = "--end-of-options"


def is_sha(value: object) -> bool:
    """Whether `value` is a hexadecimal object name (4 to 64 digits)."""
    return isinstance(value, str) and SHA_PATTERN.fullmatch(value) is not None


def recorded_commit_problem(value: object) -> str:
    """Why a recorded commit cannot be stored or passed to git ("" when it can: a sha, a placeholder, or none)."""
    if value is None or value in NO_COMMIT or is_sha(value):
        return ""
    return (f"{str(value)[:60]!r} is not a commit sha (4 to 64 hex digits, or {' or '.join(map(repr, NO_COMMIT))}); "
            "refused, since it would reach git as an option or a revision")


def checked_sha(value: str, where: str) -> str:
    """`value` when it is a sha; else a one-line UserError starting with `where`."""
    if not is_sha(value):
        raise UserError(f"{where}: {str(value)[:60]!r} is not a commit sha (4 to 64 hex digits)")
    return value


def git_command(repo: Path, *args: str) -> list[str]:
    """`git -C REPO ARGS...`; the repository given as an absolute path, so it never reads as an option."""
    return ["git", "-C", str(Path(repo).absolute()), *args]


def resolve_commit(repo: Path, ref: str, timeout_s: float = 60) -> str | None:
    """The full sha of the commit `ref` names in `repo` (None when it names none, or git is not there). `ref` goes
    after --end-of-options: "--output=FILE" is looked up as a revision (and not found), never obeyed."""
    try:
        done = subprocess.run(git_command(repo, "rev-parse", "--verify", "--quiet", END_OF_OPTIONS,
                                          f"{ref}^{{commit}}"),
                              capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and is_sha(sha) else None
