"""Token embedding and LM head, vocabulary-parallel when their TP group has more than one rank.

Embedding (embed_tp): a rank holds vocabulary rows [start, start + V_r). Ids outside the block look up row 0
and are zeroed, and the all_reduce over the group adds exactly one non-zero row per token (npu_recipe.md 1.7).
LM head (lmhead_tp): column parallel; each rank scores its block of the vocabulary and the blocks are
all_gathered along the last dim, so every rank returns the full [.., V] logits.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from model.layers.linear import Slot, linear_weight
from model.ops import comm


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype, device: torch.device | str,
                 vocab_start: int = 0, tp_group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.vocab = vocab  # this rank's rows
        self.vocab_start = vocab_start
        self.tp_group = tp_group
        self.weight = linear_weight(vocab, hidden, dtype, device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp_group is None:
            return F.embedding(ids, self.weight)
        local = ids - self.vocab_start
        inside = (local >= 0) & (local < self.vocab)
        out = F.embedding(local.masked_fill(~inside, 0), self.weight)
        return comm.all_reduce(out.masked_fill(~inside[..., None], 0.0), self.tp_group)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {f"{prefix}weight": Slot(self.weight)}


class ParallelLMHead(nn.Module):
    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype, device: torch.device | str,
                 tp_group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.tp_group = tp_group
        self.weight = linear_weight(vocab, hidden, dtype, device)  # this rank's vocabulary rows

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = F.linear(hidden, self.weight)
        return logits if self.tp_group is None else comm.all_gather(logits, self.tp_group, dim=-1)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {f"{prefix}weight": Slot(self.weight)}
