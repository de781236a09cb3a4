"""Points grouped into series. A series is one figure (a plan's speed-up, a run's median, an ab ratio) of one
scenario and shape, on one machine key, one software key, emulated or real: it never mixes them, so a step in it
is a change of the code, not of the machine."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from perfbench.history import schema
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


def load_series(store: Store, filters: Filters) -> list[Series]:
    f, p = schema.folders.c, schema.points.c
    query = (select(f.scenario, f.machine_key, f.software_key, f.emulated, f.sha, f.dirty, f.commit_order,
                    f.identity, f.kind, f.recorded_at, p.family, p.shape, p.plan, p.metric, p.value, p.low, p.high,
                    p.n, p.verdict)
             .join(schema.points, p.folder_id == f.id))
    for column, wanted in ((p.family, filters.family), (f.scenario, filters.scenario), (p.plan, filters.plan),
                           (p.metric, filters.metric)):
        if wanted is not None:
            query = query.where(column == wanted)
    if filters.machine is not None:
        query = query.where(f.machine_key.contains(filters.machine, autoescape=True))
    with store.reading() as conn:
        rows = conn.execute(query).mappings().all()
    grouped: dict[SeriesKey, list[SeriesPoint]] = {}
    for row in rows:
        key = SeriesKey(**{name: row[name] for name in SeriesKey.model_fields})
        grouped.setdefault(key, []).append(SeriesPoint(folder=row["identity"], **{
            name: row[name] for name in SeriesPoint.model_fields if name != "folder"}))
    return [Series(key=key, points=sorted(points, key=lambda pt: (pt.commit_order is None, pt.commit_order or 0,
                                                                   pt.recorded_at)))
            for key, points in sorted(grouped.items(), key=lambda item: item[0].model_dump_json())]
