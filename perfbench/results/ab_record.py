"""ab.json (perfbench/run/ab.py `ab_record`) as its readers see it: only the fields they read, typed; fields a
later perfbench adds are ignored, so an older reader still reads a newer job's verdicts."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ABArm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    ref: str | None = None
    sha: str | None = None
    dirty: bool | None = None


class ABVerdict(BaseModel):
    """One run and metric: head / base with its CI, from the job's pairs; verdict slower / faster / same /
    inconclusive (perfbench/analysis/paired.py)."""

    model_config = ConfigDict(extra="ignore")

    ratio: float
    ci_low: float
    ci_high: float
    pairs: int = 0
    verdict: str


class ABRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: str = "perfbench ab"
    scenario: str = ""
    emulation: str | None = None
    base: ABArm = Field(default_factory=ABArm)
    head: ABArm = Field(default_factory=ABArm)
    exit_code: int | None = None
    stopped: str = ""
    verdicts: dict[str, dict[str, ABVerdict]]
