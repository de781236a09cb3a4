"""Roofline time of counted work (model/cost.py) on a device's peaks: per op, per (phase, category), per
phase.

An op takes max(compute, memory) at peak, plus its collective at link bandwidth (the model issues collectives
synchronously after the op that feeds them); an op whose collective is fused into its matmul
(mm_all_reduce) takes max(compute, memory, communication). Host time (launches) is outside the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.cost import ModelCost, OpCost, PhaseCost
from perfbench.roofline.peaks import DevicePeaks


@dataclass(frozen=True)
class PricedOp:
    op: OpCost
    compute_s: float
    memory_s: float
    comm_s: float

    @property
    def roofline_s(self) -> float:
        if self.op.overlap:
            return max(self.compute_s, self.memory_s, self.comm_s)
        return max(self.compute_s, self.memory_s) + self.comm_s

    @property
    def bound(self) -> str:
        parts = {"compute": self.compute_s, "memory": self.memory_s, "communication": self.comm_s}
        return max(parts, key=parts.__getitem__) if any(parts.values()) else "-"


def price_op(op: OpCost, peaks: DevicePeaks, dtype: str) -> PricedOp:
    compute = op.flops / peaks.flops_for(dtype) if op.flops else 0.0
    memory = op.bytes / peaks.require_memory() if op.bytes else 0.0
    comm = 0.0
    if op.wire_bytes:
        if peaks.link_Bps is None:
            from perfbench.errors import UserError

            raise UserError(f"device {peaks.name} has no sourced interconnect bandwidth and this layout "
                            f"communicates; give one with --peak interconnect_GBps=VALUE")
        comm = op.wire_bytes / peaks.link_Bps
    return PricedOp(op, compute, memory, comm)


@dataclass(frozen=True)
class CategoryRow:
    """Totals of one (phase, category) for one step of the phase."""

    phase: str
    category: str
    flops: float
    bytes: float
    wire_bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    roofline_s: float
    launches: float


def price_phase(phase: PhaseCost, peaks: DevicePeaks, dtype: str) -> list[PricedOp]:
    return [price_op(op, peaks, dtype) for op in phase.ops]


def category_rows(priced: list[PricedOp]) -> list[CategoryRow]:
    groups: dict[tuple[str, str], list[PricedOp]] = {}
    for p in priced:
        groups.setdefault((p.op.phase, p.op.category), []).append(p)
    rows = []
    for (phase, category), items in groups.items():
        rows.append(CategoryRow(
            phase, category, sum(p.op.flops for p in items), sum(p.op.bytes for p in items),
            sum(p.op.wire_bytes for p in items), sum(p.compute_s for p in items),
            sum(p.memory_s for p in items), sum(p.comm_s for p in items), sum(p.roofline_s for p in items),
            sum(p.op.launches for p in items)))
    return sorted(rows, key=lambda r: (r.phase != "prefill", -r.roofline_s))


@dataclass(frozen=True)
class PhaseEstimate:
    phase: str
    roofline_s: float  # one step of the phase
    compute_s: float
    memory_s: float
    comm_s: float
    launches: float
    categories: list[CategoryRow]


def estimate_phase(phase: PhaseCost, peaks: DevicePeaks, dtype: str) -> PhaseEstimate:
    priced = price_phase(phase, peaks, dtype)
    return PhaseEstimate(
        phase.phase, sum(p.roofline_s for p in priced), sum(p.compute_s for p in priced),
        sum(p.memory_s for p in priced), sum(p.comm_s for p in priced), sum(p.op.launches for p in priced),
        category_rows(priced))


def estimate_model(cost: ModelCost, peaks: DevicePeaks, dtype: str) -> tuple[PhaseEstimate, PhaseEstimate]:
    """(prefill = TTFT floor, decode = TPOT floor) on the device."""
    return estimate_phase(cost.prefill, peaks, dtype), estimate_phase(cost.decode, peaks, dtype)
