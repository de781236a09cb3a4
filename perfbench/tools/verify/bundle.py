"""The verify bundle: the folder DIR (summary, results, logs, environment, trimmed traces) and DIR.tar.gz, its
size-capped archive (docs/verify.md, "Bundle").

    DIR/summary.md  summary.json  environment.json  bundle.json
    DIR/results/<item>.json   every check with its measured values
    DIR/logs/<item>.log       tracebacks, torchrun output (the last LOG_MAX_BYTES of each)
    DIR/traces/<plan>/        the profile item's trimmed traces and tables

Torch-free. When the archive would exceed its cap, trace files are left out of it, largest first, and
bundle.json (inside the archive) lists them.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any

from perfbench.results import atomic_write_text
from perfbench.tools.verify.summary import Summary, render_markdown

QUICK_CAP_BYTES = 18 * 10**6  # "under 20 MB", with room to spare
FULL_CAP_BYTES = 200 * 10**6
LOG_MAX_BYTES = 1 << 20
MANIFEST = "bundle.json"


def write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=1, default=str) + "\n")


def write_log(folder: Path, item: str, text: str) -> None:
    if len(text.encode()) > LOG_MAX_BYTES:
        text = "[... cut: the log's last MiB follows]\n" + text.encode()[-LOG_MAX_BYTES:].decode(errors="replace")
    atomic_write_text(folder / "logs" / f"{item}.log", text)


def write_summary(folder: Path, summary: Summary) -> None:
    write_json(folder / "summary.json", summary.to_dict())
    atomic_write_text(folder / "summary.md", render_markdown(summary))


def _archive(folder: Path, files: list[Path], target: Path) -> int:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=f"{folder.name}/{path.relative_to(folder)}", recursive=False)
    tmp.replace(target)
    return target.stat().st_size


def pack(folder: Path, cap_bytes: int) -> tuple[Path, list[str]]:
    """folder -> folder.tar.gz (members under folder's name) of at most `cap_bytes`, leaving out trace files
    (largest first) while it is larger. Returns the archive and what was left out."""
    target = folder.with_name(f"{folder.name}.tar.gz")
    left_out: list[str] = []
    traces = folder / "traces"
    while True:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST
                       and str(p.relative_to(folder)) not in left_out)
        write_json(folder / MANIFEST, {"cap_bytes": cap_bytes, "left_out": left_out,
                                       "files": {str(p.relative_to(folder)): p.stat().st_size for p in files}})
        size = _archive(folder, [*files, folder / MANIFEST], target)
        droppable = [p for p in files if traces in p.parents]
        if size <= cap_bytes or not droppable:
            return target, left_out
        left_out.append(str(max(droppable, key=lambda p: p.stat().st_size).relative_to(folder)))
