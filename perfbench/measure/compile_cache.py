"""Where a sweep's compile cache lives: one per sweep (a kernel compiles once; the first run compiles cold, later
ones warm), inside `--out` when the compiler's command line can take that path, else in the per-user cache.

Inductor passes the cache path to g++ unquoted: a space splits it (g++ then reads "dir" and "with" as files), and
non-ASCII or shell characters are as risky. Such an `--out` gets a folder of the per-user cache named by a hash of
its path, so a resumed sweep into the same `--out` finds its kernels again.
"""

from __future__ import annotations

import getpass
import hashlib
import platform
import re
import tempfile
from pathlib import Path

from perfbench.results.host_kind import this_host
from perfbench.roofline.peaks import cache_dir

SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")  # what a compiler command line passes through unquoted


def is_safe(path: Path) -> bool:
    return bool(SAFE_PATH.fullmatch(str(path)))


def compile_cache_root(out: Path) -> Path:
    """The compile caches' folder of the sweep writing `out` (absolute, with a command-line safe path):
    `out`/compile_cache, else a per-user folder named by the hash of `out`'s path."""
    inside = (out / "compile_cache").absolute()
    if is_safe(inside):
        return inside
    key = hashlib.sha256(str(out.absolute()).encode()).hexdigest()[:16]
    for root in (cache_dir(), Path(tempfile.gettempdir()) / f"perfbench-{getpass.getuser()}"):
        candidate = (root / "compile" / key).absolute()
        if is_safe(candidate):
            return candidate
    raise OSError(f"--out {out}: no compile cache path without spaces or special characters (set PERFBENCH_CACHE "
                  "to a plain path)")


def compile_cache_dir(out: Path) -> Path:
    """The inductor cache of the sweep writing `out`."""
    return compile_cache_root(out) / "inductor"


def shared_compile_cache() -> Path:
    """The per-user inductor cache that outlives every result folder (ab, calibrate, gate --confirm, bisect): one
    folder per host kind and versions of torch and Python. The code is keyed by inductor itself (an entry is found
    by the hash of its graph), so a graph no commit changed stays warm across commits and jobs."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "none"
    key = f"{this_host().key()}-torch{torch_version}-py{platform.python_version()}"
    return cache_dir() / "inductor" / re.sub(r"[^A-Za-z0-9_.+-]", "_", key)
