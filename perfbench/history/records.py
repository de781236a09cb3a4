"""The typed rows one folder becomes in the store, and ab.json as this package reads it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfbench.analysis.stats import CI_LEVEL

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
    level: float = CI_LEVEL  # the confidence level of [low, high]
    # the degrees of freedom of the t interval [low, high] is (clusters or rounds less what the rule spends);
    # None: a bootstrap or normal interval (its standard error is read with the normal quantile)
    df: float | None = None


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
    """A folder as stored: what it measured (`content_hash`), which run it was (`run_key`), where it lay when it
    was ingested (`path`, for links only: CI writes every pipeline's folder to the same path), and what it ran on."""

    path: str
    run_key: str  # the run's own identity: kind, commit, scenario, machine, software, emulation and start time
    content_hash: str
    kind: FolderKind
    sha: str | None = None
    dirty: bool | None = None
    commit_order: int | None = None  # first-parent position from a full history; None where unknown (shallow)
    commit_date: str | None = None  # the committer date (ISO 8601, UTC): orders commits whose position is unknown
    base_sha: str | None = None
    scenario: str
    machine_key: str
    software_key: str
    emulated: bool
    recorded_at: str
    points: list[Point] = Field(default_factory=list)
    op_families: list[OpFamily] = Field(default_factory=list)
