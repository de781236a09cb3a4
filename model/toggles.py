"""Toggle names and the record of a decision, without torch: what offline analysis (results, gate, report)
needs to know about toggles. The registry itself (what each toggle replaces, its requirements) is
`model.optimizations.TOGGLES`, keyed by exactly these names in this order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["on", "off", "inactive"]

TOGGLE_NAMES: tuple[str, ...] = (
    "fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "mm_all_reduce", "moe_dispatch_combine",
    "graph_mode", "merged_projections", "grouped_moe",
)


@dataclass(frozen=True)
class ToggleDecision:
    name: str
    requested: bool
    state: State
    reason: str
    impl: str

    @property
    def on(self) -> bool:
        return self.state == "on"
