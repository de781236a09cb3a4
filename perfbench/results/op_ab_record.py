"""The op-level part of ab.json (`ABRecord.ops`): which op groups moved between the arms of `perfbench ab --ops`.

Each op epoch profiled one iteration of every (run, arm) in one process (perfbench/run/ab_ops.py); `pairs` keeps
every epoch's µs per op group (perfbench/results/op_group.py names) of both arms, and the wall time of that
profiled iteration next to an unprofiled one of the same unit just before it (the profiler's overhead). The
verdicts (perfbench/analysis/op_ab.py) are per group and per branch, each family judged at its own family level.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfbench.results.verdicts import Verdict

Present = Literal["both", "only base", "only head"]
# "moved": the group changed and so did its branch; "shift": the group changed (or is on one side only) while its
# branch stayed "same": time moved between ops of one branch (a fusion), not a regression; "": no change called
Call = Literal["moved", "shift", ""]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpArm(_Part):
    """One arm's profiled iteration in one op epoch."""

    groups: dict[str, float]  # group label -> µs
    profiled_ms: float  # wall time of the profiled iteration
    plain_ms: float  # wall time of an unprofiled iteration of the same unit just before it


class OpPair(_Part):
    run_id: str
    epoch: int
    base_first: bool
    base: OpArm
    head: OpArm


class OpVerdict(_Part):
    """head / base of one group (`group` set) or one branch (`group` None) of one run, over the op epochs."""

    run_id: str
    branch: str
    group: str | None = None
    present: Present = "both"
    base_us: float  # mean per profiled iteration
    head_us: float
    ratio: float | None = None  # None: on one side only
    ci_low: float | None = None
    ci_high: float | None = None
    level: float | None = None
    epochs: int = 0
    verdict: Verdict
    regression: bool = False  # a "slower" that survives Holm in its family and is not a shift
    call: Call = ""
    detectable: float | None = None  # the smallest relative change this group's spread could have called


class OpABRecord(_Part):
    epochs: int = 0
    profiler_overhead: float | None = None  # median profiled / unprofiled wall time - 1, over every unit and epoch
    small_share: float = 0.0  # groups under this share of their run's op time are pooled per branch
    groups: list[OpVerdict] = Field(default_factory=list)  # one-sided first, then called ones, largest first
    branches: list[OpVerdict] = Field(default_factory=list)
    pairs: list[OpPair] = Field(default_factory=list)
    note: str = ""  # why there are no op epochs (two processes, a failure)

    def moved(self, run_id: str | None = None) -> list[OpVerdict]:
        """Groups and branches behind a change (of one run, or all): regressions first, then every other group or
        branch called moved; shifts are not among them."""
        rows = [r for r in [*self.branches, *self.groups] if run_id is None or r.run_id == run_id]
        return [r for r in rows if r.regression] + [r for r in rows if not r.regression and r.call == "moved"]

    def moved_text(self, run_id: str | None = None, limit: int = 4) -> str:
        """The moved groups and branches in a few words ("" when none): what gate and bisect print."""
        rows = self.moved(run_id)
        parts = [f"{r.group or r.branch + ' (branch)'} {_ratio_text(r)} {r.verdict}" for r in rows[:limit]]
        more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
        return "; ".join(parts) + more


def _ratio_text(row: OpVerdict) -> str:
    if row.ratio is None:
        return f"({row.present})"
    return f"{row.ratio:.3f}x [{row.ci_low or 0.0:.3f}, {row.ci_high or float('inf'):.3f}]"
