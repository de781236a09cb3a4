"""Which commit of perfbench's checkout is running (torch-free: the gate and baseline commands read it too)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[2]


def _git(*args: str, repo: Path = REPO_DIR) -> str | None:
    # callers pass constant arguments only (and a folder a package was imported from): nothing read from a
    # results folder or a store reaches this git
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(repo: Path = REPO_DIR) -> tuple[str, bool | None]:
    """(commit sha of the checkout holding `repo` (default: perfbench's) or "unknown", whether tracked files
    differ from it)."""
    sha = _git("rev-parse", "HEAD", repo=repo)
    if not sha:
        return "unknown", None
    status = _git("status", "--porcelain", "--untracked-files=no", repo=repo)
    return sha.strip(), (bool(status.strip()) if status is not None else None)
