"""MoE load balance of a run: the per-expert routing counts a run records (RunResult.expert_load) and their
summary per layer and phase (max / mean assignments per expert, the hottest expert, per EP rank totals).

The record (written by perfbench/run/measure.py from model.expert_counts):

    {"counted": "<which iteration>", "num_experts": E, "top_k": K, "ep_size": n,
     "experts_by_rank": [[first, stop], ...],          # the experts each EP rank holds, [first, stop)
     "counts": [{"phase": "prefill", "layer": 0, "experts": [c_0, ..., c_E-1]}, ...],
     "not_recorded": {"decode": "<why>"}}              # phases without counts, with the reason

Torch-free: the analysis commands read it on machines without torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def experts_by_rank(num_experts: int, ep_size: int) -> list[list[int]]:
    """[first, stop) of each EP rank: contiguous blocks of E / ep experts (model.parallel.LocalSizes)."""
    per_rank = num_experts // ep_size
    return [[rank * per_rank, (rank + 1) * per_rank] for rank in range(ep_size)]


def load_record(totals: Mapping[str, Mapping[int, Sequence[int]]], *, num_experts: int, top_k: int, ep_size: int,
                counted: str, not_recorded: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The result record of `totals` ({phase: {layer: per-expert counts}}, model.expert_counts.totals())."""
    return {
        "counted": counted, "num_experts": num_experts, "top_k": top_k, "ep_size": ep_size,
        "experts_by_rank": experts_by_rank(num_experts, ep_size),
        "counts": [{"phase": phase, "layer": int(layer), "experts": [int(c) for c in hits]}
                   for phase, by_layer in totals.items() for layer, hits in sorted(by_layer.items())],
        "not_recorded": dict(not_recorded or {}),
    }


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


def layer_loads(record: Mapping[str, Any]) -> list[LayerLoad]:
    """Every (phase, layer) of a record, in recorded order; [] for an empty record (not recorded)."""
    blocks = record.get("experts_by_rank") or []
    out = []
    for entry in record.get("counts") or []:
        hits = [int(c) for c in entry["experts"]]
        total = sum(hits)
        peak = max(hits) if hits else 0
        out.append(LayerLoad(
            phase=entry["phase"], layer=int(entry["layer"]), assignments=total, max_per_expert=peak,
            mean_per_expert=total / len(hits) if hits else 0.0, hottest_expert=hits.index(peak) if hits else -1,
            rank_totals=tuple(sum(hits[first:stop]) for first, stop in blocks)))
    return out


def worst_imbalance(record: Mapping[str, Any], phase: str) -> float | None:
    """The largest per-layer imbalance (max / mean per expert) of `phase`; None when not recorded."""
    values = [load.imbalance for load in layer_loads(record) if load.phase == phase and load.imbalance is not None]
    return max(values) if values else None


def load_lines(record: Mapping[str, Any]) -> list[str]:
    """Plain-text summary, one line per (phase, layer), for `perfbench trace` and logs."""
    loads = layer_loads(record)
    if not loads:
        return []
    lines = [f"MoE expert load ({record.get('counted', '')}; {record.get('num_experts')} experts, "
             f"top-{record.get('top_k')}, EP size {record.get('ep_size')})"]
    for load in loads:
        ranks = ""
        if len(load.rank_totals) > 1:
            ranks = f"; per EP rank {', '.join(map(str, load.rank_totals))}"
        imbalance = f"{load.imbalance:.2f}" if load.imbalance is not None else "-"
        lines.append(f"  {load.phase:<7} layer {load.layer:>3}: {load.assignments} assignments, max/mean per expert "
                     f"{load.max_per_expert}/{load.mean_per_expert:.1f} = {imbalance}, hottest expert "
                     f"{load.hottest_expert}{ranks}")
    for phase, why in (record.get("not_recorded") or {}).items():
        lines.append(f"  {phase}: not recorded ({why})")
    return lines


def load_record_near(trace_path: Path, levels: int = 4) -> dict[str, Any]:
    """The expert load of the run whose trace `trace_path` is (runs/<id>/trace[/rank<r>[/<profiler folder>]]):
    `expert_load` of the nearest result.json above it, {} when there is none or it holds none."""
    for folder in [trace_path, *trace_path.resolve().parents][:levels + 1]:
        result = folder / "result.json"
        if result.is_file():
            try:
                raw = json.loads(result.read_text())
            except (OSError, ValueError):
                return {}
            load = raw.get("expert_load") if isinstance(raw, dict) else None
            return load if isinstance(load, dict) else {}
    return {}
