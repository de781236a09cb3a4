"""A commit's position on the first-parent history of a repository (the x axis of a series)."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path


@cache
def first_parent_order(repo: Path, sha: str) -> int | None:
    """`git rev-list --first-parent --count SHA` in `repo`; None when git or the commit is not there."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-list", "--first-parent", "--count", sha],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return int(text) if out.returncode == 0 and text.isdigit() else None


def resolve_ref(repo: Path, ref: str) -> str | None:
    """The full sha of `ref` in `repo`, None when it does not name a commit there."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
