"""Bias-free projections of one input, merged into one GEMM or kept separate, and the weight slots loading
uses.

`merged_projections` is structural: the plan hands layers a `Projections` factory with `merged` fixed, and the
layer calls it the same way either way. A `Slot` tells the loader where a checkpoint tensor lands.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Slot:
    """Checkpoint tensor -> `param[dest]`, after taking `source` of the checkpoint tensor (a TP block; set by
    model.parallel.shard_slots, never by a layer)."""

    param: torch.Tensor
    dest: tuple = ()
    source: tuple = ()
    full_shape: tuple[int, ...] | None = None  # checkpoint tensor shape when `source` takes a shard of it

    @property
    def shape(self) -> torch.Size:
        return self.param[self.dest].shape if self.dest else self.param.shape


class Projections(nn.Module):
    """y_1, ..., y_n = x W_1^T, ..., x W_n^T for named parts of given output sizes.

    Merged: one [sum(out), in] weight, one GEMM, then a split (views, no copies).
    Separate: one weight and one GEMM per part (the unfused fallback of `merged_projections`).
    """

    def __init__(self, in_features: int, parts: dict[str, int], merged: bool, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        super().__init__()
        self.part_names = tuple(parts)
        self.sizes = tuple(parts.values())
        self.merged = merged
        if merged:
            self.weight = nn.Parameter(torch.empty(sum(self.sizes), in_features, dtype=dtype, device=device),
                                       requires_grad=False)
        else:
            self.weights = nn.ParameterList(
                nn.Parameter(torch.empty(size, in_features, dtype=dtype, device=device), requires_grad=False)
                for size in self.sizes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.merged:
            return F.linear(x, self.weight).split(self.sizes, dim=-1)
        return tuple(F.linear(x, w) for w in self.weights)

    def slots(self, prefix: str) -> dict[str, Slot]:
        """`{prefix}{part}.weight` -> where it goes."""
        out: dict[str, Slot] = {}
        start = 0
        for i, (name, size) in enumerate(zip(self.part_names, self.sizes)):
            if self.merged:
                out[f"{prefix}{name}.weight"] = Slot(self.weight, (slice(start, start + size),))
            else:
                out[f"{prefix}{name}.weight"] = Slot(self.weights[i])
            start += size
        return out

    def extra_repr(self) -> str:
        parts = ", ".join(f"{n}={s}" for n, s in zip(self.part_names, self.sizes))
        return f"{parts}, merged={self.merged}"


def linear_weight(out_features: int, in_features: int, dtype: torch.dtype,
                  device: torch.device | str) -> nn.Parameter:
    return nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device),
                        requires_grad=False)
