"""Where a commit sits: its position on the first-parent history of a repository (the x axis of a series), and
its committer date, which orders commits where the position is unknown.

A shallow clone (`git clone --depth 1`, most CI systems' default) knows one commit: every commit would be at
position 1. There the position is left unknown and the commit date orders; an ingest from a full clone later
re-places the stored commits (`mainline_positions`). Every sha given to git here is checked to be hex first and
follows `--end-of-options`: nothing read from a folder or a store reaches git as an option.
"""

from __future__ import annotations

import re
import subprocess
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from perfbench.git_refs import END_OF_OPTIONS, git_command

SHA = re.compile(r"[0-9a-f]{7,64}")
GIT_TIMEOUT_S = 30


def is_sha(text: str) -> bool:
    """A commit id as git prints it: 7 to 64 lower-case hex digits (never a ref like HEAD~1, never an option)."""
    return SHA.fullmatch(text) is not None


def _git(repo: Path, *args: str) -> str | None:
    """git's stdout, None when git, the repository or the object is not there."""
    try:
        out = subprocess.run(git_command(repo, *args), capture_output=True, text=True,
                             timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@cache
def is_shallow(repo: Path) -> bool:
    """Whether `repo` is a shallow clone (its history cut: positions there are not first-parent positions)."""
    return _git(repo, "rev-parse", "--is-shallow-repository") == "true"


@cache
def first_parent_order(repo: Path, sha: str) -> int | None:
    """`git rev-list --first-parent --count SHA` in `repo`; None when git or the commit is not there, the sha is
    not hex, or the clone is shallow (the count would be of the commits it happens to have)."""
    if not is_sha(sha) or is_shallow(repo):
        return None
    text = _git(repo, "rev-list", "--first-parent", "--count", END_OF_OPTIONS, sha)
    return int(text) if text and text.isdigit() else None


@cache
def commit_date(repo: Path, sha: str) -> str | None:
    """The committer date of `sha` in `repo` as ISO 8601 UTC (sorts as text); None when it is not there."""
    if not is_sha(sha):
        return None
    text = _git(repo, "log", "-1", "--no-walk", "--format=%ct", END_OF_OPTIONS, sha)
    if not text or not text.isdigit():
        return None
    return datetime.fromtimestamp(int(text), timezone.utc).isoformat()


def mainline_positions(repo: Path) -> dict[str, int]:
    """sha -> first-parent position of every commit on HEAD's first-parent history of a full clone (one git
    call); {} in a shallow clone or outside a repository."""
    if is_shallow(repo):
        return {}
    text = _git(repo, "rev-list", "--first-parent", "--reverse", "HEAD", "--")
    return {sha: i for i, sha in enumerate(text.split(), 1)} if text else {}


def topo_ranks(repo: Path, shas: list[str]) -> dict[str, int]:
    """sha -> rank of each of `shas` that `repo` holds in topological order (parents before children: commits
    with one committer date, as a rebase makes them, in the order they were made); {} when git or the
    repository is not there. One git call; the shas go on stdin (checked hex first), unknown ones are ignored."""
    wanted = [sha for sha in dict.fromkeys(shas) if is_sha(sha)]
    if not wanted:
        return {}
    try:
        out = subprocess.run(git_command(repo, "rev-list", "--topo-order", "--reverse", "--ignore-missing",
                                         "--stdin"), input="\n".join(wanted) + "\n", capture_output=True,
                             text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0:
        return {}
    asked = set(wanted)
    listed = [sha for sha in out.stdout.split() if sha in asked]
    return {sha: rank for rank, sha in enumerate(listed)}


def resolve_ref(repo: Path, ref: str) -> str | None:
    """The full sha of `ref` in `repo`, None when it does not name a commit there."""
    return _git(repo, "rev-parse", "--verify", "--quiet", END_OF_OPTIONS, f"{ref}^{{commit}}") or None
