"""A planted commit: the repository's HEAD with a model forward slower by a chosen factor.

For power studies of `perfbench ab` (benchmarks/ab_power.py) and its end-to-end test: the product never slows
itself on request, so the slowdown is written into a throwaway commit (made in a temporary worktree). The plant
wraps every timed forward of the generation loop: after the forward returns it spins (busy, on the CPU like the
model's own work) for `factor` times the forward's own duration, so TTFT and TPOT both grow by about that
factor on any host.
What the slowdown comes to is measured, not assumed: a long interleaved run says (benchmarks/ab_power.py).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

ANCHOR = "        run = run_step or _call_forward\n"
PLANT = '''        run = run_step or _call_forward
        run = _planted_slowdown(run, {factor!r})  # planted by benchmarks/planted.py
'''
HELPER = '''

def _planted_slowdown(run, factor):
    """Each forward, then a busy wait of `factor` times its duration (a planted slowdown)."""
    import time

    def slowed(phase, step, forward):
        def slow_forward():
            start = time.perf_counter()
            out = forward()
            end = start + (time.perf_counter() - start) * (1.0 + factor)
            while time.perf_counter() < end:
                pass
            return out
        return run(phase, step, slow_forward)
    return slowed
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def plant_source(source: str, factor: float) -> str:
    """model/modeling.py with the plant; a source without the anchor line is an error, never a silent no-op."""
    if source.count(ANCHOR) != 1:
        raise ValueError("model/modeling.py: the generation loop's `run = run_step or _call_forward` line is not "
                         "there once; update benchmarks/planted.py")
    return source.replace(ANCHOR, PLANT.format(factor=factor)) + HELPER


def commit_source(repo: Path, edit: Callable[[Path], None] | None, message: str) -> tuple[str, str]:
    """Commit `edit(worktree)` on top of `repo`'s HEAD in a temporary detached worktree (no branch moves, nothing
    in the working tree changes): (parent sha, new sha). `edit` None makes an empty commit."""
    parent = _git(repo, "rev-parse", "HEAD")
    with tempfile.TemporaryDirectory(prefix="perfbench-plant-") as tmp:
        tree = Path(tmp) / "tree"
        _git(repo, "worktree", "add", "-q", "--detach", str(tree), parent)
        try:
            who = ["-c", "user.name=perfbench planted", "-c", "user.email=planted@localhost"]
            if edit is not None:
                edit(tree)
                _git(tree, "add", "-A")
            _git(tree, *who, "commit", "-q", "--allow-empty", "-m", message)
            planted = _git(tree, "rev-parse", "HEAD")
        finally:
            _git(repo, "worktree", "remove", "--force", str(tree))
    return parent, planted


def commit_plant(repo: Path, factor: float) -> tuple[str, str]:
    """The plant committed on top of `repo`'s HEAD: (parent sha, planted sha). `factor` 0 makes an empty commit
    (an A/A pair of different commits with the same code)."""
    if not factor:
        return commit_source(repo, None, "A/A: no change")

    def plant(tree: Path) -> None:
        path = tree / "model" / "modeling.py"
        path.write_text(plant_source(path.read_text(), factor))

    return commit_source(repo, plant, f"planted slowdown x{1 + factor:g}")
