"""Preallocated inference state: KV for full-attention layers, conv + recurrent state for linear-attention
layers.

Allocated once per batch at its final length (prompt + new tokens), so decode steps have static shapes and no
allocation. `kv_lens` counts the tokens each sequence has in the cache and is advanced on device (no host
sync). Under tensor parallelism a rank allocates only its heads (the model passes its local counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.config import Qwen3_5MoeTextConfig


@dataclass
class Qwen3_5MoeCache:
    key: list[torch.Tensor | None]  # [B, S, Nkv, D] per full-attention layer
    value: list[torch.Tensor | None]
    conv: list[torch.Tensor | None]  # [B, C, K-1] last conv inputs (pre-conv, pre-SiLU), model dtype
    recurrent: list[torch.Tensor | None]  # [B, Hv, Dk, Dv] fp32 delta-rule state
    kv_lens: torch.Tensor  # [B] int64
    max_len: int

    @classmethod
    def allocate(cls, config: Qwen3_5MoeTextConfig, batch: int, max_len: int, dtype: torch.dtype,
                 device: torch.device | str, num_kv_heads: int | None = None, num_v_heads: int | None = None,
                 conv_dim: int | None = None) -> Qwen3_5MoeCache:
        """Head counts default to the full model; a tensor-parallel rank passes its local counts."""
        nkv = num_kv_heads or config.num_key_value_heads
        nv = num_v_heads or config.linear_num_value_heads
        conv_dim = conv_dim or config.linear_conv_dim
        key: list[torch.Tensor | None] = []
        value: list[torch.Tensor | None] = []
        conv: list[torch.Tensor | None] = []
        recurrent: list[torch.Tensor | None] = []
        for layer_type in config.layer_types:
            if layer_type == "full_attention":
                shape = (batch, max_len, nkv, config.head_dim)
                key.append(torch.zeros(shape, dtype=dtype, device=device))
                value.append(torch.zeros(shape, dtype=dtype, device=device))
                conv.append(None)
                recurrent.append(None)
            else:
                key.append(None)
                value.append(None)
                conv.append(torch.zeros(batch, conv_dim, config.linear_conv_kernel_dim - 1, dtype=dtype,
                                        device=device))
                state_shape = (batch, nv, config.linear_key_head_dim, config.linear_value_head_dim)
                recurrent.append(torch.zeros(state_shape, dtype=torch.float32, device=device))
        return cls(key, value, conv, recurrent, torch.zeros(batch, dtype=torch.long, device=device), max_len)

    def tensors(self) -> list[torch.Tensor]:
        """Every state tensor (each is updated in place, never reallocated)."""
        layers = (t for ts in (self.key, self.value, self.conv, self.recurrent) for t in ts if t is not None)
        return [*layers, self.kv_lens]

    def reset(self) -> None:
        """Zero the state in place (reuse across timed iterations without reallocating)."""
        for t in self.tensors():
            t.zero_()
