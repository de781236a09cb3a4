"""Which commit of perfbench's checkout is running (torch-free: the gate and baseline commands read it too)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    # callers pass constant arguments only: nothing read from a folder or a store reaches this git
    try:
        out = subprocess.run(["git", "-C", str(REPO_DIR), *args], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state() -> tuple[str, bool | None]:
    """(commit sha of perfbench's checkout or "unknown", whether tracked files differ from it)."""
    sha = _git("rev-parse", "HEAD")
    if not sha:
        return "unknown", None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return sha.strip(), (bool(status.strip()) if status is not None else None)
