"""A commit's position on the first-parent history of a repository (the x axis of a series)."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

from perfbench.git_refs import END_OF_OPTIONS, git_command, is_sha, resolve_commit


@cache
def first_parent_order(repo: Path, sha: str) -> int | None:
    """`git rev-list --first-parent --count SHA` in `repo`; None when git or the commit is not there, or `sha` is
    not a sha (it was read from a folder or a store: never passed to git as an option)."""
    if not is_sha(sha):
        return None
    try:
        out = subprocess.run(git_command(repo, "rev-list", "--first-parent", "--count", END_OF_OPTIONS, sha),
                             capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return int(text) if out.returncode == 0 and text.isdigit() else None


def resolve_ref(repo: Path, ref: str) -> str | None:
    """The full sha of `ref` in `repo`, None when it does not name a commit there (perfbench/git_refs.py)."""
    return resolve_commit(repo, ref, timeout_s=30)
