"""Views on a run's MoE expert load record (analysis/expert_load.py writes it): per layer and phase."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfbench.results.records import ExpertLoad


@dataclass(frozen=True)
class LayerLoad:
    """One MoE layer in one phase. `imbalance` = max / mean assignments per expert (1.0: perfectly even; the
    slowest expert, and under EP the slowest rank, does `imbalance` times the mean work)."""

    phase: str
    layer: int
    assignments: int  # tokens x top_k
    max_per_expert: int
    mean_per_expert: float
    hottest_expert: int
    rank_totals: tuple[int, ...]  # assignments to each EP rank's experts

    @property
    def imbalance(self) -> float | None:
        return self.max_per_expert / self.mean_per_expert if self.mean_per_expert else None

    @property
    def rank_imbalance(self) -> float | None:
        """Max / mean assignments per EP rank (None with one rank)."""
        if len(self.rank_totals) < 2 or not self.assignments:
            return None
        return max(self.rank_totals) / (self.assignments / len(self.rank_totals))


def layer_loads(record: ExpertLoad | Mapping[str, Any]) -> list[LayerLoad]:
    """Every (phase, layer) of a record, in recorded order; [] for an empty record (not recorded)."""
    raw = record.to_dict() if isinstance(record, ExpertLoad) else record
    blocks = raw.get("experts_by_rank") or []
    out = []
    for entry in raw.get("counts") or []:
        hits = [int(c) for c in entry["experts"]]
        total = sum(hits)
        peak = max(hits) if hits else 0
        out.append(LayerLoad(
            phase=entry["phase"], layer=int(entry["layer"]), assignments=total, max_per_expert=peak,
            mean_per_expert=total / len(hits) if hits else 0.0, hottest_expert=hits.index(peak) if hits else -1,
            rank_totals=tuple(sum(hits[first:stop]) for first, stop in blocks)))
    return out


def worst_imbalance(record: ExpertLoad | Mapping[str, Any], phase: str) -> float | None:
    """The largest per-layer imbalance (max / mean per expert) of `phase`; None when not recorded."""
    values = [load.imbalance for load in layer_loads(record) if load.phase == phase and load.imbalance is not None]
    return max(values) if values else None
