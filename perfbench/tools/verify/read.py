"""`perfbench verify --read BUNDLE`: print a bundle's one-page summary anywhere, torch or not.

BUNDLE is DIR.tar.gz or the DIR folder. Imports no torch and nothing of model/: only the summary module.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import click

from perfbench.errors import UserError
from perfbench.tools.verify.summary import FORMAT, Summary, render


def _summary_json(path: Path) -> Any:
    if path.is_dir():
        file = path / "summary.json"
        if not file.is_file():
            raise UserError(f"{path}: no summary.json (not a perfbench verify folder)")
        return json.loads(file.read_text())
    if not tarfile.is_tarfile(path):
        raise UserError(f"{path}: neither a verify bundle (.tar.gz) nor a verify folder")
    with tarfile.open(path, "r:*") as tar:
        # the summary at the top of the bundle's one folder (DIR/summary.json)
        member = next((m for m in tar.getmembers() if m.isfile() and m.name.count("/") == 1
                       and m.name.endswith("/summary.json")), None)
        if member is None:
            raise UserError(f"{path}: the archive holds no DIR/summary.json (not a perfbench verify bundle)")
        handle = tar.extractfile(member)
        assert handle is not None  # a regular file member
        return json.loads(handle.read())


def load_summary(path: Path) -> Summary:
    try:
        raw = _summary_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError, tarfile.TarError, EOFError) as err:
        raise UserError(f"{path}: summary.json cannot be read ({type(err).__name__}: {err})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("items"), list):
        raise UserError(f"{path}: summary.json is not a verify summary")
    if int(raw.get("format", 0)) > FORMAT:
        raise UserError(f"{path}: summary format {raw['format']} is newer than this perfbench reads ({FORMAT})")
    try:
        return Summary.from_dict(raw)
    except (KeyError, TypeError, ValueError) as err:
        raise UserError(f"{path}: summary.json is incomplete ({type(err).__name__}: {err})") from None


def read_bundle(path: Path) -> int:
    """Print the summary; the exit code is the one the run ended with (0 passed, 1 something failed)."""
    summary = load_summary(path)
    click.echo(render(summary))
    return summary.exit_code
