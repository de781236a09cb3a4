"""Output paths, checked before any work starts: one line naming the option and what is wrong.

Every command that writes (`run --out`, `report`, `compare --out`, `trace --out`, `diff --out`,
`baseline save DEST`, `gate --summary`) checks its destination first, so a path it cannot write fails in a second with
`error: --out /x: ...` instead of a PermissionError traceback after minutes of work (and, for the gate,
instead of exit 1, the regression code). A path passes when it exists as the right kind (folder or file) or
can be created: its nearest existing ancestor is a folder this process can create a file in (probed with a
real temporary file, so root, ACLs and read-only mounts answer truthfully) with at least `MIN_FREE_BYTES` free.
The writes themselves stay atomic (perfbench.results.atomic_write_text): a failure mid-write, such as a disk
that fills after the check, leaves the previous file as it was. Stdlib only, no torch.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from perfbench.errors import UserError

# "Some free space": a report page with its plots and CSVs, or a set of trace tables, is a few MB.
MIN_FREE_BYTES = 8 * 2**20


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")  # a relative path whose every part is missing: the working directory


def _check_writable_folder(folder: Path, what: str, path: Path) -> None:
    """`folder` exists; a file can be created in it and it has some free space."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".perfbench-write-check.")
    except OSError as err:
        raise UserError(f"{what} {path}: cannot write in {folder} ({err.strerror or err})") from None
    os.close(fd)
    Path(probe).unlink(missing_ok=True)
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # no answer is not a refusal: the write itself still fails in one line
    if free < MIN_FREE_BYTES:
        raise UserError(f"{what} {path}: only {free / 2**20:.1f} MiB free on the file system of {folder} "
                        f"(need at least {MIN_FREE_BYTES // 2**20} MiB); free some space or write elsewhere")


def _check_creatable(path: Path, what: str) -> None:
    """The missing `path` can be made: its nearest existing ancestor is a writable folder."""
    ancestor = _nearest_existing(path.parent)
    if not ancestor.is_dir():
        raise UserError(f"{what} {path}: {ancestor} is a file, not a folder; choose another path")
    _check_writable_folder(ancestor, what, path)


def check_output_dir(path: str | Path, what: str = "--out") -> Path:
    """`path` is a folder this process can write into, or can be created as one. Returns it as a Path.

    `what` is how the user gave the path (an option or argument name), for the message."""
    path = Path(path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{what} {path}: exists and is not a folder; give a folder path")
        _check_writable_folder(path, what, path)
    else:
        _check_creatable(path, what)
    return path


def check_output_file(path: str | Path, what: str) -> Path:
    """`path` is a file this process can (over)write, or create. Returns it as a Path."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise UserError(f"{what} {path}: is a folder; give a file path")
    if path.exists() and not path.is_file():
        raise UserError(f"{what} {path}: exists and is not a regular file")
    parent = path.parent
    if parent.exists():
        if not parent.is_dir():
            raise UserError(f"{what} {path}: {parent} is a file, not a folder; choose another path")
        _check_writable_folder(parent, what, path)
    else:
        _check_creatable(parent, what)
    return path


def os_error_line(err: OSError) -> str:
    """One line for an OSError from reading or writing: "PATH: No space left on device (ENOSPC)"."""
    if not err.strerror:
        return " ".join(str(err).split())
    code = f" ({errno.errorcode[err.errno]})" if err.errno is not None and err.errno in errno.errorcode else ""
    where = f"{err.filename}: " if err.filename is not None else ""
    return f"{where}{err.strerror}{code}"
