"""Report section: MoE expert load per run, layer and phase (perfbench/analysis/expert_load.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfbench.analysis.attribution import combo_label
from perfbench.analysis.expert_load import layer_loads
from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.results import RunResult


def expert_load_section(results: Sequence[RunResult]) -> Section:
    section = Section("MoE expert load")
    recorded = [r for r in results if r.expert_load.counts]
    if not recorded:
        section.blocks.append(Text("No run recorded per-expert routing counts.", note=True))
        return section
    section.blocks.append(Text(
        "Routing assignments (token x top-k) per expert in each MoE layer, from one untimed iteration of each "
        "run. Imbalance = max / mean per expert: the hottest expert, and under expert parallelism the rank "
        "holding it, does that many times the mean work. Prefill counts include the padding positions of a "
        "ragged batch.", note=True))
    rows: list[dict[str, Any]] = []
    for r in recorded:
        for load in layer_loads(r.expert_load):
            rows.append({
                "run_id": r.run_id, "toggles_on": combo_label(r.effective_on()), "phase": load.phase,
                "layer": load.layer, "assignments": load.assignments, "max_per_expert": load.max_per_expert,
                "mean_per_expert": load.mean_per_expert, "imbalance": load.imbalance,
                "hottest_expert": load.hottest_expert,
                "ep_rank_totals": " / ".join(map(str, load.rank_totals)) if len(load.rank_totals) > 1 else "",
                "ep_rank_imbalance": load.rank_imbalance})
    columns = [Column(key) for key in ("run_id", "toggles_on", "phase", "layer", "assignments", "max_per_expert",
                                       "mean_per_expert", "imbalance", "hottest_expert", "ep_rank_totals",
                                       "ep_rank_imbalance")]
    section.blocks.append(Table("expert_load", columns, rows, caption="Per-expert load per MoE layer",
                                collapsed=len(rows) > 40))
    missing = sorted({f"{phase}: {why}" for r in recorded
                      for phase, why in r.expert_load.not_recorded.items()})
    for line in missing:
        section.blocks.append(Text(f"Not recorded in some runs - {line}.", note=True))
    return section
