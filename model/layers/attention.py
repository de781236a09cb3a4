"""Gated full attention (every `full_attention_interval`-th layer): q/k norm, partial RoPE, output gate.

Tensor parallel over attn_tp: a rank holds num_heads / tp query heads and max(kv_heads / tp, 1) KV heads (KV
heads are replicated when tp > kv heads); o_proj is row parallel, summed over the group by the plan's op.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from model.config import Qwen3_5MoeTextConfig
from model.layers.linear import Slot, linear_weight
from model.layers.norm import Qwen3_5MoeRMSNorm
from model.layers.step import Step
from model.ops import OpSet


class Qwen3_5MoeAttention(nn.Module):
    def __init__(self, config: Qwen3_5MoeTextConfig, layer_idx: int, ops: OpSet, dtype: torch.dtype,
                 device: torch.device | str, num_heads: int | None = None, num_kv_heads: int | None = None,
                 tp_group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = num_heads or config.num_attention_heads
        self.num_kv_heads = num_kv_heads or config.num_key_value_heads
        self.scale = config.head_dim ** -0.5
        self.ops = ops
        self.tp_group = tp_group
        d = self.head_dim
        # q_proj carries a gate per head: rows per head h are [q_h (D) | gate_h (D)] (HF layout).
        self.qkv = ops.projections(config.hidden_size, {"q_proj": self.num_heads * 2 * d,
                                                        "k_proj": self.num_kv_heads * d,
                                                        "v_proj": self.num_kv_heads * d}, dtype, device)
        self.o_proj = linear_weight(config.hidden_size, self.num_heads * d, dtype, device)
        self.q_norm = Qwen3_5MoeRMSNorm(d, config.rms_norm_eps, ops.rms_norm, ops.add_rms_norm, dtype, device)
        self.k_norm = Qwen3_5MoeRMSNorm(d, config.rms_norm_eps, ops.rms_norm, ops.add_rms_norm, dtype, device)

    def forward(self, x: torch.Tensor, step: Step) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.head_dim
        q_gate, k, v = self.qkv(x)
        q, gate = q_gate.view(b, t, self.num_heads, 2 * d).chunk(2, dim=-1)
        q = self.q_norm(q)
        k = self.k_norm(k.view(b, t, self.num_kv_heads, d))
        v = v.view(b, t, self.num_kv_heads, d)
        q, k = self.ops.apply_rope(q, k, step.cos, step.sin)
        k_cache = step.cache.key[self.layer_idx]
        v_cache = step.cache.value[self.layer_idx]
        self.ops.write_kv(k_cache, v_cache, k, v, step.start)
        if step.prefill:
            # a prompt attends to its own fresh K/V (no cached prefix), as the recipe's prefill does
            out = self.ops.attention_prefill(q, k, v, step.seq_lens, self.scale)
        else:
            out = self.ops.attention_decode(q, k_cache, v_cache, step.start + 1, self.scale)
        out = out.reshape(b, t, self.num_heads * d) * torch.sigmoid(gate.reshape(b, t, self.num_heads * d))
        row_parallel = self.ops.row_parallel_prefill if step.prefill else self.ops.row_parallel_decode
        return row_parallel(out, self.o_proj, self.tp_group)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {**self.qkv.slots(prefix), f"{prefix}o_proj.weight": Slot(self.o_proj),
                **self.q_norm.slots(f"{prefix}q_norm."), **self.k_norm.slots(f"{prefix}k_norm.")}
