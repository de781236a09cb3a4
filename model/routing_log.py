"""Which experts each token chose, and by how much: the routing of one iteration, for numerics checks.

A fused op that rounds differently (1e-6 in fp32) can flip an expert choice whose k-th and (k+1)-th router
probabilities are nearly tied; the flipped token then gets another expert's output and the logits move by far
more than rounding (0.09 was seen on the tiny preset, greedy tokens unchanged). A harness that compares a run's
logits with a reference tells such a flip from a wrong kernel by comparing the two runs' logs: the chosen ids per
token and the margin (k-th minus (k+1)-th probability) of each choice.

Off by default: each MoE call hands its router logits to `record`, which returns at once (one attribute test).
Nothing is recorded inside a compiled graph (as for model/expert_counts.py), nor under expert parallelism's
token split (each rank sees a block of tokens only).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.recorder import Recorder


@dataclass(frozen=True)
class RoutedCall:
    """One MoE layer call: its phase, layer, the sorted top-k expert ids [N, K] and each token's margin [N]."""

    prefill: bool
    layer: int
    ids: torch.Tensor
    margin: torch.Tensor


class RoutingLog(Recorder):
    """Shared by the MoE layers of one model; calls are kept in the order they ran."""

    def __init__(self) -> None:
        self.enabled = False
        self.calls: list[RoutedCall] = []

    def record(self, layer: int, prefill: bool, router_logits: torch.Tensor, top_k: int) -> None:
        if torch.compiler.is_compiling() or not self.enabled:
            return
        probs = torch.softmax(router_logits.detach().float(), dim=-1)
        top = torch.topk(probs, min(top_k + 1, probs.shape[-1]), dim=-1)
        margin = (top.values[:, top_k - 1] - top.values[:, top_k] if top.values.shape[-1] > top_k
                  else torch.full_like(top.values[:, 0], float("inf")))
        ids = top.indices[:, :top_k].sort(dim=-1).values
        self.calls.append(RoutedCall(prefill, layer, ids.cpu(), margin.cpu()))

    def clear(self) -> None:
        self.calls = []
