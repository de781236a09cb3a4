"""Points grouped into series. A series is one figure (a plan's speed-up, a run's median, an ab ratio) of one
scenario and shape, on one machine key, one software key, emulated or real: it never mixes them, so a step in it
is a change of the code, not of the machine.

A point's `commit_order` is its commit's place on the x axis: the first-parent position where every loaded commit
has one (a full clone placed them all); otherwise the rank of the commit in a merged order, where commits with a
position keep theirs and commits known only by their date (ingested from a shallow clone) sit after the last
positioned commit committed before them; commits of one committer date (a rebase writes a whole branch in one
second) go in the topological order of `--repo` where it holds them, else in the order their runs started. Where
`--repo` is a full clone, its first-parent positions place the commits it holds on read too, so `changes` and
`page` order a store ingested from shallow clones without a re-ingest. A commit with neither is a one-off
(None)."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from perfbench.analysis.stats import CI_LEVEL
from perfbench.history import git_order, schema
from perfbench.history.store import Store


class SeriesKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    family: str
    scenario: str
    machine_key: str
    software_key: str
    emulated: bool
    shape: str
    plan: str
    metric: str

    def label(self) -> str:
        what = {"speedup": "speed-up", "median": "median ms", "ab": "head/base", "once": ""}[self.family]
        metric = self.metric.replace("_ms", "").upper() if self.metric in ("ttft_ms", "tpot_ms") else self.metric
        emulated = " (emulated)" if self.emulated else ""
        return f"{self.plan} {metric} {what}".strip() + f" · {self.scenario} · {self.machine_key}{emulated}"


class SeriesPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    sha: str | None
    dirty: bool | None
    commit_order: int | None
    folder: str
    kind: str
    recorded_at: str
    value: float
    low: float | None
    high: float | None
    n: int
    verdict: str
    commit_date: str | None = None
    level: float = CI_LEVEL  # of [low, high]
    df: float | None = None  # of the t interval [low, high]; None: a normal or bootstrap interval


class Series(BaseModel):
    key: SeriesKey
    points: list[SeriesPoint]

    @property
    def ordered(self) -> list[SeriesPoint]:
        """The points on first-parent history, in commit order (one-offs left out)."""
        return sorted((p for p in self.points if p.commit_order is not None),
                      key=lambda p: (p.commit_order, p.recorded_at))


class Filters(BaseModel):
    model_config = ConfigDict(frozen=True)

    family: str | None = None
    scenario: str | None = None
    machine: str | None = None  # a substring of the machine key
    plan: str | None = None
    metric: str | None = None


def commit_positions(commits: Mapping[str, tuple[int | None, str | None]],
                     ties: Mapping[str, tuple[int, str]] | None = None) -> dict[str, int]:
    """sha -> place on the x axis, from sha -> (first-parent position, commit date); see the module's docstring.
    `ties`: sha -> (topological rank, first run's start) ordering the commits of one date (missing: after)."""
    placed = {sha: order for sha, (order, _date) in commits.items() if order is not None}
    dated = {sha: date for sha, (order, date) in commits.items() if order is None and date}
    if not dated:
        return placed
    ranked = sorted(placed, key=lambda sha: placed[sha])
    # the latest date seen along the positioned commits (dates need not rise: a rebase rewrites them)
    latest: list[str] = []
    for sha in ranked:
        latest.append(max(latest[-1] if latest else "", commits[sha][1] or ""))
    last = (2**62, "\U0010ffff")
    order_key: dict[str, tuple[int, int, str, tuple[int, str]]] = {
        sha: (i, 0, "", last) for i, sha in enumerate(ranked)}
    for sha, date in dated.items():
        order_key[sha] = (bisect.bisect_right(latest, date) - 1, 1, date, (ties or {}).get(sha, last))
    return {sha: rank for rank, sha in enumerate(sorted(order_key, key=lambda s: (order_key[s], s)), 1)}


def _placed(rows: Sequence[Any], repo: Path | None) -> dict[str, int]:
    """sha -> place on the x axis of every stored commit (module docstring)."""
    commits: dict[str, tuple[int | None, str | None]] = {}
    started: dict[str, str] = {}
    for row in rows:
        sha = row["sha"]
        if isinstance(sha, str) and sha:
            commits[sha] = (row["commit_order"], row["commit_date"])
            started[sha] = min(started.get(sha, "\U0010ffff"), str(row["recorded_at"] or ""))
    topo: dict[str, int] = {}
    if repo is not None and commits:
        mainline = git_order.mainline_positions(repo)
        commits = {sha: (mainline.get(sha, order), date) for sha, (order, date) in commits.items()}
        dates = Counter(date for order, date in commits.values() if order is None and date)
        shared = {date for date, count in dates.items() if count > 1}
        if shared:
            topo = git_order.topo_ranks(repo, [sha for sha, (order, date) in commits.items()
                                               if order is None and date in shared])
    ties = {sha: (topo.get(sha, 2**62), started.get(sha, "")) for sha in commits}
    return commit_positions(commits, ties)


def _columns() -> Sequence[object]:
    f, p = schema.folders.c, schema.points.c
    return (f.scenario, f.machine_key, f.software_key, f.emulated, f.sha, f.dirty, f.commit_order, f.commit_date,
            f.path, f.kind, f.recorded_at, p.family, p.shape, p.plan, p.metric, p.value, p.low, p.high, p.n,
            p.verdict, p.level, p.df)


def load_series(store: Store, filters: Filters, repo: Path | None = None) -> list[Series]:
    """The stored series matching `filters`; `repo` (a git repository, e.g. a full clone) places the commits it
    holds (module docstring)."""
    f, p = schema.folders.c, schema.points.c
    query = select(*_columns()).join(schema.points, p.folder_id == f.id)  # type: ignore[call-overload]
    for column, wanted in ((p.family, filters.family), (f.scenario, filters.scenario), (p.plan, filters.plan),
                           (p.metric, filters.metric)):
        if wanted is not None:
            query = query.where(column == wanted)
    if filters.machine is not None:
        query = query.where(f.machine_key.contains(filters.machine, autoescape=True))
    with store.reading() as conn:
        rows = conn.execute(query).mappings().all() if conn is not None else []
    positions = _placed(rows, repo)
    grouped: dict[SeriesKey, list[SeriesPoint]] = {}
    for row in rows:
        key = SeriesKey(**{name: row[name] for name in SeriesKey.model_fields})
        fields = {name: row[name] for name in SeriesPoint.model_fields if name not in ("folder", "commit_order")}
        grouped.setdefault(key, []).append(SeriesPoint(
            folder=row["path"], commit_order=positions.get(row["sha"]) if row["sha"] else None,
            **{**fields, "level": fields["level"] or CI_LEVEL}))
    return [Series(key=key, points=sorted(points, key=lambda pt: (pt.commit_order is None, pt.commit_order or 0,
                                                                   pt.recorded_at)))
            for key, points in sorted(grouped.items(), key=lambda item: item[0].model_dump_json())]
