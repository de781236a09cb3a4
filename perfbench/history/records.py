"""The typed rows one folder becomes in the store, and ab.json as this package reads it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FolderKind = Literal["results", "ab", "baseline"]
# median: a run's median latency; speedup: a plan's paired speed-up over the baseline of its sweep; ab: head/base
# of an ab job; once: a figure measured once per run (compile_s, first_ttft_ms), no CI
Family = Literal["median", "speedup", "ab", "once"]


class Point(BaseModel):
    """One measured figure of a folder, with its CI where it has one."""

    model_config = ConfigDict(frozen=True)

    family: Family
    run_id: str
    plan: str
    shape: str
    metric: str
    value: float
    low: float | None = None
    high: float | None = None
    n: int = 0  # samples, pairs or rounds behind the figure
    verdict: str = ""
    basis: str = ""


class OpFamily(BaseModel):
    """One of a run's op families (trace categories) by total time."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    plan: str
    side: str
    family: str
    total_us: float
    rank: int


class Snapshot(BaseModel):
    """A folder as stored: where and what it ran on, and what it measured."""

    identity: str
    content_hash: str
    kind: FolderKind
    sha: str | None = None
    dirty: bool | None = None
    commit_order: int | None = None
    base_sha: str | None = None
    scenario: str
    machine_key: str
    software_key: str
    emulated: bool
    recorded_at: str
    points: list[Point] = Field(default_factory=list)
    op_families: list[OpFamily] = Field(default_factory=list)
