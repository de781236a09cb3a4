"""Sparse MoE block: router (softmax, top-k, renormalise), routed SwiGLU experts, sigmoid-gated shared
expert.

Parallel layouts (sizes from model.parallel.LocalSizes, groups from model.parallel.ProcessGroups):
- MoE TP (moe_tp_size > 1): every rank holds all experts with I / tp of each expert's intermediate dim (w13
  column, down row), computes every token, and the partial outputs are all_reduced over moe_tp.
- MoE EP (moe_ep_size > 1): every rank holds E / ep whole experts. The tokens, identical on all ranks, are cut
  into contiguous blocks: a rank routes only its block, exchanges it with the plan's EP op (Double-Routing, or
  dispatch/combine in decode) and the combined blocks are all_gathered, so no rank repeats another's expert
  compute (the recipe routes every token on every rank).
- Shared expert TP (shared_tp_size > 1): gate/up column, down row + all_reduce over shared_tp.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from model.config import Qwen3_5MoeTextConfig
from model.expert_counts import ExpertCounts
from model.layers.linear import Slot, linear_weight
from model.layers.step import Step
from model.ops import OpSet, comm
from model.ops import moe as moe_ops
from model.parallel import LocalSizes, ProcessGroups, token_block
from model.routing_log import RoutingLog


class Qwen3_5MoeSharedExpert(nn.Module):
    def __init__(self, hidden: int, intermediate: int, ops: OpSet, dtype: torch.dtype,
                 device: torch.device | str, tp_group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.ops = ops
        self.tp_group = tp_group
        self.gate_up = ops.projections(hidden, {"gate_proj": intermediate, "up_proj": intermediate}, dtype,
                                       device)
        self.down_proj = linear_weight(hidden, intermediate, dtype, device)

    def forward(self, x: torch.Tensor, prefill: bool) -> torch.Tensor:
        gate, up = self.gate_up(x)
        row_parallel = self.ops.row_parallel_prefill if prefill else self.ops.row_parallel_decode
        return row_parallel(F.silu(gate) * up, self.down_proj, self.tp_group)

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {**self.gate_up.slots(prefix), f"{prefix}down_proj.weight": Slot(self.down_proj)}


class Qwen3_5MoeExperts(nn.Module):
    """Routed experts' weights: gate/up merged as [E, 2I, H] (w13) or separate [E, I, H] each; down
    [E, H, I]. E and I are this rank's (local experts under EP, an intermediate block under MoE TP)."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int, merged: bool, dtype: torch.dtype,
                 device: torch.device | str, first_expert: int = 0) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.intermediate = intermediate
        self.first_expert = first_expert  # global id of local expert 0 (expert parallelism)
        self.merged = merged
        i = intermediate
        shapes = [(num_experts, 2 * i, hidden)] if merged else [(num_experts, i, hidden)] * 2
        self.gate_up = nn.ParameterList(
            nn.Parameter(torch.empty(s, dtype=dtype, device=device), requires_grad=False) for s in shapes)
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
                 device: torch.device | str, groups: ProcessGroups | None = None, layer_idx: int = 0,
                 expert_counts: ExpertCounts | None = None, routing_log: RoutingLog | None = None) -> None:
        """`expert_counts`, `routing_log`: the model's routing recorders (off unless a harness turns them on)."""
        super().__init__()
        groups = groups or ProcessGroups()
        sizes = LocalSizes.of(config, groups.layout)
        self.ops = ops
        self.layer_idx = layer_idx
        self.expert_counts = expert_counts or ExpertCounts(config.num_experts)
        self.routing_log = routing_log or RoutingLog()
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_experts
        self.moe_tp_group = groups.moe_tp
        self.ep = None if groups.moe_ep is None else comm.ExpertParallel(
            groups.moe_ep, groups.layout.size("moe_ep"), groups.layout.index("moe_ep"), config.num_experts,
            groups.moe_ep_dispatch, groups.moe_ep_dispatch_name)
        h = config.hidden_size
        # router and shared-expert gate read the same input: one GEMM when projections are merged
        self.gates = ops.projections(h, {"gate": config.num_experts, "shared_expert_gate": 1}, dtype, device)
        self.experts = Qwen3_5MoeExperts(sizes.num_experts, h, sizes.moe_intermediate,
                                         merged=self.gates.merged, dtype=dtype, device=device,
                                         first_expert=sizes.first_expert)
        self.shared_expert = Qwen3_5MoeSharedExpert(h, sizes.shared_intermediate, ops, dtype, device,
                                                    groups.shared_tp)

    def forward(self, x: torch.Tensor, step: Step) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        if self.ep is None:
            out = self._forward_all_tokens(x, step)
        else:
            out = self._forward_token_split(x, step)
        return out.reshape(shape)

    def _forward_all_tokens(self, x: torch.Tensor, step: Step) -> torch.Tensor:
        """world_size 1 and MoE TP: every rank sees every token."""
        router_logits, shared_gate = self.gates(x)
        weights, ids = self.ops.route(router_logits, self.top_k)
        self.expert_counts.record(self.layer_idx, step.prefill, ids)
        self.routing_log.record(self.layer_idx, step.prefill, router_logits, ids)
        if step.forced_ids is not None:
            weights, ids = moe_ops.route_replayed(router_logits, weights, ids, step.forced_ids[self.layer_idx])
        experts = self.ops.experts_prefill if step.prefill else self.ops.experts_decode
        routed = experts(x, ids, weights, list(self.experts.gate_up), self.experts.down)
        if self.moe_tp_group is not None:
            routed = comm.all_reduce(routed, self.moe_tp_group)  # each rank summed over its block of I
        shared = self.shared_expert(x, step.prefill) * torch.sigmoid(shared_gate)
        return routed + shared

    def _forward_token_split(self, x: torch.Tensor, step: Step) -> torch.Tensor:
        """MoE EP: this rank routes and dispatches its block of tokens; the blocks are gathered at the end."""
        ep = self.ep
        assert ep is not None
        start, stop, per_rank = token_block(x.shape[0], ep.size, ep.rank)
        # a shared-TP group spans ranks with different token blocks, so TP'd shared experts see every token
        split_shared = self.shared_expert.tp_group is None
        router_logits, shared_gate = self.gates(x[start:stop] if split_shared else x)
        if not split_shared:
            router_logits = router_logits[start:stop]
        local = x[start:stop]
        if local.shape[0]:
            weights, ids = self.ops.route(router_logits, self.top_k)
        else:  # more ranks than tokens: this rank still takes part in every exchange, with nothing to send
            weights = router_logits.new_empty(0, self.top_k)
            ids = torch.empty(0, self.top_k, dtype=torch.long, device=x.device)
        self.expert_counts.record(self.layer_idx, step.prefill, ids, ep.group)
        self.routing_log.record(self.layer_idx, step.prefill, router_logits, ids,
                                lambda rows: comm.gather_tokens(rows, x.shape[0], per_rank, ep))
        if step.forced_ids is not None and local.shape[0]:
            weights, ids = moe_ops.route_replayed(router_logits, weights, ids,
                                                  step.forced_ids[self.layer_idx, start:stop])
        exchange = self.ops.moe_ep_prefill if step.prefill else self.ops.moe_ep_decode
        experts = self.ops.experts_prefill if step.prefill else self.ops.experts_decode
        routed = exchange(local, ids, weights, list(self.experts.gate_up), self.experts.down, experts, ep,
                          per_rank)
        if split_shared:
            routed = routed + self.shared_expert(local, step.prefill) * torch.sigmoid(shared_gate)
            return comm.gather_tokens(routed, x.shape[0], per_rank, ep)
        shared = self.shared_expert(x, step.prefill) * torch.sigmoid(shared_gate)
        return comm.gather_tokens(routed, x.shape[0], per_rank, ep) + shared

    def slots(self, prefix: str) -> dict[str, Slot]:
        return {**self.gates.slots(prefix), **self.experts.slots(f"{prefix}experts."),
                **self.shared_expert.slots(f"{prefix}shared_expert.")}
