"""RMSNorm modules holding checkpoint weights; the math is the op the plan hands them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from model.layers.linear import Slot


class Qwen3_5MoeRMSNorm(nn.Module):
    """Zero-centred RMSNorm: y = norm(x) * (1 + w). The op receives gamma = 1 + w (fp32), computed once."""

    gamma: torch.Tensor  # a buffer (declared: nn.Module types attributes it holds as Tensor | Module)

    def __init__(self, dim: int, eps: float, rms_norm: Callable, add_rms_norm: Callable, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        super().__init__()
        self.eps = eps
        self.rms_norm_op = rms_norm
        self.add_rms_norm_op = add_rms_norm
        self.weight = nn.Parameter(torch.zeros(dim, dtype=dtype, device=device), requires_grad=False)
        self.register_buffer("gamma", torch.ones(dim, dtype=torch.float32, device=device), persistent=False)

    def finalize(self) -> None:
        """After loading: gamma = 1 + w in fp32 (HF adds 1 after the fp32 upcast)."""
        self.gamma.copy_(1.0 + self.weight.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rms_norm_op(x, self.gamma, self.eps)

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(residual + x), residual + x)."""
        return self.add_rms_norm_op(x, residual, self.gamma, self.eps)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {f"{prefix}weight": Slot(self.weight)}
