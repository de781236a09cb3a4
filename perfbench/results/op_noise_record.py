"""The op-level part of a noise file (`NoiseRecord.ops`): what `perfbench calibrate --ops` recorded and found.

Each A/A op epoch keeps every op group's and branch's log ratio head / base (keys "<run_id>/<group label>" and
"<run_id>/<branch>"), with the epoch's wall time; `shares` is each group's share of its branch's time, which a
simulated shift in that group alone moves its branch by. The simulation's findings (perfbench/analysis/
op_calibration.py): the family's false rate, and per group the share of jobs that named a shift injected into it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpNoiseEpoch(_Part):
    seconds: float = Field(gt=0)
    groups: dict[str, float]  # "<run_id>/<group label>" -> log ratio head / base
    branches: dict[str, float]  # "<run_id>/<branch>" -> log ratio head / base


class OpDetection(_Part):
    """A shift injected into one group alone: the share of simulated jobs that named it (slower, moved or shift),
    and the share that named any other group or branch but its own branch."""

    group: str
    share_of_branch: float
    detected: float
    others_named: float


class OpNoise(_Part):
    epochs: list[OpNoiseEpoch]
    shares: dict[str, float] = Field(default_factory=dict)  # "<run_id>/<group label>" -> share of its branch
    jobs: int = 0
    epochs_per_job: int = 0
    shift: float = 0.10
    false_rate: float | None = None  # A/A jobs that named any group or branch
    detection: list[OpDetection] = Field(default_factory=list)
