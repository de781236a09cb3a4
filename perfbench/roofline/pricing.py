"""Roofline time of counted work (model/cost.py) on a device's peaks: per op, per (phase, category), per
phase.

An op takes max(compute, memory) at peak, plus its collective at link bandwidth (the model issues collectives
synchronously after the op that feeds them); an op whose collective is fused into its matmul
(mm_all_reduce) takes max(compute, memory, communication). Host time (launches) is outside the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
class CollectiveRow:
    """One collective kind in one step of a phase: payload and wire bytes, calls, time at link bandwidth."""

    collective: str
    calls: float
    payload_bytes: float
    wire_bytes: float
    seconds: float


@dataclass(frozen=True)
class PhaseEstimate:
    phase: str
    roofline_s: float  # one step of the phase
    compute_s: float
    memory_s: float
    comm_s: float
    launches: float
    categories: list[CategoryRow]
    collectives: list[CollectiveRow] = field(default_factory=list)
    layer_types: dict[str, float] = field(default_factory=dict)  # layer type ("" outside layers) -> roofline s


def collective_rows(priced: list[PricedOp], link_Bps: float | None) -> list[CollectiveRow]:
    totals: dict[str, list[float]] = {}
    for p in priced:
        for kind, payload in p.op.comm.items():
            row = totals.setdefault(kind, [0.0, 0.0, 0.0])
            row[0] += p.op.launches
            row[1] += payload
            row[2] += p.op.wire.get(kind, 0.0)
    return [CollectiveRow(kind, calls, payload, wire, wire / link_Bps if link_Bps else 0.0)
            for kind, (calls, payload, wire) in sorted(totals.items())]


def estimate_phase(phase: PhaseCost, peaks: DevicePeaks, dtype: str) -> PhaseEstimate:
    priced = price_phase(phase, peaks, dtype)
    layer_types: dict[str, float] = {}
    for p in priced:
        layer_types[p.op.layer_type] = layer_types.get(p.op.layer_type, 0.0) + p.roofline_s
    return PhaseEstimate(
        phase.phase, sum(p.roofline_s for p in priced), sum(p.compute_s for p in priced),
        sum(p.memory_s for p in priced), sum(p.comm_s for p in priced), sum(p.op.launches for p in priced),
        category_rows(priced), collective_rows(priced, peaks.link_Bps), layer_types)


def estimate_model(cost: ModelCost, peaks: DevicePeaks, dtype: str) -> tuple[PhaseEstimate, PhaseEstimate]:
    """(prefill = TTFT floor, decode = TPOT floor) on the device."""
    return estimate_phase(cost.prefill, peaks, dtype), estimate_phase(cost.decode, peaks, dtype)
