"""Sparse MoE block: router (softmax, top-k, renormalise), routed SwiGLU experts, sigmoid-gated shared expert."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model.config import Qwen3_5MoeTextConfig
from model.layers.linear import Slot, linear_weight
from model.layers.step import Step
from model.ops import OpSet


class Qwen3_5MoeSharedExpert(nn.Module):
    def __init__(self, hidden: int, intermediate: int, ops: OpSet, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        super().__init__()
        self.gate_up = ops.projections(hidden, {"gate_proj": intermediate, "up_proj": intermediate}, dtype, device)
        self.down_proj = linear_weight(hidden, intermediate, dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x)
        return F.linear(F.silu(gate) * up, self.down_proj)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {**self.gate_up.slots(prefix), f"{prefix}down_proj.weight": Slot(self.down_proj)}


class Qwen3_5MoeExperts(nn.Module):
    """Routed experts' weights: gate/up merged as [E, 2I, H] (w13) or separate [E, I, H] each; down [E, H, I]."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int, merged: bool, dtype: torch.dtype,
                 device: torch.device | str, first_expert: int = 0) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.intermediate = intermediate
        self.first_expert = first_expert  # global id of local expert 0 (expert parallelism)
        self.merged = merged
        shapes = [(num_experts, 2 * intermediate, hidden)] if merged else [(num_experts, intermediate, hidden)] * 2
        self.gate_up = nn.ParameterList(nn.Parameter(torch.empty(s, dtype=dtype, device=device), requires_grad=False)
                                        for s in shapes)
        self.down = nn.Parameter(torch.empty(num_experts, hidden, intermediate, dtype=dtype, device=device),
                                 requires_grad=False)

    def slots(self, prefix: str) -> dict[str, Slot]:
        """Per-expert checkpoint keys (weights.py expands fused on-disk expert tensors to these)."""
        out: dict[str, Slot] = {}
        i = self.intermediate
        for local in range(self.num_experts):
            key = f"{prefix}{self.first_expert + local}."
            if self.merged:
                out[f"{key}gate_proj.weight"] = Slot(self.gate_up[0], (local, slice(0, i)))
                out[f"{key}up_proj.weight"] = Slot(self.gate_up[0], (local, slice(i, 2 * i)))
            else:
                out[f"{key}gate_proj.weight"] = Slot(self.gate_up[0], (local,))
                out[f"{key}up_proj.weight"] = Slot(self.gate_up[1], (local,))
            out[f"{key}down_proj.weight"] = Slot(self.down, (local,))
        return out


class Qwen3_5MoeSparseMoeBlock(nn.Module):
    def __init__(self, config: Qwen3_5MoeTextConfig, ops: OpSet, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        super().__init__()
        self.ops = ops
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_experts
        h = config.hidden_size
        # router and shared-expert gate read the same input: one GEMM when projections are merged
        self.gates = ops.projections(h, {"gate": config.num_experts, "shared_expert_gate": 1}, dtype, device)
        self.experts = Qwen3_5MoeExperts(config.num_experts, h, config.moe_intermediate_size,
                                         merged=self.gates.merged, dtype=dtype, device=device)
        self.shared_expert = Qwen3_5MoeSharedExpert(h, config.shared_expert_intermediate_size, ops, dtype, device)

    def forward(self, x: torch.Tensor, step: Step) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        router_logits, shared_gate = self.gates(x)
        weights, ids = self.ops.route(router_logits, self.top_k)
        experts = self.ops.experts_prefill if step.prefill else self.ops.experts_decode
        routed = experts(x, ids, weights, list(self.experts.gate_up), self.experts.down)
        shared = self.shared_expert(x) * torch.sigmoid(shared_gate)
        return (routed + shared).reshape(shape)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {**self.gates.slots(prefix), **self.experts.slots(f"{prefix}experts."),
                **self.shared_expert.slots(f"{prefix}shared_expert.")}
