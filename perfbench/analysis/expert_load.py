"""MoE load balance of a run: the per-expert routing counts a run records (RunResult.expert_load) and their
summary per layer and phase (max / mean assignments per expert, the hottest expert, per EP rank totals).

The record (written by perfbench/measure/run_steps.py from model.expert_counts):

    {"counted": "<which iteration>", "num_experts": E, "top_k": K, "ep_size": n,
     "experts_by_rank": [[first, stop], ...],          # the experts each EP rank holds, [first, stop)
     "counts": [{"phase": "prefill", "layer": 0, "experts": [c_0, ..., c_E-1]}, ...],
     "not_recorded": {"decode": "<why>"}}              # phases without counts, with the reason

Torch-free: the analysis commands read it on machines without torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfbench.analysis.run_record import result_record_near
from perfbench.results import ExpertLoad, LayerLoad, layer_loads, worst_imbalance  # noqa: F401 - the record's views


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


def load_lines(record: ExpertLoad | Mapping[str, Any]) -> list[str]:
    """Plain-text summary, one line per (phase, layer), for `perfbench trace` and logs (a raw part is validated
    first)."""
    record = record if isinstance(record, ExpertLoad) else ExpertLoad.model_validate(record)
    loads = layer_loads(record)
    if not loads:
        return []
    lines = [f"MoE expert load ({record.counted or ''}; {record.num_experts} experts, "
             f"top-{record.top_k}, EP size {record.ep_size})"]
    for load in loads:
        ranks = ""
        if len(load.rank_totals) > 1:
            ranks = f"; per EP rank {', '.join(map(str, load.rank_totals))}"
        imbalance = f"{load.imbalance:.2f}" if load.imbalance is not None else "-"
        lines.append(f"  {load.phase:<7} layer {load.layer:>3}: {load.assignments} assignments, max/mean per expert "
                     f"{load.max_per_expert}/{load.mean_per_expert:.1f} = {imbalance}, hottest expert "
                     f"{load.hottest_expert}{ranks}")
    for phase, why in record.not_recorded.items():
        lines.append(f"  {phase}: not recorded ({why})")
    return lines


def load_record_near(trace_path: Path, levels: int = 4) -> ExpertLoad:
    """The expert load of the run whose trace `trace_path` is (runs/<id>/trace[/rank<r>[/<profiler folder>]]):
    `expert_load` of the nearest result.json above it, empty when there is none or it holds none."""
    load = result_record_near(trace_path, levels).get("expert_load")  # raw JSON, validated here
    return ExpertLoad.model_validate(load) if isinstance(load, dict) else ExpertLoad()
