"""Short toggle names for tables and plan labels ("rope+attn+gdr"): torch-free, read by config and analysis."""

from __future__ import annotations

TOGGLE_ABBREV: dict[str, str] = {
    "fused_rope": "rope", "fused_attention": "attn", "fused_rmsnorm": "norm", "chunk_gdr": "gdr",
    "mm_all_reduce": "mmar", "moe_dispatch_combine": "disp", "graph_mode": "graph",
    "merged_projections": "merged", "grouped_moe": "gmm",
}
