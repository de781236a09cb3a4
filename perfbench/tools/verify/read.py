"""`perfbench verify --read BUNDLE`: print a bundle's one-page summary anywhere, torch or not.

BUNDLE is DIR.tar.gz or the DIR folder. Imports no torch and nothing of model/: only the summary module.
"""

from __future__ import annotations

import tarfile
import zlib
from pathlib import Path
from typing import Any

from perfbench.bounded_files import check_size, load_json, loads_json, read_capped_stream, size_text
from perfbench.errors import UserError
from perfbench.terminal_text import echo
from perfbench.tools.verify.summary import Summary, render
from perfbench.tools.verify.summary_file import summary_of

SUMMARY_BYTES = 16 * 1024**2  # verify writes a few kB; a bundle is attached to an issue, so it may be anyone's
MAX_MEMBERS = 10_000  # a verify bundle holds a few dozen files


def _summary_json(path: Path) -> tuple[Any, str]:
    """summary.json's parsed JSON and where it was read, size- and depth-capped (perfbench/bounded_files.py)."""
    if path.is_dir():
        file = path / "summary.json"
        if not file.is_file():
            raise UserError(f"{path}: no summary.json (not a perfbench verify folder)")
        return load_json(file, SUMMARY_BYTES), str(file)
    if not path.is_file():  # a FIFO or a device would block the reader, or never end
        raise UserError(f"{path}: not a regular file or folder (a verify bundle is DIR.tar.gz or the DIR folder)")
    check_size(path, SUMMARY_BYTES * 64)
    if not tarfile.is_tarfile(path):
        raise UserError(f"{path}: neither a verify bundle (.tar.gz) nor a verify folder")
    with tarfile.open(path, "r:*") as tar:
        # the summary at the top of the bundle's one folder (DIR/summary.json); headers read one by one, capped
        member = None
        for count, info in enumerate(tar, 1):
            if count > MAX_MEMBERS:
                raise UserError(f"{path}: more than {MAX_MEMBERS:,} members: not a perfbench verify bundle")
            if info.isfile() and info.name.count("/") == 1 and info.name.endswith("/summary.json"):
                member = info
                break
        if member is None:
            raise UserError(f"{path}: the archive holds no DIR/summary.json (not a perfbench verify bundle)")
        where = f"{path}:{member.name}"
        if member.size > SUMMARY_BYTES:  # the header's size, a sparse member's too: nothing is inflated
            raise UserError(f"{where}: {size_text(member.size)}, over the {size_text(SUMMARY_BYTES)} this reader "
                            "takes")
        handle = tar.extractfile(member)
        assert handle is not None  # a regular file member
        return loads_json(read_capped_stream(handle, SUMMARY_BYTES, where), where), where


def load_summary(path: Path) -> Summary:
    try:
        raw, where = _summary_json(path)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise UserError(f"{path}: summary.json cannot be read ({type(err).__name__}: {err})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("items"), list):
        raise UserError(f"{where}: not a verify summary (no items list)")
    return summary_of(raw, where)


def read_bundle(path: Path) -> int:
    """Print the summary; the exit code is the one the run ended with (0 passed, 1 something failed)."""
    summary = load_summary(path)
    echo(render(summary))
    return summary.exit_code
