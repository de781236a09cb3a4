"""Per-expert routing counts of the MoE layers: how many (token, top-k) assignments each expert received, per
layer and phase. Under expert parallelism this load balance decides how long the slowest rank's experts run.

Off by default: every MoE layer call hands its top-k ids to `record`, which returns at once (one attribute
test). A harness turns recording on around the iterations it wants counted (`recording()`) and reads `totals()`.
Inside a compiled graph nothing is recorded: dynamo evaluates `is_compiling()` first, so it traces no recording
and puts no guard on `enabled` (switching recording on never recompiles a graph); a compiled decode step
therefore leaves no decode counts.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from model.recorder import Recorder

PHASES = ("prefill", "decode")


class ExpertCounts(Recorder):
    """Shared by the MoE layers of one model; `num_experts` is E, global (ids are global under EP too)."""

    def __init__(self, num_experts: int) -> None:
        self.num_experts = num_experts
        self.enabled = False
        self._counts: dict[tuple[str, int], torch.Tensor] = {}
        # the EP group of each layer: its ranks route disjoint token blocks, so their counts add up
        self._groups: dict[int, dist.ProcessGroup | None] = {}

    def record(self, layer: int, prefill: bool, topk_ids: torch.Tensor,
               group: dist.ProcessGroup | None = None) -> None:
        """Add the assignments of `topk_ids` [N, K] (this rank's tokens) to layer `layer`'s counts."""
        if torch.compiler.is_compiling() or not self.enabled:
            return
        hits = torch.bincount(topk_ids.reshape(-1), minlength=self.num_experts)
        key = ("prefill" if prefill else "decode", layer)
        self._counts[key] = self._counts[key] + hits if key in self._counts else hits
        self._groups[layer] = group

    def clear(self) -> None:
        self._counts.clear()
        self._groups.clear()

    def totals(self) -> dict[str, dict[int, list[int]]]:
        """{phase: {layer: [assignments of expert 0 .. E-1]}} over every token of the step, for the phases that
        were recorded. Under EP the counts are summed over the layer's EP group: a collective, so every rank of
        the group calls it."""
        out: dict[str, dict[int, list[int]]] = {}
        for (phase, layer), hits in sorted(self._counts.items(), key=lambda item: (PHASES.index(item[0][0]),
                                                                                    item[0][1])):
            group = self._groups.get(layer)
            if group is not None:
                hits = hits.clone()
                dist.all_reduce(hits, group=group)
            out.setdefault(phase, {})[layer] = [int(c) for c in hits.cpu().tolist()]
        return out
