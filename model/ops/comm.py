"""Communication ops: the collectives every parallel layer uses, row-parallel matmul(+all_reduce), and the
expert-parallel MoE exchange (Double-Routing all_to_all, static-shape dispatch/combine, NPU MC2).

Every collective goes through `all_reduce`, `all_gather` or `all_to_all` here, so one recorder
(`record_comm`) sees every byte a rank sends; it is off unless a caller opens it
(benchmarks/parallel_comm.py).

Expert parallelism and the token split. The recipe routes and dispatches every token on every EP rank, so each
rank repeats the whole expert computation (npu_recipe.md 3.3). Here the hidden states [N, H], identical on
every rank, are cut into contiguous blocks of ceil(N / ep) rows (`model.parallel.token_block`): each rank
routes and dispatches only its block, experts run on the pairs they receive, and after combine the blocks are
all_gathered back to [N, H]. Expert compute per rank is ~1/ep of world_size 1.

An EP exchange has the signature `(x, topk_ids, topk_weights, gate_up, down, experts, ep, tokens_per_rank)
-> y` for the local block x [n, H] (n <= tokens_per_rank), its routing [n, K], the rank's local expert weights
(layout of model/ops/moe.py) and the plan's local experts op; y [n, H] = sum_k w[n, k] * expert(x[n]).
The local experts op sees each received row once, routed top-1 to its local expert with weight 1 (exact in
any dtype), so the sort by local expert (the recipe's re-routing) and the grouped matmul are that op's.

Shape letters: N tokens, n local tokens, H hidden, E experts, Er experts per rank, K experts per token.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from model.parallel import hccl_comm_name

ExpertsFn = Callable[..., Tensor]  # (x, topk_ids, topk_weights, gate_up, down) -> y, model/ops/moe.py


# ----------------------------------------------------------------------------------------------------
# Recording: bytes and time per collective
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommEvent:
    """One collective call. `bytes` is the payload this rank puts in: the tensor for all_reduce, the local
    block for all_gather, the rows addressed to other ranks for all_to_all (its own block stays local)."""

    op: str
    group_size: int
    bytes: int
    seconds: float


@dataclass
class CommLog:
    events: list[CommEvent] = field(default_factory=list)

    def totals(self) -> dict[str, tuple[int, int, float]]:
        """op -> (calls, bytes, seconds)."""
        out: dict[str, tuple[int, int, float]] = {}
        for e in self.events:
            calls, nbytes, secs = out.get(e.op, (0, 0, 0.0))
            out[e.op] = (calls + 1, nbytes + e.bytes, secs + e.seconds)
        return out

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.events)

    @property
    def seconds(self) -> float:
        return sum(e.seconds for e in self.events)


_LOGS: list[CommLog] = []  # the open recorders (record_comm); empty unless a caller asked


@contextlib.contextmanager
def record_comm() -> Iterator[CommLog]:
    """Record every collective issued inside the block (wall time of each blocking call, payload bytes)."""
    log = CommLog()
    _LOGS.append(log)
    try:
        yield log
    finally:
        _LOGS.remove(log)


def _clock() -> float:
    # a compiled decode step (graph_mode) traces the collectives; recording is eager-only
    return 0.0 if torch.compiler.is_compiling() else time.perf_counter()


def _note(op: str, group: dist.ProcessGroup, nbytes: int, start: float) -> None:
    if _LOGS and not torch.compiler.is_compiling():
        event = CommEvent(op, dist.get_world_size(group), nbytes, time.perf_counter() - start)
        for log in _LOGS:
            log.events.append(event)


# ----------------------------------------------------------------------------------------------------
# Collectives
# ----------------------------------------------------------------------------------------------------


def all_reduce(x: Tensor, group: dist.ProcessGroup) -> Tensor:
    """Sum x over the group, in place; returns x."""
    start = _clock()
    dist.all_reduce(x, group=group)
    _note("all_reduce", group, x.numel() * x.element_size(), start)
    return x


def all_gather(x: Tensor, group: dist.ProcessGroup, dim: int) -> Tensor:
    """Concatenate every rank's x (equal shapes) along `dim`, in group-rank order."""
    start = _clock()
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    _note("all_gather", group, x.numel() * x.element_size(), start)
    return torch.cat(parts, dim=dim)


def all_to_all(output: Tensor, input: Tensor, group: dist.ProcessGroup,
               output_splits: Sequence[int] | None = None,
               input_splits: Sequence[int] | None = None) -> Tensor:
    """Rows of `input` go to ranks in blocks (`input_splits` rows each, equal blocks when None); `output`
    receives the blocks addressed to this rank in rank order. Returns `output`."""
    start = _clock()
    dist.all_to_all_single(output, input, output_split_sizes=list(output_splits) if output_splits else None,
                           input_split_sizes=list(input_splits) if input_splits else None, group=group)
    size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    row_bytes = input[0].numel() * input.element_size() if input.dim() and input.shape[0] else 0
    own = input_splits[rank] if input_splits else (input.shape[0] // size if input.dim() else 0)
    sent = input.numel() * input.element_size() - own * row_bytes
    _note("all_to_all", group, sent, start)
    return output


# ----------------------------------------------------------------------------------------------------
# Row-parallel output projection (o_proj, out_proj, shared down_proj): the `mm_all_reduce` toggle
# ----------------------------------------------------------------------------------------------------


def row_parallel_linear(x: Tensor, weight: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """y = x W^T summed over the group (each rank holds a block of W's input columns and of x's features).

    Reference and unfused path: F.linear, then all_reduce. A single-rank group (None) is just F.linear.
    """
    y = F.linear(x, weight)
    return y if group is None else all_reduce(y, group)


def row_parallel_linear_npu(x: Tensor, weight: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """torch_npu.npu_mm_all_reduce_base: matmul and all_reduce in one op (npu_ops.md 2.9; Ascend 950,
    prefill).

    The weight goes in as the transposed [K_r, N] view of our [N, K_r] storage, which the op accepts.
    """
    if group is None:
        return F.linear(x, weight)
    import torch_npu  # NPU only

    start = _clock()
    y = torch_npu.npu_mm_all_reduce_base(x, weight.t(), hccl_comm_name(group), reduce_op="sum")
    _note("mm_all_reduce", group, y.numel() * y.element_size(), start)
    return y


# ----------------------------------------------------------------------------------------------------
# Expert parallelism
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpertParallel:
    """The EP group as an EP exchange needs it. `dispatch_group` is the communicator MC2 runs on (the same
    group off NPU)."""

    group: dist.ProcessGroup
    size: int
    rank: int
    num_experts: int  # E, global
    dispatch_group: dist.ProcessGroup | None = None
    dispatch_name: str = ""  # the HCCL name of dispatch_group, computed when the groups were built

    @property
    def experts_per_rank(self) -> int:
        return self.num_experts // self.size


def gather_tokens(y: Tensor, num_tokens: int, tokens_per_rank: int, ep: ExpertParallel) -> Tensor:
    """[n, H] local block -> [N, H]: pad to tokens_per_rank rows, all_gather over the EP group, trim."""
    padded = F.pad(y, (0, 0, 0, tokens_per_rank - y.shape[0]))
    return all_gather(padded, ep.group, dim=0)[:num_tokens]


def _run_local_experts(rows: Tensor, local_ids: Tensor, dtype: torch.dtype, gate_up: list[Tensor],
                       down: Tensor, experts: ExpertsFn) -> Tensor:
    """Each received row through its local expert (top-1, weight 1). An empty batch skips the op."""
    if rows.shape[0] == 0:
        return torch.empty_like(rows)
    ones = torch.ones(rows.shape[0], 1, dtype=dtype, device=rows.device)
    return experts(rows, local_ids[:, None], ones, gate_up, down)


def _weighted_sum(pairs: Tensor, topk_weights: Tensor) -> Tensor:
    """[n, K, H] expert outputs of each (token, k) pair -> [n, H] weighted by the routing weights."""
    return (pairs * topk_weights[..., None].to(pairs.dtype)).sum(dim=1)


def ep_double_routing(x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor,
                      experts: ExpertsFn, ep: ExpertParallel, tokens_per_rank: int) -> Tensor:
    """Double-Routing EP exchange (npu_recipe.md 3.3, the recipe's prefill path; our decode fallback).

    1. init routing: the n*K (token, k) pairs sorted by global expert, per-expert counts [E];
    2. all_to_all of the counts: each rank learns how many rows every peer sends each of its Er experts;
    3. all_to_all of the rows with those split sizes (the one host sync: split sizes must be host ints);
    4. local experts on the received rows (re-routing by local expert happens in the experts op);
    5. all_to_all back with the splits reversed; 6. finalize: un-permute and sum with the routing weights.
    Dynamic shapes: only the rows actually routed travel. `tokens_per_rank` is unused (no capacity needed).
    """
    n, k = topk_ids.shape
    hidden = x.shape[1]
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    sorted_x = x.index_select(0, order // k)
    counts = torch.bincount(flat, minlength=ep.num_experts)
    recv_counts = torch.empty_like(counts)
    all_to_all(recv_counts, counts, ep.group)
    send_splits = counts.view(ep.size, -1).sum(1).tolist()
    recv_splits = recv_counts.view(ep.size, -1).sum(1).tolist()
    received = x.new_empty(sum(recv_splits), hidden)
    all_to_all(received, sorted_x, ep.group, recv_splits, send_splits)
    # rows arrive source-rank-major, local-expert-minor: block (r, e) holds recv_counts[r * Er + e] rows
    block_expert = torch.arange(ep.experts_per_rank, device=x.device).repeat(ep.size)
    local_ids = torch.repeat_interleave(block_expert, recv_counts)
    out = _run_local_experts(received, local_ids, topk_weights.dtype, gate_up, down, experts)
    back = x.new_empty(n * k, hidden)
    all_to_all(back, out, ep.group, send_splits, recv_splits)
    pairs = torch.empty_like(back)
    pairs[order] = back
    return _weighted_sum(pairs.view(n, k, hidden), topk_weights)


def ep_static_dispatch_combine(x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor],
                               down: Tensor, experts: ExpertsFn, ep: ExpertParallel,
                               tokens_per_rank: int) -> Tensor:
    """Static-shape dispatch/combine (`moe_dispatch_combine` on CPU/CUDA; the semantics of MC2 dispatch_v2 /
    combine_v2 with plain all_to_all).

    Every rank sends every peer a fixed-capacity block of C = tokens_per_rank * min(K, Er) rows: token i owns
    rows [i * min(K, Er), (i + 1) * min(K, Er)) of each peer's block, and its pairs bound for that peer fill
    them in k order (a token's K experts are distinct, so at most min(K, Er) of them live on one peer).
    Each row carries its local expert id (int64, -1 for an empty row: the validity mask) in trailing columns.
    All buffer shapes depend only on N, K and ep, never on the routing, so there is no count exchange and no
    host-side split size; the price is padding bytes (C rows per peer however few are used). The receiver
    compacts the valid rows before the experts (a local boolean index, no communication; on CUDA it waits
    for the device once, and it keeps a compiled graph from capturing this op), so expert compute stays
    proportional to the pairs it received.
    """
    n, k = topk_ids.shape
    hidden = x.shape[1]
    per_token = min(k, ep.experts_per_rank)
    capacity = tokens_per_rank * per_token
    dest = torch.div(topk_ids.long(), ep.experts_per_rank, rounding_mode="floor")  # [n, K] owning EP rank
    # nth pair of token i bound for rank dest[i, j]: 0, 1, ... in k order
    nth = F.one_hot(dest, ep.size).cumsum(1).gather(2, dest[..., None]).squeeze(2) - 1
    token = torch.arange(n, device=x.device)[:, None]
    slot = (dest * capacity + token * per_token + nth).reshape(-1)  # [n*K] row in the send buffer
    send_ids = torch.full((ep.size * capacity, 1), -1, dtype=torch.int64, device=x.device)
    send_ids[slot, 0] = (topk_ids % ep.experts_per_rank).reshape(-1)
    # the ids ride as trailing columns of the row buffer (int64 bits viewed as x.dtype, copied, never
    # computed on): one all_to_all carries rows and mask
    id_columns = send_ids.view(x.dtype)
    send = x.new_zeros(ep.size * capacity, hidden + id_columns.shape[1])
    send[slot, :hidden] = x.repeat_interleave(k, dim=0)
    send[:, hidden:] = id_columns
    received = torch.empty_like(send)
    all_to_all(received, send, ep.group)
    received_ids = received[:, hidden:].contiguous().view(torch.int64).squeeze(1)
    received = received[:, :hidden]
    valid = received_ids >= 0
    out = torch.zeros_like(received)
    out[valid] = _run_local_experts(received[valid], received_ids[valid], topk_weights.dtype, gate_up, down,
                                    experts)
    back = torch.empty_like(out)
    all_to_all(back, out, ep.group)
    return _weighted_sum(back[slot].view(n, k, hidden), topk_weights)


def ep_dispatch_combine_npu(x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor],
                            down: Tensor, experts: ExpertsFn, ep: ExpertParallel,
                            tokens_per_rank: int, *, platform: str = "A3", in_graph: bool = False) -> Tensor:
    """torch_npu MC2: npu_moe_distribute_dispatch_v2 -> grouped matmul, swiglu, grouped matmul ->
    npu_moe_distribute_combine_v2 (npu_ops.md 2.14-2.16; the recipe's EP decode path, npu_recipe.md 3.3).

    Every rank passes the same static batch: its block padded to tokens_per_rank rows, the pad rows marked
    inactive in `x_active_mask` (valid rows first, as the op requires) with distinct placeholder expert ids
    and weight 0, so a rank with fewer or no tokens still joins the exchange and `global_bs` is
    tokens_per_rank * ep. The experts run as the recipe's op chain (dispatch hands back rows grouped by local
    expert with per-expert counts), so `experts` is unused. comm_alg stays the default.

    The argument contract depends on the platform (npu_ops.md 2.14-2.15): Atlas A2 has no TP domain
    (tp_world_size 0, group_tp "" eagerly or group_ep in graph mode, shared_expert_num left at its default) and
    its combine needs `expand_scales`, which dispatch produces from `expert_scales`; A3 takes the TP arguments
    vllm-ascend passes. The binder gives `platform` and `in_graph`.
    """
    import torch_npu  # NPU only

    n, k = topk_ids.shape
    pad = tokens_per_rank - n
    group = ep.dispatch_group or ep.group
    name = ep.dispatch_name
    x = F.pad(x, (0, 0, 0, pad))
    placeholder = torch.arange(k, dtype=torch.int32, device=x.device).expand(pad, k)
    ids32 = torch.cat([topk_ids.to(torch.int32), placeholder])
    scales = F.pad(topk_weights.float(), (0, 0, 0, pad))
    active = torch.arange(tokens_per_rank, device=x.device) < n
    common = dict(group_ep=name, ep_world_size=ep.size, ep_rank_id=ep.rank, moe_expert_num=ep.num_experts,
                  expert_shard_type=0, shared_expert_rank_num=0, global_bs=tokens_per_rank * ep.size)
    a2 = platform == "A2"
    if a2:
        common.update(group_tp=name if in_graph else "", tp_world_size=0, tp_rank_id=0)
    else:
        common.update(group_tp=name, tp_world_size=1, tp_rank_id=0, shared_expert_num=0)
    start = _clock()
    dispatched = torch_npu.npu_moe_distribute_dispatch_v2(
        x=x, expert_ids=ids32, x_active_mask=active, scales=None, expert_scales=scales if a2 else None,
        quant_mode=0, **common)
    expand_x, _, assist_info, expert_token_nums, ep_recv_counts, tp_recv_counts, expand_scales = dispatched
    _note("dispatch_v2", group, n * k * x.shape[1] * x.element_size(), start)

    def gmm(a: Tensor, w: Tensor) -> Tensor:
        return torch_npu.npu_grouped_matmul([a], [w.transpose(1, 2)], group_list=expert_token_nums,
                                            group_type=0, group_list_type=1, split_item=3)[0]

    w13 = gate_up[0] if len(gate_up) == 1 else torch.cat(gate_up, dim=1)
    y = gmm(torch_npu.npu_swiglu(gmm(expand_x, w13)), down)
    start = _clock()
    out = torch_npu.npu_moe_distribute_combine_v2(
        expand_x=y, expert_ids=ids32, assist_info_for_combine=assist_info, ep_send_counts=ep_recv_counts,
        expert_scales=scales, tp_send_counts=None if a2 else tp_recv_counts, x_active_mask=active,
        expand_scales=expand_scales if a2 else None, comm_quant_mode=0, **common)
    _note("combine_v2", group, n * k * out.shape[1] * out.element_size(), start)
    return out[:n]


# Device -> implementation, for the plan binder. "ref" is the unfused path each toggle replaces.
ROW_PARALLEL_LINEAR: dict[str, Callable[..., Tensor]] = {
    "ref": row_parallel_linear,
    "npu": row_parallel_linear_npu,
}
EP_EXCHANGE: dict[str, Callable[..., Tensor]] = {
    "ref": ep_double_routing,
    "cpu": ep_static_dispatch_combine,
    "cuda": ep_static_dispatch_combine,
    "npu": ep_dispatch_combine_npu,
}
