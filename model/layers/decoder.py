"""One decoder layer: norm -> mixer (GDN or gated attention) -> add+norm -> MoE, residual threaded between
layers.

The residual add of a layer's MoE output is fused into the next layer's input norm (add_rms_norm), as the
recipe does, so a layer takes and returns (hidden, residual).
"""

from __future__ import annotations

import torch
from torch import nn

from model.config import Qwen3_5MoeTextConfig
from model.expert_counts import ExpertCounts
from model.layers.attention import Qwen3_5MoeAttention
from model.layers.gated_deltanet import Qwen3_5MoeGatedDeltaNet
from model.layers.linear import Slot
from model.layers.moe import Qwen3_5MoeSparseMoeBlock
from model.layers.norm import Qwen3_5MoeRMSNorm
from model.layers.step import Step
from model.ops import OpSet
from model.parallel import LocalSizes, ProcessGroups
from model.replay import MIXER, MOE
from model.routing_log import RoutingLog
from model.tracing import Scopes


class Qwen3_5MoeDecoderLayer(nn.Module):
    def __init__(self, config: Qwen3_5MoeTextConfig, layer_idx: int, ops: OpSet, scopes: Scopes,
                 dtype: torch.dtype, device: torch.device | str, groups: ProcessGroups | None = None,
                 expert_counts: ExpertCounts | None = None, routing_log: RoutingLog | None = None) -> None:
        super().__init__()
        groups = groups or ProcessGroups()
        sizes = LocalSizes.of(config, groups.layout)
        self.layer_idx = layer_idx
        self.layer_type = config.layer_types[layer_idx]
        self.scopes = scopes
        eps = config.rms_norm_eps
        h = config.hidden_size
        norm_ops = (ops.rms_norm, ops.add_rms_norm)
        self.input_layernorm = Qwen3_5MoeRMSNorm(h, eps, *norm_ops, dtype, device)
        self.post_attention_layernorm = Qwen3_5MoeRMSNorm(h, eps, *norm_ops, dtype, device)
        self.mixer: Qwen3_5MoeAttention | Qwen3_5MoeGatedDeltaNet
        if self.layer_type == "full_attention":
            self.mixer = Qwen3_5MoeAttention(config, layer_idx, ops, dtype, device,
                                             sizes.num_heads, sizes.num_kv_heads, groups.attn_tp)
            self.mixer_name, self.mixer_module = "self_attn", "attn"
        else:
            self.mixer = Qwen3_5MoeGatedDeltaNet(config, layer_idx, ops, dtype, device, sizes.linear_k_heads,
                                                 sizes.linear_v_heads, groups.attn_tp)
            self.mixer_name, self.mixer_module = "linear_attn", "gdn"
        self.mlp = Qwen3_5MoeSparseMoeBlock(config, ops, dtype, device, groups, layer_idx, expert_counts,
                                            routing_log)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor | None,
                step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        scope = self.scopes
        where = {"layer": self.layer_idx, "layer_type": self.layer_type}
        with scope(**where, module="norm"):
            if residual is None:
                residual = hidden
                hidden = self.input_layernorm(hidden)
            else:
                hidden, residual = self.input_layernorm.add_forward(hidden, residual)
        with scope(**where, module=self.mixer_module):
            hidden = self.mixer(hidden, step)
        if step.tap is not None:
            step.tap.branch(self.layer_idx, MIXER, hidden)
        with scope(**where, module="norm"):
            hidden, residual = self.post_attention_layernorm.add_forward(hidden, residual)
        with scope(**where, module="moe"):
            hidden = self.mlp(hidden, step)
        if step.tap is not None:
            step.tap.branch(self.layer_idx, MOE, hidden)
        return hidden, residual

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {**self.input_layernorm.slots(f"{prefix}input_layernorm."),
                **self.post_attention_layernorm.slots(f"{prefix}post_attention_layernorm."),
                **self.mixer.slots(f"{prefix}{self.mixer_name}."), **self.mlp.slots(f"{prefix}mlp.")}
