"""Short toggle names for tables and plan labels ("rope+attn+gdr"): torch-free, read by config and analysis."""

from __future__ import annotations

from collections.abc import Iterable

TOGGLE_ABBREV: dict[str, str] = {
    "fused_rope": "rope", "fused_attention": "attn", "fused_rmsnorm": "norm", "chunk_gdr": "gdr",
    "mm_all_reduce": "mmar", "moe_dispatch_combine": "disp", "graph_mode": "graph",
    "merged_projections": "merged", "grouped_moe": "gmm",
}


def short_plan_label(toggles_on: Iterable[str]) -> str:
    """A plan by its toggles, abbreviated and sorted: "all off", or "gdr+gmm" (the end table's plan names)."""
    return "+".join(sorted(TOGGLE_ABBREV.get(t, t) for t in toggles_on)) or "all off"


def legend(labels: Iterable[str]) -> str:
    """"legend: rope fused_rope, gdr chunk_gdr" for the short names that occur in `labels` ("" when none)."""
    used = {part for label in labels for part in label.split("+")}
    names = [f"{short} {name}" for name, short in TOGGLE_ABBREV.items() if short in used]
    return f"legend: {', '.join(names)}" if names else ""
