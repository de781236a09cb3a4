"""Which experts each token chose, and by how much: the routing of one iteration, for numerics checks.

A harness records the all-off reference's routing to replay it in a measured run (model/replay.py), and
records a run's own routing to report, as information, how many of its choices differ from the reference's and at
what margins (a near tie that rounding flips is common in bf16 with hundreds of experts).

Each call keeps the route op's own top-k ids [N, K] in the op's order (what a replay forces) and each token's
margin [N]: its smallest chosen router probability minus its largest unchosen one (negative when the op chose an
expert a plain top-k would not). Under expert parallelism each rank routes a block of the tokens; the blocks are
gathered, so every rank's log holds every token.

Off by default: each MoE call hands its router logits to `record`, which returns at once (one attribute test).
Nothing is recorded inside a compiled graph (as for model/expert_counts.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from model.recorder import Recorder


@dataclass(frozen=True)
class RoutedCall:
    """One MoE layer call: its phase, layer, the top-k expert ids [N, K] (the op's order) and each token's margin
    [N]."""

    prefill: bool
    layer: int
    ids: torch.Tensor
    margin: torch.Tensor

    def chosen_sets(self) -> torch.Tensor:
        """The ids sorted per token: two calls chose the same experts where these rows are equal."""
        return self.ids.sort(dim=-1).values


def choice_margin(router_logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Per token, the smallest chosen probability minus the largest unchosen one ([N]; inf when every expert is
    chosen)."""
    probs = torch.softmax(router_logits.detach().float(), dim=-1)
    if ids.shape[-1] >= probs.shape[-1]:
        return torch.full_like(probs[:, 0], float("inf"))
    chosen = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, ids, True)
    lowest_chosen = probs.masked_fill(~chosen, float("inf")).amin(dim=-1)
    highest_other = probs.masked_fill(chosen, float("-inf")).amax(dim=-1)
    return lowest_chosen - highest_other


# (rows [n, C]) -> every rank's rows [N, C]: the EP block gather, bound by the layer that routes a block
Gather = Callable[[torch.Tensor], torch.Tensor]


class RoutingLog(Recorder):
    """Shared by the MoE layers of one model; calls are kept in the order they ran."""

    def __init__(self) -> None:
        self.enabled = False
        self.calls: list[RoutedCall] = []

    def record(self, layer: int, prefill: bool, router_logits: torch.Tensor, ids: torch.Tensor,
               gather: Gather | None = None) -> None:
        """`ids`: what the route op chose for these tokens; `gather`: under expert parallelism, the collective that
        joins every rank's block (every rank records the same calls, so every rank calls it)."""
        if torch.compiler.is_compiling() or not self.enabled:
            return
        ids = ids.detach().long()
        margin = choice_margin(router_logits, ids)
        if gather is not None:
            ids = gather(ids)
            margin = gather(margin[:, None])[:, 0]
        self.calls.append(RoutedCall(prefill, layer, ids.cpu(), margin.cpu()))

    def clear(self) -> None:
        self.calls = []
