"""One planned run of a sweep: its spec, its resolved plan and how the scenario asked for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfbench.results import RunSpec

if TYPE_CHECKING:
    from model.optimizations import Plan


@dataclass
class PlannedRun:
    spec: RunSpec
    plan: Plan
    label: str
    stands_for: list[str] = field(default_factory=list)  # labels of other requests with the same plan + shape
