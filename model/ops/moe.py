"""MoE routing and routed experts: HF-eager reference loop, sorted grouped matmul (prefill), gathered-weight
bmm (decode), and the torch_npu routing/grouped-matmul chain; plus pure-torch references of the torch_npu ops.

Expert weights arrive as `gate_up`: a list holding either one merged [E, 2I, H] tensor (rows [0, I) gate,
[I, 2I) up: the checkpoint's `gate_up_proj` and npu_swiglu's order) or two [E, I, H] tensors (gate, up), and
`down` [E, H, I]. Every experts implementation has the signature
`(x, topk_ids, topk_weights, gate_up, down) -> y` with

    y[n] = sum_k w[n, k] * down[e] @ (silu(gate[e] @ x[n]) * (up[e] @ x[n])),   e = topk_ids[n, k]

x [N, H] and y [N, H] in x.dtype. Matmuls run in x.dtype and the weighted expert outputs are added in x.dtype,
as HF does. `experts_ref` scales each expert's output by its routing weight as HF eager does (type promotion,
then a cast to x.dtype); the sorted and gathered paths scale the activation before the down projection
instead (half the elements when I < H; equal in exact arithmetic, rounded differently in bf16).

Shape letters: N tokens, H hidden, E experts, K experts per token, I expert intermediate size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

# ----------------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------------


def route_ref(router_logits: Tensor, top_k: int) -> tuple[Tensor, Tensor]:
    """Qwen3.5 router: softmax over all E in fp32, top-k, renormalise (always), cast to the logits dtype.

    Args:
        router_logits: [N, E] in the model dtype.
        top_k: K.

    Returns:
        topk_weights [N, K] in router_logits.dtype; topk_ids [N, K] int64.
    """
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype), ids


def route_replayed(router_logits: Tensor, weights: Tensor, ids: Tensor, forced_ids: Tensor) -> tuple[Tensor, Tensor]:
    """A route op's result with the experts of `forced_ids` [N, K] (a reference's, model/replay.py).

    Where the op chose the same set of experts as the reference, its own ids and weights stand, so a fused route
    op is still checked; elsewhere the forced experts get the Qwen3.5 weights (softmax in fp32, renormalised over
    the k chosen) from this run's own router logits. No data-dependent branch: it traces into a compiled graph.
    """
    forced_ids = forced_ids.to(ids.dtype)
    same = (ids.sort(dim=-1).values == forced_ids.sort(dim=-1).values).all(dim=-1, keepdim=True)
    probs = torch.softmax(router_logits.float(), dim=-1).gather(-1, forced_ids)
    forced_weights = (probs / probs.sum(dim=-1, keepdim=True)).to(weights.dtype)
    return torch.where(same, weights, forced_weights), torch.where(same, ids, forced_ids)


def moe_gating_top_k_softmax_ref(x: Tensor, finished: Tensor | None = None, k: int = 1) -> tuple[Tensor, ...]:
    """torch_npu.npu_moe_gating_top_k_softmax semantics (npu_ops.md 2.10): softmax, top-k, no renormalisation.

    Returns y [N, K] (x.dtype), expert_idx [N, K] int32, row_idx [N, K] int32 with row_idx[i, j] = j * N + i.
    """
    if finished is not None:
        raise ValueError("moe_gating_top_k_softmax_ref models `finished=None` only")
    y, idx = torch.topk(torch.softmax(x.float(), dim=-1), k, dim=-1)
    N = x.shape[0]
    row_idx = torch.arange(N * k, dtype=torch.int32, device=x.device).view(k, N).t()
    return y.to(x.dtype), idx.to(torch.int32), row_idx


def _route_via_gating_op(router_logits: Tensor, top_k: int, gating_op: Callable[..., tuple[Tensor, ...]]
                         ) -> tuple[Tensor, Tensor]:
    # NOTE: the NPU op does not renormalise (npu_ops.md 1.6); Qwen3.5 always does.
    weights, ids, _ = gating_op(router_logits.float(), None, k=top_k)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype), ids.long()


def route_npu(router_logits: Tensor, top_k: int) -> tuple[Tensor, Tensor]:
    """torch_npu.npu_moe_gating_top_k_softmax + manual renormalisation; same contract as `route_ref`."""
    import torch_npu

    return _route_via_gating_op(router_logits, top_k, torch_npu.npu_moe_gating_top_k_softmax)


# ----------------------------------------------------------------------------------------------------
# Experts: reference (the unfused fallback of the `grouped_moe` toggle)
# ----------------------------------------------------------------------------------------------------


def _gate_up_rows(gate_up: Sequence[Tensor], e: int | Tensor) -> tuple[Tensor, ...]:
    """Expert e's weights as (merged [2I, H],) or (gate [I, H], up [I, H])."""
    return tuple(w[e] for w in gate_up)


def _swiglu_from(h: Sequence[Tensor]) -> Tensor:
    """silu(gate) * up from either one merged [.., 2I] projection or separate gate, up projections."""
    gate, up = h[0].chunk(2, dim=-1) if len(h) == 1 else h
    return F.silu(gate).mul_(up)


def experts_ref(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor
) -> Tensor:
    """Routed experts as HF eager computes them: a Python loop over the experts that were hit.

    Args:
        x: [N, H]. topk_ids: [N, K] int. topk_weights: [N, K].
        gate_up: [merged [E, 2I, H]] or [gate [E, I, H], up [E, I, H]]. down: [E, H, I].

    Returns:
        y: [N, H] in x.dtype. Each expert's tokens are gathered, projected in x.dtype, scaled by their routing
        weight and index_add'ed in x.dtype (the HF eager order, so fp32 parity with HF is at rounding level).
    """
    y = torch.zeros_like(x)
    # NOTE: host sync (.tolist()) to loop over hit experts only: the per-expert loop the toggle replaces.
    for e in torch.unique(topk_ids).tolist():
        tok, kpos = torch.where(topk_ids == e)
        xe = x[tok]
        h = [F.linear(xe, w) for w in _gate_up_rows(gate_up, e)]
        out = F.linear(_swiglu_from(h), down[e]) * topk_weights[tok, kpos, None]
        y.index_add_(0, tok, out.to(y.dtype))
    return y


# ----------------------------------------------------------------------------------------------------
# Experts: sorted grouped matmul (prefill) and gathered-weight bmm (decode); plain torch, any device
# ----------------------------------------------------------------------------------------------------


# Mean rows per expert segment (N*K/E) for which `experts_grouped_cpu` runs the gate/up GEMM with the expert
# weights as the left operand (see `_experts_sorted_grouped_mm`). `python benchmarks/expert_gemm.py` measures both
# forms: on an Intel Xeon (MKL, 2 threads) weights-left took 0.81-0.95x the time at 16-32 rows on the small and
# 35B presets' shapes (0.96-1.09x on tiny's), 1.2-1.4x at 1-4 rows, 0.91-1.14x at 8 and 1.1-1.4x at 64 or more.
WEIGHT_LEFT_ROWS = (12, 48)


def _experts_sorted_grouped_mm(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor, *,
    weights_left: bool = False,
) -> Tensor:
    N, K = topk_ids.shape
    E = down.shape[0]
    flat_ids = topk_ids.reshape(-1)
    sorted_ids, order = torch.sort(flat_ids, stable=True)
    tok = order // K
    xs = x.index_select(0, tok)                                          # [N*K, H], expert-contiguous
    # Cumulative segment ends per expert (empty experts repeat the previous end), with no host sync.
    offs = torch.searchsorted(sorted_ids, torch.arange(E, device=x.device, dtype=sorted_ids.dtype),
                              right=True).to(torch.int32)
    pair_weights = topk_weights.reshape(-1).index_select(0, order).to(x.dtype)
    if weights_left:
        # h^T = W x^T per segment: the weights stay the row-major left operand and the segment becomes the
        # GEMM's narrow side, which MKL runs faster than x W^T when segments are a few dozen rows. The
        # activation is transposed back once for the down GEMM.
        h_t = [torch._grouped_mm(w, xs.t(), offs=offs) for w in gate_up]  # [2I, N*K] or 2 x [I, N*K]
        gate, up = h_t[0].chunk(2, dim=0) if len(h_t) == 1 else h_t
        # clone, not contiguous(): a [1, I] view already counts as contiguous but its strides fail the kernel's
        # 16-byte stride check
        act = F.silu(gate).mul_(up).mul_(pair_weights).t().clone(memory_format=torch.contiguous_format)
    else:
        h = [torch._grouped_mm(xs, w.transpose(1, 2), offs=offs) for w in gate_up]
        act = _swiglu_from(h).mul_(pair_weights[:, None])
    out = torch._grouped_mm(act, down.transpose(1, 2), offs=offs)      # [N*K, H], already weighted
    return torch.zeros_like(x).index_add_(0, tok, out)


def experts_grouped_cpu(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor
) -> Tensor:
    """Prefill experts: sort the N*K (token, expert) pairs by expert, gather x once, one grouped matmul per
    projection over the contiguous expert segments, then a weighted index_add back. Contract of `experts_ref`.

    NOTE: `torch._grouped_mm` has a CPU kernel for fp32 and bf16 from torch 2.9 (checked on 2.13: exact
    against per-segment mm, empty segments fine, transposed weight views accepted, weights-left 3D x 2D
    form too). Offsets come from searchsorted on the sorted ids, so there is no host sync; the row count
    N*K is static. With a mean segment length in `WEIGHT_LEFT_ROWS` the gate/up GEMM runs weights-left (a
    choice made from the static shapes, so still no host sync).
    """
    lo, hi = WEIGHT_LEFT_ROWS
    rows = topk_ids.numel()
    return _experts_sorted_grouped_mm(x, topk_ids, topk_weights, gate_up, down,
                                      weights_left=lo * down.shape[0] <= rows <= hi * down.shape[0])


def experts_gathered_cpu(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor
) -> Tensor:
    """Decode experts: gather the selected experts' weights per (token, k) pair and run batched mat-vecs.

    Contract of `experts_ref`. Static shapes, no host sync, no data-dependent control flow, so it traces
    under torch.compile(fullgraph=True); it copies N*K experts' weights, which suits decode (small N*K), not
    prefill.
    The K partial outputs of a token are summed in x.dtype (one reduction instead of K index_adds).
    """
    N, K = topk_ids.shape
    H = x.shape[1]
    ids = topk_ids.reshape(-1)
    xs = x.unsqueeze(1).expand(N, K, H).reshape(N * K, H, 1)
    # index_select copies whole expert slabs (about 2x faster than advanced indexing here).
    h = [torch.bmm(w.index_select(0, ids), xs).squeeze(-1) for w in gate_up]   # [N*K, 2I] or 2 x [N*K, I]
    act = _swiglu_from(h).mul_(topk_weights.reshape(-1, 1).to(x.dtype))
    out = torch.bmm(down.index_select(0, ids), act.unsqueeze(-1))         # [N*K, H, 1], already weighted
    return out.view(N, K, H).sum(dim=1)


def experts_cuda(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor
) -> Tensor:
    """Prefill experts on CUDA: the sorted grouped matmul of `experts_grouped_cpu` on torch._grouped_mm's CUDA
    kernel. Contract of `experts_ref`.

    NOTE: the CUDA kernel needs SM80+, bf16 operands and 16-byte aligned strides (H and I multiples of 8).
    The plan makes grouped_moe inactive on CUDA for a model dtype other than bf16 (the loop over experts
    runs then); SM80+ and the alignment are assumed, not checked. Decode on CUDA uses
    `experts_gathered_cpu`: its static shapes suit CUDA graphs.
    """
    return _experts_sorted_grouped_mm(x, topk_ids, topk_weights, gate_up, down)


# ----------------------------------------------------------------------------------------------------
# Ascend NPU: pure-torch references of the torch_npu MoE ops, the call chain, and the NPU binding
# ----------------------------------------------------------------------------------------------------


def moe_init_routing_v2_ref(
    x: Tensor,
    expert_idx: Tensor,
    *,
    active_num: int = -1,
    expert_num: int = -1,
    drop_pad_mode: int = 0,
    expert_tokens_num_type: int = 0,
    expert_tokens_num_flag: bool = False,
    quant_mode: int = -1,
    active_expert_range: Sequence[int] = (),
    row_idx_type: int = 0,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """torch_npu.npu_moe_init_routing_v2 semantics (npu_ops.md 2.11), dropless, unquantised, gather row index.

    Args:
        x: (N, H). expert_idx: (N, K) int32.
        active_num: cap on expanded rows (<= 0: N*K). expert_num: E.
        expert_tokens_num_type: 0 cumulative counts, 1 counts. expert_tokens_num_flag: return the counts.
        active_expert_range: [start, end) of experts kept (default [0, E)).

    Returns:
        expanded_x (R, H): rows sorted by expert (stable in flat n*K+k order); the first n_valid rows are
            valid, the rest 0.
        expanded_row_idx (N*K,) int32: row of expanded_x holding flat pair n*K+k, -1 if dropped.
        counts (end - start,) int64 per expert (or cumulative), None without the flag.
        expanded_scale: None (no quantisation, no scale input).
    """
    if drop_pad_mode != 0 or quant_mode != -1 or row_idx_type != 0 or expert_tokens_num_type not in (0, 1):
        raise ValueError("moe_init_routing_v2_ref models drop_pad_mode=0, quant_mode=-1, row_idx_type=0 and "
                         f"expert_tokens_num_type 0/1; got {drop_pad_mode}, {quant_mode}, {row_idx_type}, "
                         f"{expert_tokens_num_type}")
    N, K = expert_idx.shape
    start, end = tuple(active_expert_range) or (0, expert_num)
    flat = expert_idx.reshape(-1).long()
    in_range = (flat >= start) & (flat < end)
    # Out-of-range pairs sort last and are dropped.
    order = torch.argsort(torch.where(in_range, flat, end), stable=True)
    rows = N * K if active_num <= 0 else min(active_num, N * K)
    kept = min(int(in_range.sum()), rows)
    expanded_x = x.new_zeros(rows, x.shape[1])
    expanded_x[:kept] = x[order[:kept] // K]
    row_idx = torch.full((N * K,), -1, dtype=torch.int32, device=x.device)
    row_idx[order[:kept]] = torch.arange(kept, dtype=torch.int32, device=x.device)
    counts = None
    if expert_tokens_num_flag:
        counts = torch.bincount(flat[in_range] - start, minlength=end - start).long()
        counts = counts if expert_tokens_num_type == 1 else counts.cumsum(0)
    return expanded_x, row_idx, counts, None


def grouped_matmul_ref(
    x: list[Tensor],
    weight: list[Tensor],
    *,
    bias: list[Tensor] | None = None,
    group_list: Tensor | None = None,
    split_item: int = 0,
    group_type: int | None = None,
    group_list_type: int = 0,
) -> list[Tensor]:
    """torch_npu.npu_grouped_matmul semantics (npu_ops.md 2.16), MoE form: one x (M, K), one weight (E, K, N),
    grouping along M (group_type=0), one output (split_item 2/3).

    group_list (E,) int64 holds per-group row counts (group_list_type=1) or cumulative ends (0); group g's
    rows are x[s_g:e_g] @ weight[g] (+ bias[g]). Rows past the last group are left 0. Computes in fp32,
    returns [y (M, N)] in x's dtype.
    """
    if len(x) != 1 or len(weight) != 1 or group_type != 0 or split_item not in (2, 3) or group_list is None:
        raise ValueError("grouped_matmul_ref models the MoE form only: one x, one (E, K, N) weight, "
                         "group_type=0, split_item 2 or 3, a tensor group_list")
    if group_list_type not in (0, 1):
        raise ValueError(f"grouped_matmul_ref models group_list_type 0 or 1, got {group_list_type}")
    a, w = x[0], weight[0]
    ends = (group_list.cumsum(0) if group_list_type == 1 else group_list).tolist()
    y = torch.zeros(a.shape[0], w.shape[2], dtype=torch.float32, device=a.device)
    start = 0
    for g, end in enumerate(ends):
        y[start:end] = a[start:end].float() @ w[g].float()
        if bias is not None:
            y[start:end] += bias[0][g].float()
        start = end
    return [y.to(a.dtype)]


def swiglu_ref(x: Tensor, dim: int = -1) -> Tensor:
    """torch_npu.npu_swiglu semantics (npu_ops.md 2.15): silu(first half) * second half, in fp32."""
    gate, up = x.float().chunk(2, dim=dim)
    return (F.silu(gate) * up).to(x.dtype)


def moe_finalize_routing_ref(
    expanded_permuted_rows: Tensor,
    skip1: Tensor | None,
    skip2: Tensor | None,
    bias: Tensor | None,
    scales: Tensor,
    expanded_src_to_dst_row: Tensor,
    export_for_source_row: Tensor | None,
    drop_pad_mode: int = 0,
) -> Tensor:
    """torch_npu.npu_moe_finalize_routing semantics (npu_ops.md 2.13), dropless modes 0 and 2.

    out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] * (rows[src(i, k)] + bias[expert[i, k]]), with
    src(i, k) = expanded_src_to_dst_row[k*N + i] (mode 0, column-major) or [i*K + k] (mode 2, row-major);
    src == -1 contributes 0. Computes in fp32, returns the rows' dtype, shape (N, H).
    """
    if drop_pad_mode not in (0, 2):
        raise ValueError(f"moe_finalize_routing_ref models dropless drop_pad_mode 0 or 2, "
                         f"got {drop_pad_mode}")
    N, K = scales.shape
    src = expanded_src_to_dst_row.long()
    src = src.view(K, N).t() if drop_pad_mode == 0 else src.view(N, K)
    rows = expanded_permuted_rows.float()
    picked = torch.where((src >= 0)[..., None], rows[src.clamp(min=0)], 0.0)      # (N, K, H)
    if bias is not None:
        if export_for_source_row is None:
            raise ValueError("moe_finalize_routing_ref: `bias` needs `export_for_source_row` (each row's expert)")
        picked = picked + bias.float()[export_for_source_row.long()]
    out = (scales.float()[..., None] * picked).sum(dim=1)
    for skip in (skip1, skip2):
        if skip is not None:
            out = out + skip.float()
    return out.to(expanded_permuted_rows.dtype)


def _experts_via_routing_ops(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor, *,
    init_routing: Callable[..., tuple], grouped_matmul: Callable[..., list[Tensor]],
    swiglu: Callable[..., Tensor], finalize_routing: Callable[..., Tensor],
) -> Tensor:
    """The NPU call chain with the ops passed in, so CPU tests run it on the references above.

    init_routing_v2 (sort by expert, per-expert counts) -> grouped matmul (gate_up) -> swiglu -> grouped
    matmul (down) -> finalize_routing (weighted un-permute, row-major index: drop_pad_mode=2, npu_ops.md 1.7).
    """
    N, K = topk_ids.shape
    E = down.shape[0]
    ids32 = topk_ids.to(torch.int32)
    expanded_x, expanded_row_idx, counts, _ = init_routing(
        x, ids32, active_num=N * K, expert_num=E, expert_tokens_num_type=1, expert_tokens_num_flag=True,
        quant_mode=-1, active_expert_range=[0, E],
    )

    def gmm(a: Tensor, w: Tensor) -> Tensor:
        # w is a transposed (E, K, N) view of our (E, N, K) storage, which the op accepts (npu_ops.md 2.16).
        return grouped_matmul([a], [w.transpose(1, 2)], group_list=counts, split_item=3, group_type=0,
                              group_list_type=1)[0]

    h = [gmm(expanded_x, w) for w in gate_up]
    # Separate gate/up projections are concatenated so one swiglu op (gate first) consumes them.
    act = swiglu(h[0] if len(h) == 1 else torch.cat(h, dim=-1), dim=-1)
    out = gmm(act, down)
    return finalize_routing(out, None, None, None, topk_weights.to(out.dtype), expanded_row_idx, ids32,
                            drop_pad_mode=2)


def experts_npu(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor
) -> Tensor:
    """torch_npu routed experts (npu_ops.md 2.11, 2.13, 2.15, 2.16); contract of `experts_ref`.

    Differs from the reference in where the weighting happens: finalize_routing applies the routing weights
    (cast to the rows' dtype) while un-permuting, instead of index_add per expert.
    """
    import torch_npu

    return _experts_via_routing_ops(
        x, topk_ids, topk_weights, gate_up, down,
        init_routing=torch_npu.npu_moe_init_routing_v2, grouped_matmul=torch_npu.npu_grouped_matmul,
        swiglu=torch_npu.npu_swiglu, finalize_routing=torch_npu.npu_moe_finalize_routing,
    )


def experts_gathered_graph(
    x: Tensor, topk_ids: Tensor, topk_weights: Tensor, gate_up: list[Tensor], down: Tensor
) -> Tensor:
    """Decode experts inside a compiled decode graph: the mat-vecs written as multiply + reduce over the gathered
    weights, so inductor emits one kernel that reads `w[topk_ids]` in place instead of copying the selected
    experts first (in eager this form would materialise the gather; the plan binds it only with graph_mode).
    Contract of `experts_ref`.
    """
    N, K = topk_ids.shape
    ids = topk_ids.reshape(-1)
    xs = x.repeat_interleave(K, dim=0)                                     # [N*K, H]
    h = [(w[ids] * xs[:, None, :]).sum(-1) for w in gate_up]               # [N*K, 2I] or 2 x [N*K, I]
    out = (down[ids] * _swiglu_from(h)[:, None, :]).sum(-1)                # [N*K, H]
    out = (out * topk_weights.reshape(-1, 1)).to(x.dtype)
    return out.view(N, K, -1).sum(dim=1)


# Device -> implementation, for the plan binder. The sorted and gathered paths are plain torch; decode on CUDA
# uses the gathered path because its static shapes suit CUDA graphs.
ROUTE: dict[str, Callable[[Tensor, int], tuple[Tensor, Tensor]]] = {
    "ref": route_ref,
    "cpu": route_ref,
    "cuda": route_ref,
    "npu": route_npu,
}
EXPERTS_PREFILL: dict[str, Callable[..., Tensor]] = {
    "ref": experts_ref,
    "cpu": experts_grouped_cpu,
    "cuda": experts_cuda,
    "npu": experts_npu,
}
EXPERTS_DECODE: dict[str, Callable[..., Tensor]] = {
    "ref": experts_ref,
    # eager decode: the sorted grouped matmul (no weight copies); under graph_mode: the fused gather-reduce
    "cpu": experts_grouped_cpu,
    "cpu_graph": experts_gathered_graph,
    "cuda": experts_gathered_cpu,
    "npu": experts_npu,
}
