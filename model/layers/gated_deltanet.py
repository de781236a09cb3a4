"""Gated DeltaNet linear attention (the layers that are not full attention).

in_proj -> causal depthwise conv (+SiLU, with state) -> q/k L2 norm, beta, log-decay g -> gated delta rule
(chunked or token recurrence in prefill, one recurrent step in decode) -> gated RMSNorm -> out_proj.

Tensor parallel over attn_tp: a rank holds linear_num_key_heads / tp key heads and linear_num_value_heads / tp
value heads (v-head j still reads k-head j // (Hv / Hk) locally), the matching conv channels of each of q, k
and v, and out_proj's input block (row parallel, summed over the group by the plan's op).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from model.config import Qwen3_5MoeTextConfig
from model.layers.linear import Slot, linear_weight
from model.layers.step import Step
from model.ops import OpSet


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + 1e-6) in fp32, as HF's use_qk_l2norm_in_kernel (not F.normalize's max-eps
    form)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class Qwen3_5MoeGatedDeltaNet(nn.Module):
    def __init__(self, config: Qwen3_5MoeTextConfig, layer_idx: int, ops: OpSet, dtype: torch.dtype,
                 device: torch.device | str, num_k_heads: int | None = None, num_v_heads: int | None = None,
                 tp_group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.ops = ops
        self.tp_group = tp_group
        self.num_k_heads = num_k_heads or config.linear_num_key_heads
        self.num_v_heads = num_v_heads or config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.kernel = config.linear_conv_kernel_dim
        self.eps = config.rms_norm_eps
        self.scale = self.head_k_dim ** -0.5
        # in_proj_qkv rows are [Q | K | V] contiguous (Qwen3.5, unlike Qwen3-Next's per-head grouping)
        self.in_proj = ops.projections(config.hidden_size, {"in_proj_qkv": self.conv_dim,
                                                            "in_proj_z": self.value_dim,
                                                            "in_proj_b": self.num_v_heads,
                                                            "in_proj_a": self.num_v_heads}, dtype, device)
        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        self.conv_weight = param(self.conv_dim, 1, self.kernel)
        self.dt_bias = param(self.num_v_heads)
        self.A_log = param(self.num_v_heads)
        self.norm_weight = param(self.head_v_dim)
        self.out_proj = linear_weight(config.hidden_size, self.value_dim, dtype, device)

    def forward(self, x: torch.Tensor, step: Step) -> torch.Tensor:
        b, t, _ = x.shape
        qkv, z, beta_logit, a = self.in_proj(x)
        conv_state = step.cache.conv[self.layer_idx]
        state = step.cache.recurrent[self.layer_idx]
        assert conv_state is not None and state is not None, "a linear-attention layer's cache holds its states"
        if step.prefill:
            mixed = self._conv_prefill(qkv, step.seq_lens, conv_state)
        else:
            mixed = self._conv_decode(qkv, conv_state)
        # q and k are adjacent channels ([Q | K | V]): one normalisation pass serves both
        qk = l2_normalize(mixed[..., :2 * self.key_dim].reshape(b, t, 2 * self.num_k_heads, self.head_k_dim))
        q, k = qk.split(self.num_k_heads, dim=2)
        v = mixed[..., 2 * self.key_dim:].reshape(b, t, self.num_v_heads, self.head_v_dim)
        beta = torch.sigmoid(beta_logit.float())
        g = -torch.exp(self.A_log.float()) * F.softplus(a.float() + self.dt_bias.float())
        if step.prefill:
            out, final = self.ops.gdr_prefill(q, k, v, g, beta, self.scale, None, step.seq_lens)
            state.copy_(final)
        else:
            out = self.ops.gdr_decode(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], self.scale, state)
            out = out.unsqueeze(1)
        z = z.reshape(b, t, self.num_v_heads, self.head_v_dim)
        out = self.ops.gated_rms_norm(out, z, self.norm_weight, self.eps)
        row_parallel = self.ops.row_parallel_prefill if step.prefill else self.ops.row_parallel_decode
        return row_parallel(out.reshape(b, t, self.value_dim), self.out_proj, self.tp_group)

    def _conv_prefill(self, qkv: torch.Tensor, seq_lens: torch.Tensor,
                      conv_state: torch.Tensor) -> torch.Tensor:
        """Causal depthwise conv (+SiLU) over each right-padded prompt, in the [B, T, C] layout the projection
        produced (channels innermost, so every pass is contiguous and vectorised, and no transposed or padded
        copies are made); keeps the last K-1 inputs of each prompt as its conv state [B, C, K-1]."""
        t, c, taps = qkv.shape[1], qkv.shape[2], self.kernel
        # prompt b's last K-1 inputs are rows len_b-K+1 .. len_b-1; rows before 0 are the zero left padding
        rows = seq_lens.to(torch.long)[:, None] - (taps - 1) + torch.arange(taps - 1, device=qkv.device)
        last = qkv.gather(1, rows.clamp(min=0)[:, :, None].expand(-1, -1, c)) * (rows >= 0)[:, :, None]
        conv_state.copy_(last.transpose(1, 2))
        # y_t = sum_s w[K-1-s] x_(t-s): one multiply-add per tap over the rows it reaches. F.conv1d computes
        # the same, but oneDNN's depthwise kernel is much slower than this for a 4-tap kernel on CPU
        w = self.conv_weight[:, 0].t()  # [K, C]
        y = qkv * w[taps - 1]
        for s in range(1, min(taps, t)):
            y[:, s:].addcmul_(qkv[:, :t - s], w[taps - 1 - s])
        return F.silu(y, inplace=True)

    def _conv_decode(self, qkv: torch.Tensor, conv_state: torch.Tensor) -> torch.Tensor:
        window = torch.cat([conv_state, qkv.transpose(1, 2)], dim=-1)  # [B, C, K]
        conv_state.copy_(window[:, :, 1:])
        y = (window * self.conv_weight.squeeze(1)).sum(-1)
        return F.silu(y).unsqueeze(1)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {**self.in_proj.slots(prefix), f"{prefix}conv1d.weight": Slot(self.conv_weight),
                f"{prefix}dt_bias": Slot(self.dt_bias), f"{prefix}A_log": Slot(self.A_log),
                f"{prefix}norm.weight": Slot(self.norm_weight),
                f"{prefix}out_proj.weight": Slot(self.out_proj)}
