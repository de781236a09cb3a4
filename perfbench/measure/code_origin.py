"""Which code a process perfbench starts imports, and the record of where it came from.

`python -m module` puts the current folder first on sys.path, so a worker started while standing in another
checkout would import that checkout's model/ and perfbench/ instead of the code the command runs. Every process
perfbench starts for a run or a check is therefore started by `module_command`: `python -c` with a bootstrap that
drops the current folder from sys.path, puts the command's own code root (`CODE_ROOT`, the folder perfbench was
imported from) first, and runs the module as `__main__`. The root also travels in `CODE_ROOT_ENV`, and the worker
refuses to measure (`code_root_problem`) when model/ or perfbench/ came from elsewhere.

`code_origins` is what a result records (Environment.code): per package, its folder and the commit and dirty
flag of the checkout holding it; `gather_code_origins` collects them from every rank of a process group.
torch-free, like git_state.py: the gate reads the records.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
from pathlib import Path

from perfbench.measure.git_state import _git, git_state
from perfbench.results import CodeOrigin

# not resolved, so a symlinked checkout stays itself (the same root the launcher puts on PYTHONPATH)
CODE_ROOT = Path(__file__).parent.parent.parent.absolute()
CODE_ROOT_ENV = "PERFBENCH_CODE_ROOT"
PACKAGES = ("model", "perfbench")

# run as `python -c BOOTSTRAP ROOT MODULE ARGS...`: sys.argv is ["-c", ROOT, MODULE, ARGS...] until run_module
# sets it to [MODULE's file, ARGS...]
BOOTSTRAP = (
    "import runpy, sys\n"
    "root, module = sys.argv[1], sys.argv[2]\n"
    "if sys.path and sys.path[0] in ('', '.'):\n"
    "    del sys.path[0]\n"
    "sys.path.insert(0, root)\n"
    "sys.argv[1:3] = []\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def module_command(python: str, module: str, *args: str, root: Path = CODE_ROOT) -> list[str]:
    """`python -m module args` that imports from `root` (this code) whatever folder the process starts in."""
    return [python, "-c", BOOTSTRAP, str(root), module, *args]


def package_folder(package: str) -> Path | None:
    """The folder `package` is imported from in this process (imported now if it was not yet)."""
    try:
        module = sys.modules.get(package) or importlib.import_module(package)
    except ImportError:
        return None
    file = getattr(module, "__file__", None)
    return Path(file).parent.absolute() if file else None


def code_root_problem(root: str | None = None) -> str | None:
    """Why this process does not run the code under `root` (default: $PERFBENCH_CODE_ROOT; None: unchecked)."""
    root = root if root is not None else os.environ.get(CODE_ROOT_ENV)
    if not root:
        return None
    want = Path(root).resolve()
    for package in PACKAGES:
        folder = package_folder(package)
        if folder is None or folder.resolve().parent != want:
            return (f"{package}/ was imported from {folder or 'nowhere'}, not from {root} (the code the command "
                    f"runs); start the worker through perfbench")
    return None


def _checkout_state(folder: Path) -> tuple[str, bool | None]:
    """The commit and dirty flag of the checkout whose top folder holds `folder` ("unknown" for an installed copy,
    even inside some other repository's tree)."""
    top = _git("rev-parse", "--show-toplevel", repo=folder)
    if not top or Path(top.strip()).resolve() != folder.resolve().parent:
        return "unknown", None
    return git_state(folder.parent)


def code_origins(rank: int = 0) -> list[CodeOrigin]:
    """Where this process imported model/ and perfbench/ from."""
    host = socket.gethostname()
    states: dict[Path, tuple[str, bool | None]] = {}
    out = []
    for package in PACKAGES:
        folder = package_folder(package)
        if folder is None:
            continue
        if folder.parent not in states:
            states[folder.parent] = _checkout_state(folder)
        sha, dirty = states[folder.parent]
        out.append(CodeOrigin(package=package, path=str(folder), git_sha=sha, git_dirty=dirty, rank=rank,
                              hostname=host))
    return out


def gather_code_origins() -> list[CodeOrigin]:
    """Every rank's `code_origins` when a process group is up (a collective: every rank calls it), else this
    process's own."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return code_origins()
    rank = dist.get_rank()
    mine = [o.to_dict() for o in code_origins(rank)]
    everyone: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return [CodeOrigin.model_validate(entry) for part in everyone if isinstance(part, list) for entry in part]


def mixed_code(origins: list[list[CodeOrigin]]) -> str | None:
    """What the runs (one list of origins each) disagree about: a package from different commits or dirty
    states, or from different folders on one host; None when they agree."""
    for package in PACKAGES:
        found = [o for run in origins for o in run if o.package == package]
        commits = sorted({f"{o.git_sha or 'unknown'}{' (dirty)' if o.git_dirty else ''}" for o in found})
        if len(commits) > 1:
            return f"{package}/ comes from {len(commits)} commits: {', '.join(commits)}"
        for host in sorted({o.hostname or "" for o in found}):
            paths = sorted({o.path for o in found if (o.hostname or "") == host})
            if len(paths) > 1:
                return f"{package}/ comes from {len(paths)} folders{f' on {host}' if host else ''}: " \
                       f"{', '.join(paths)}"
    return None
