"""What each `perfbench history` subcommand does and prints (the CLI only parses options)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tabulate import tabulate

from perfbench.analysis.stats import CI_LEVEL
from perfbench.errors import UserError
from perfbench.history import location
from perfbench.history.extract import snapshot
from perfbench.history.series import Filters, Series, load_series
from perfbench.history.store import ingest, open_store, snapshots
from perfbench.results import atomic_write_text

WIDTH = 120  # terminal columns


def store_line(db: str | None) -> str:
    return f"history store: {location.shown(location.resolve(db))}"


def ingest_command(folders: list[Path], db: str | None, repo: Path) -> str:
    """Every folder read and checked before anything is written; then all stored in one transaction."""
    for folder in folders:
        if not folder.is_dir():
            raise UserError(f"{folder}: not a folder (give result, ab or baseline folders)")
    snaps = [snapshot(folder, repo) for folder in folders]
    return "\n".join(ingest(open_store(db), snaps))


def _ci(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def series_table(series: Series) -> str:
    rows = [[p.commit_order if p.commit_order is not None else "one-off",
             (p.sha or "-")[:10] + ("+" if p.dirty else ""), f"{p.value:.3f}",
             _ci(p.low, p.high), p.n, p.verdict, p.folder] for p in series.points]
    table = tabulate(rows, headers=["commit", "sha", "value", f"{CI_LEVEL:.0%} CI", "n", "verdict", "folder"],
                     disable_numparse=True)
    return f"{series.key.label()} [{series.key.software_key}; {series.key.shape}]\n{table}"


def show_command(db: str | None, filters: Filters) -> str:
    found = load_series(open_store(db), filters)
    if not found:
        return "no series matches (ingest folders with `perfbench history ingest DIR...`)"
    if len(found) > 1 and not (filters.plan and filters.metric):
        rows = [[s.key.family, s.key.plan, s.key.metric, s.key.scenario, s.key.machine_key, len(s.points),
                 f"{s.points[-1].value:.3f}"] for s in found]
        return (tabulate(rows, headers=["family", "plan", "metric", "scenario", "machine", "points", "last"],
                         disable_numparse=True)
                + "\n(give --plan and --metric, and --family, to see one series point by point)")
    return "\n\n".join(series_table(s) for s in found)


def export_command(db: str | None, out: Path | None) -> str:
    data = json.dumps([s.model_dump(mode="json") for s in snapshots(open_store(db))], indent=1)
    if out is None:
        return data
    atomic_write_text(out, data + "\n")
    return f"export: {out}"


def changes_command(db: str | None, filters: Filters, since: str | None, min_magnitude: float, repo: Path,
                    as_json: bool) -> str:
    from perfbench.history.changes import series_changes

    found = load_series(open_store(db), filters)
    since_order = _since_order(found, since, repo) if since else None
    changes = [c for s in found for c in series_changes(s, min_magnitude, since_order)]
    if as_json:
        return json.dumps([c.model_dump(mode="json") for c in changes], indent=1)
    if not changes:
        return f"no change of {min_magnitude:.0%} or more in {len(found)} series"
    # at most 120 columns: the change on one line, where it was measured wrapped beneath it
    return "\n".join(textwrap.fill(c.line(), WIDTH, subsequent_indent="    ") + "\n"
                     + textwrap.fill(c.where(), WIDTH, initial_indent="    ", subsequent_indent="    ")
                     for c in changes)


def _since_order(found: list[Series], ref: str, repo: Path) -> int:
    """REF's first-parent position: a stored commit it prefixes, else REF resolved in `repo`."""
    from perfbench.history.git_order import first_parent_order, resolve_ref

    for s in found:
        for p in s.points:
            if p.sha and p.commit_order is not None and p.sha.startswith(ref):
                return p.commit_order
    sha = resolve_ref(repo, ref)
    order = first_parent_order(repo, sha) if sha else None
    if order is None:
        raise UserError(f"--since {ref}: not a stored commit, nor a commit of {repo}")
    return order


def page_command(db: str | None, filters: Filters, out: Path, min_magnitude: float, commit_url: str | None) -> str:
    from perfbench.history.page import write_page

    return f"page: {write_page(load_series(open_store(db), filters), out, min_magnitude, commit_url)}"
