"""What each `perfbench history` subcommand does and prints (the CLI only parses options)."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

from tabulate import tabulate

from perfbench.analysis.stats import CI_LEVEL
from perfbench.errors import UserError
from perfbench.history import git_order, location
from perfbench.history.extract import content_hash, snapshot
from perfbench.history.series import Filters, Series, load_series
from perfbench.history.store import forget, ingest, migrate_store, open_store, snapshots, stored_paths
from perfbench.results import atomic_write_text

WIDTH = 120  # terminal columns


def store_line(db: str | None) -> str:
    return f"history store: {location.shown(location.resolve(db))}"


def ingest_command(folders: list[Path], db: str | None, repo: Path) -> str:
    """Every new folder read and checked before anything is written; then all stored in one transaction. A folder
    whose content is stored already costs its hash only."""
    for folder in folders:
        if not folder.is_dir():
            raise UserError(f"{folder}: not a folder (give result, ab or baseline folders)")
    store = open_store(db)
    migrate_store(store)  # a write migrates first (the look-up below is a read, which never does)
    hashes = {folder: content_hash(folder) for folder in folders}
    known = stored_paths(store, hashes.values())
    lines: list[str | None] = []  # None: the next fresh folder's line from the store
    fresh = []
    for folder, digest in hashes.items():
        path = str(folder.resolve())
        if digest in known:
            where = known[digest]
            lines.append(f"unchanged {path}" + (f" (stored as {where})" if where != path else ""))
        else:
            known[digest] = path  # a second copy in the same call is unchanged too
            fresh.append(snapshot(folder, repo))
            lines.append(None)
    stored = iter(ingest(store, fresh, git_order.mainline_positions(repo)))
    out = [line if line is not None else next(stored) for line in lines] + list(stored)
    if git_order.is_shallow(repo):
        out.append(f"note: {repo} is a shallow clone: commits are ordered by commit date; an ingest with --repo "
                   "a full clone (git fetch --unshallow) places them on first-parent history")
    return "\n".join(out)


def forget_command(targets: list[str], db: str | None) -> str:
    """Each target is a folder (its content, else the path it was stored from) or a commit sha (prefix)."""
    store = open_store(db)
    lines = []
    for target in targets:
        folder = Path(target)
        if folder.is_dir():
            lines += forget(store, content_hash(folder), str(folder.resolve()), None)
        elif folder.is_absolute() or "/" in target:  # a folder since deleted: the path it was stored from
            lines += forget(store, None, str(folder.resolve()), None)
        else:
            lines += forget(store, None, None, target)
    return "\n".join(lines)


def migrate_command(db: str | None) -> str:
    return migrate_store(open_store(db))


def check_min_magnitude(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise UserError(f"--min-magnitude {value}: give a finite fraction, 0 or more (0.05 is 5%)")
    return value


def check_commit_url(template: str | None) -> str | None:
    """A commit link template must be an http(s) URL: any other scheme (javascript:, data:, file:) would make
    every sha on the page a link to run or open something else."""
    if template is None:
        return None
    parts = urlsplit(template.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise UserError(f"--commit-url {template[:80]!r}: give an http:// or https:// URL, e.g. "
                        "https://github.com/ORG/REPO/commit/{sha}")
    return template


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

    check_min_magnitude(min_magnitude)
    if since is not None and not since.strip():
        raise UserError("--since is empty: give a stored sha prefix or a git ref")
    found = load_series(open_store(db), filters, repo)  # a full clone places the commits it holds
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
    """REF's place on the commit axis: a stored commit it prefixes, else REF resolved in `repo`: a stored commit,
    else its position on first-parent history, else (a shallow clone) the first stored commit committed since."""
    placed = {p.sha: p.commit_order for s in found for p in s.points if p.sha and p.commit_order is not None}
    for stored, order in placed.items():
        if stored.startswith(ref):
            return order
    resolved = git_order.resolve_ref(repo, ref)
    if resolved in placed:
        return placed[resolved]
    position = git_order.first_parent_order(repo, resolved) if resolved else None
    date = git_order.commit_date(repo, resolved) if resolved and position is None else None
    if date is not None:  # a shallow clone: the first stored commit committed at or after REF
        later = [p.commit_order for s in found for p in s.points
                 if p.commit_order is not None and p.commit_date and p.commit_date >= date]
        position = min(later, default=None)
    if position is None:
        raise UserError(f"--since {ref}: not a stored commit, nor a commit of {repo}")
    return position


def page_command(db: str | None, filters: Filters, out: Path, min_magnitude: float, commit_url: str | None,
                 since: str | None = None, repo: Path | None = None) -> str:
    from perfbench.history.page import write_page

    check_min_magnitude(min_magnitude)
    check_commit_url(commit_url)
    found = load_series(open_store(db), filters, repo)
    since_order = _since_order(found, since, repo or Path.cwd()) if since else None
    return f"page: {write_page(found, out, min_magnitude, commit_url, since_order, since)}"
