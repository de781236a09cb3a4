"""CPU implementations of the emulated torch_npu ops: the documented semantics, in fp32, cast to the op's
output dtype. Where the model already has a pure-torch reference of an op (model/ops/*_ref) it is reused.

Each kernel checks the op's rules (perfbench.emulation.npu.rules) first. Argument names follow the op schemas
(schemas.yaml), so torch.library can call these with the schema's keywords.
"""

from __future__ import annotations

import torch
from torch import Tensor

from model.ops.gdn import chunk_gated_delta_rule_ref, recurrent_gated_delta_rule_ref
from model.ops.moe import (
    grouped_matmul_ref,
    moe_finalize_routing_ref,
    moe_gating_top_k_softmax_ref,
    moe_init_routing_v2_ref,
    swiglu_ref,
)
from perfbench.emulation.npu import hccl, rules

# ---- norms, rotary ---------------------------------------------------------------------------------------


def _rms(x: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def npu_rms_norm(self: Tensor, gamma: Tensor, epsilon: float = 1e-6) -> tuple[Tensor, Tensor]:
    """y = x * rsqrt(mean(x^2) + eps) * gamma over gamma's trailing dims; rstd fp32 (npu_ops.md 2.2)."""
    rules.rms_norm(self, gamma)
    return _rms(self, gamma, epsilon)


def npu_add_rms_norm(x1: Tensor, x2: Tensor, gamma: Tensor, epsilon: float = 1e-6
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """(rms_norm(x1 + x2), rstd, x1 + x2) (npu_ops.md 2.3)."""
    rules.add_rms_norm(x1, x2, gamma)
    x = (x1.float() + x2.float()).to(x1.dtype)
    y, rstd = _rms(x, gamma, epsilon)
    return y, rstd, x


def npu_rotary_mul(self: Tensor, r1: Tensor, r2: Tensor, rotary_mode: str = "half",
                   rotate: Tensor | None = None) -> Tensor:
    """x * cos + rotate(x) * sin; 'half' rotates (x1, x2) -> (-x2, x1), 'interleave' pairs (npu_ops.md 2.1)."""
    rules.rotary_mul(self, r1, r2, rotary_mode)
    xf = self.float()
    if rotary_mode == "half":
        x1, x2 = xf.chunk(2, dim=-1)
        rotated = torch.cat((-x2, x1), dim=-1)
    else:
        pairs = xf.unflatten(-1, (-1, 2))
        rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return (xf * r1.float() + rotated * r2.float()).to(self.dtype)


# ---- attention ---------------------------------------------------------------------------------------------


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float, causal_offset: int | None) -> Tensor:
    """q [Sq, Nq, D], k/v [Skv, Nkv, D] of one sequence -> [Sq, Nq, Dv] fp32. causal_offset: query i sees
    keys j <= i + offset (sparse_mode 3, right-down causal), None: all keys."""
    rep = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(rep, dim=1)
    vf = v.float().repeat_interleave(rep, dim=1)
    scores = torch.einsum("qnd,knd->nqk", q.float(), kf) * scale
    if causal_offset is not None:
        qi = torch.arange(q.shape[0])[:, None]
        kj = torch.arange(k.shape[0])[None, :]
        scores = scores.masked_fill(kj > qi + causal_offset, float("-inf"))
    probs = torch.nan_to_num(scores.softmax(dim=-1))  # a fully masked row gives 0, not NaN
    return torch.einsum("nqk,knd->qnd", probs, vf)


def _lens(values: list[int] | None, batch: int, default: int) -> list[int]:
    if values is None:
        return [default] * batch
    return [values[0]] * batch if len(values) == 1 else list(values[:batch])


def _softmax_lse_placeholder(query: Tensor) -> Tensor:
    # softmax_lse_flag / return_softmax_lse False: the second output carries no data
    return query.new_zeros(1, dtype=torch.float32)


def npu_fused_infer_attention_score(
    query: Tensor, key: Tensor, value: Tensor, *, pse_shift: Tensor | None = None,
    atten_mask: Tensor | None = None, actual_seq_lengths: list[int] | None = None,
    actual_seq_lengths_kv: list[int] | None = None, num_heads: int = 1, scale: float = 1.0,
    input_layout: str = "BSH", num_key_value_heads: int = 0, sparse_mode: int = 0, pre_tokens: int = 2147483647,
    next_tokens: int = 2147483647, **unmodelled: object,
) -> tuple[Tensor, Tensor]:
    """FIA v1, BSH (npu_ops.md 2.4): per batch, the first actual_seq_lengths[b] queries attend the first
    actual_seq_lengths_kv[b] keys (right-down causal with sparse_mode 3); rows past the length are 0."""
    op = "npu_fused_infer_attention_score"
    _unmodelled(op, pse_shift=pse_shift, **unmodelled)
    _band(op, sparse_mode, pre_tokens, next_tokens)
    rules.fia_v1(query, key, value, atten_mask, num_heads, input_layout, num_key_value_heads, sparse_mode)
    b, sq, _ = query.shape
    skv = key.shape[1]
    n_kv = num_key_value_heads or num_heads
    d = query.shape[-1] // num_heads
    rules.fia_lengths(op, "actual_seq_lengths", actual_seq_lengths, b, sq, cumulative=False)
    rules.fia_lengths(op, "actual_seq_lengths_kv", actual_seq_lengths_kv, b, skv, cumulative=False)
    q_lens = _lens(actual_seq_lengths, b, sq) if sq > 1 else [1] * b
    kv_lens = _lens(actual_seq_lengths_kv, b, skv)
    q4, k4 = query.view(b, sq, num_heads, d), key.view(b, skv, n_kv, d)
    v4 = value.view(b, skv, n_kv, value.shape[-1] // n_kv)
    out = query.new_zeros(b, sq, num_heads, v4.shape[-1], dtype=torch.float32)
    for i in range(b):
        ql, kl = q_lens[i], kv_lens[i]
        offset = kl - ql if sparse_mode in (2, 3, 4) else None
        out[i, :ql] = _attend(q4[i, :ql], k4[i, :kl], v4[i, :kl], scale, offset)
    return out.flatten(2).to(query.dtype), _softmax_lse_placeholder(query)


def npu_fused_infer_attention_score_v2(
    query: Tensor, key: Tensor, value: Tensor, *, atten_mask: Tensor | None = None,
    actual_seq_qlen: list[int] | None = None, actual_seq_kvlen: list[int] | None = None,
    block_table: Tensor | None = None, num_query_heads: int = 1, num_key_value_heads: int = 0,
    softmax_scale: float = 1.0, input_layout: str = "BSH", sparse_mode: int = 0, block_size: int = 0,
    pre_tokens: int = 2147483647, next_tokens: int = 2147483647, **unmodelled: object,
) -> tuple[Tensor, Tensor]:
    """FIA v2, TND (npu_ops.md 2.4, 1.1): cumulative actual_seq_qlen; actual_seq_kvlen cumulative without
    paging, per request with a block_table (K/V as (blocknum, block_size, Nkv*D))."""
    op = "npu_fused_infer_attention_score_v2"
    _unmodelled(op, **unmodelled)
    _band(op, sparse_mode, pre_tokens, next_tokens)
    rules.fia_v2(query, key, value, atten_mask, block_table, num_query_heads, num_key_value_heads, input_layout,
                 sparse_mode, block_size)
    if actual_seq_qlen is None or actual_seq_kvlen is None:
        rules.fail(op, "TND needs actual_seq_qlen and actual_seq_kvlen")
    t = query.shape[0]
    n_kv = num_key_value_heads or num_query_heads
    rules.fia_lengths(op, "actual_seq_qlen", actual_seq_qlen, len(actual_seq_qlen), t, cumulative=True)
    q_ends = list(actual_seq_qlen)
    q_starts = [0, *q_ends[:-1]]
    if block_table is None:
        rules.fia_lengths(op, "actual_seq_kvlen", actual_seq_kvlen, len(q_ends), key.shape[0], cumulative=True)
        kv_ends = list(actual_seq_kvlen)
        kv_starts = [0, *kv_ends[:-1]]
        seqs = [(key[s:e], value[s:e]) for s, e in zip(kv_starts, kv_ends)]
    else:
        seqs = []
        d_k, d_v = key.shape[-1] // n_kv, value.shape[-1] // n_kv
        capacity = block_table.shape[1] * block_size
        rules.fia_lengths(op, "actual_seq_kvlen", actual_seq_kvlen, len(q_ends), capacity, cumulative=False)
        for i, kl in enumerate(_lens(list(actual_seq_kvlen), len(q_ends), capacity)):
            blocks = block_table[i].long()
            k_seq = key[blocks].reshape(-1, n_kv, d_k)[:kl]
            v_seq = value[blocks].reshape(-1, n_kv, d_v)[:kl]
            seqs.append((k_seq, v_seq))
    out = query.new_zeros(t, num_query_heads, seqs[0][1].shape[-1] if seqs else query.shape[-1],
                          dtype=torch.float32)
    for (qs, qe), (k_seq, v_seq) in zip(zip(q_starts, q_ends), seqs):
        offset = k_seq.shape[0] - (qe - qs) if sparse_mode in (2, 3, 4) else None
        out[qs:qe] = _attend(query[qs:qe], k_seq, v_seq, softmax_scale, offset)
    return out.to(query.dtype), _softmax_lse_placeholder(query)


def _band(op: str, sparse_mode: int, pre_tokens: int, next_tokens: int) -> None:
    # sparse_mode 1, 2, 3 ignore pre_tokens / next_tokens (documented); a band with mode 0 is not modelled
    if sparse_mode == 0:
        _unmodelled(op, pre_tokens=pre_tokens, next_tokens=next_tokens)


def _unmodelled(op: str, **args: object) -> None:
    """Arguments outside what the emulator models (quantisation, pse, shared prefixes...) must be unset."""
    from perfbench.emulation.npu.schemas import default_of

    for name, value in args.items():
        if value is not None and value != default_of(op, name):
            rules.fail(op, f"the emulator does not model argument {name}={value!r}")


# ---- KV cache writes --------------------------------------------------------------------------------------


def scatter_update_(self: Tensor, indices: Tensor, updates: Tensor, axis: int) -> Tensor:
    """data[b, indices[b] + j] = updates[b, j] along `axis` (-2), per row b (npu_ops.md 2.5c)."""
    rules.scatter_update(self, indices, updates, axis)
    t = updates.shape[-2]
    starts = indices.tolist()
    if any(s < 0 or s + t > self.shape[-2] for s in starts):
        rules.fail("scatter_update_", f"indices {starts} + {t} updates run past the axis size {self.shape[-2]}")
    rows = torch.arange(self.shape[0])[:, None]
    cols = indices.long()[:, None] + torch.arange(t)
    self[rows, cols] = updates
    return self


def npu_scatter_nd_update_(self: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
    """self[indices[i]] = updates[i], indices' last dim addressing self's leading dims (npu_ops.md 2.5a)."""
    rules.scatter_nd_update(self, indices, updates)
    index = tuple(indices.long().unbind(-1))
    if any(bool((ix < 0).any()) or bool((ix >= self.shape[d]).any()) for d, ix in enumerate(index)):
        rules.fail("npu_scatter_nd_update_", "indices out of range of self")
    self[index] = updates
    return self


# ---- gated delta rule -------------------------------------------------------------------------------------


def npu_chunk_gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, *, beta: Tensor | None = None,
                               initial_state: Tensor | None = None, actual_seq_lengths: Tensor | None = None,
                               scale: float | None = None, g: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """npu_ops.md 2.6: TND packed sequences with per-sequence lengths; state (B, Nv, Dv, Dk)."""
    rules.chunk_gdr(query, key, value, beta=beta, initial_state=initial_state,
                    actual_seq_lengths=actual_seq_lengths, g=g)
    assert actual_seq_lengths is not None and initial_state is not None and beta is not None  # checked above
    rules.chunk_gdr_lengths(actual_seq_lengths, query.shape[0])
    gate = g if g is not None else torch.zeros(beta.shape, dtype=torch.float32)
    return chunk_gated_delta_rule_ref(query, key, value, beta=beta, initial_state=initial_state,
                                      actual_seq_lengths=actual_seq_lengths,
                                      scale=query.shape[-1] ** -0.5 if scale is None else scale, g=gate)


def npu_recurrent_gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, state: Tensor, *,
                                   beta: Tensor | None = None, scale: float | None = None,
                                   actual_seq_lengths: Tensor | None = None,
                                   ssm_state_indices: Tensor | None = None,
                                   num_accepted_tokens: Tensor | None = None, g: Tensor | None = None,
                                   gk: Tensor | None = None) -> Tensor:
    """npu_ops.md 2.7: one recurrence per token, state slots by ssm_state_indices, `state` updated in place."""
    rules.recurrent_gdr(query, key, value, state, beta=beta, actual_seq_lengths=actual_seq_lengths,
                        ssm_state_indices=ssm_state_indices, g=g, gk=gk)
    assert beta is not None and actual_seq_lengths is not None and ssm_state_indices is not None  # checked above
    return recurrent_gated_delta_rule_ref(query, key, value, state, beta=beta,
                                          scale=query.shape[-1] ** -0.5 if scale is None else scale,
                                          actual_seq_lengths=actual_seq_lengths,
                                          ssm_state_indices=ssm_state_indices,
                                          num_accepted_tokens=num_accepted_tokens, g=g)


# ---- MoE ---------------------------------------------------------------------------------------------------


def npu_moe_gating_top_k_softmax(x: Tensor, finished: Tensor | None = None, k: int = 1
                                 ) -> tuple[Tensor, Tensor, Tensor]:
    rules.gating_top_k_softmax(x, finished, k)
    y, ids, row_idx = moe_gating_top_k_softmax_ref(x, finished, k)
    return y, ids, row_idx


def npu_moe_init_routing_v2(x: Tensor, expert_idx: Tensor, *, scale: Tensor | None = None,
                            offset: Tensor | None = None, active_num: int = -1, expert_capacity: int = -1,
                            expert_num: int = -1, drop_pad_mode: int = 0, expert_tokens_num_type: int = 0,
                            expert_tokens_num_flag: bool = False, quant_mode: int = -1,
                            active_expert_range: list[int] | None = None, row_idx_type: int = 0,
                            x_dtype: int | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    op = "npu_moe_init_routing_v2"
    _unmodelled(op, scale=scale, offset=offset, expert_capacity=expert_capacity, x_dtype=x_dtype)
    rules.init_routing_v2(x, expert_idx, drop_pad_mode, expert_tokens_num_type, expert_tokens_num_flag,
                          quant_mode, row_idx_type)
    expanded_x, row_idx, counts, _ = moe_init_routing_v2_ref(
        x, expert_idx, active_num=active_num, expert_num=expert_num, drop_pad_mode=drop_pad_mode,
        expert_tokens_num_type=expert_tokens_num_type, expert_tokens_num_flag=expert_tokens_num_flag,
        quant_mode=quant_mode, active_expert_range=tuple(active_expert_range or ()), row_idx_type=row_idx_type)
    assert counts is not None  # expert_tokens_num_flag is required True
    # quant_mode -1: no expanded_scale is produced; the emulator returns an empty fp32 tensor in its place
    return expanded_x, row_idx, counts, x.new_empty(0, dtype=torch.float32)


def npu_grouped_matmul(x: list[Tensor], weight: list[Tensor], *, bias: list[Tensor] | None = None,
                       group_list: Tensor | None = None, split_item: int | None = 0,
                       group_type: int | None = None, group_list_type: int | None = 0,
                       **unmodelled: object) -> list[Tensor]:
    op = "npu_grouped_matmul"
    _unmodelled(op, **unmodelled)
    rules.grouped_matmul(x, weight, group_list, split_item or 0, group_type, group_list_type or 0)
    assert group_list is not None
    rules.grouped_matmul_counts(group_list, group_list_type or 0, x[0].shape[0])
    return grouped_matmul_ref(x, weight, bias=bias, group_list=group_list, split_item=split_item or 0,
                              group_type=group_type, group_list_type=group_list_type or 0)


def npu_swiglu(self: Tensor, dim: int = -1) -> Tensor:
    rules.swiglu(self, dim)
    return swiglu_ref(self, dim)


def npu_moe_finalize_routing(expanded_permuted_rows: Tensor, skip1: Tensor | None, skip2: Tensor | None,
                             bias: Tensor | None, scales: Tensor | None, expanded_src_to_dst_row: Tensor,
                             export_for_source_row: Tensor | None, drop_pad_mode: int | None = 0,
                             k: int | None = 1) -> Tensor:
    scales = rules.finalize_routing(expanded_permuted_rows, scales, expanded_src_to_dst_row, drop_pad_mode)
    return moe_finalize_routing_ref(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                                    export_for_source_row, drop_pad_mode=drop_pad_mode or 0)


# ---- communication (MC2 on the emulated HCCL) ------------------------------------------------------------


def npu_mm_all_reduce_base(x1: Tensor, x2: Tensor, hcom: str, *, reduce_op: str = "sum",
                           bias: Tensor | None = None, **unmodelled: object) -> Tensor:
    """y = x1 @ x2 (+ bias), summed over the communicator `hcom` (npu_ops.md 2.9)."""
    op = "npu_mm_all_reduce_base"
    _unmodelled(op, **unmodelled)
    group = hccl.group_of(hcom, op)
    import torch.distributed as dist

    rules.mm_all_reduce(x1, x2, reduce_op, dist.get_world_size(group))
    y = x1.float() @ x2.float()
    if bias is not None:
        y = y + bias.float()
    # each rank's product is rounded to the output dtype before the sum, as a matmul then all_reduce would be
    y = y.to(x1.dtype).float()
    dist.all_reduce(y, group=group)
    return y.to(x1.dtype)


def expand_rows(bs: int, k: int, ep_world_size: int, moe_expert_num: int, global_bs: int) -> int:
    """A, the rows of dispatch_v2's expand_x: global_bs * min(local experts, K) (the documented minimum)."""
    local = moe_expert_num // ep_world_size
    return (global_bs or bs * ep_world_size) * min(local, k)


ASSIST_STRIDE = 128  # assist_info_for_combine is (A * 128,) int32; row r's (source rank, token, k) sit at r*128


def npu_moe_distribute_dispatch_v2(
    x: Tensor, expert_ids: Tensor, group_ep: str, ep_world_size: int, ep_rank_id: int, moe_expert_num: int, *,
    scales: Tensor | None = None, x_active_mask: Tensor | None = None, expert_scales: Tensor | None = None,
    group_tp: str = "", tp_world_size: int = 0, tp_rank_id: int = 0, expert_shard_type: int = 0,
    shared_expert_num: int = 1, shared_expert_rank_num: int = 0, quant_mode: int = 0, global_bs: int = 0,
    expert_token_nums_type: int = 1, comm_alg: str = "", **unmodelled: object,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """MC2 dispatch (npu_ops.md 2.14): every active (token, k) pair goes to the rank owning its expert.

    Returns (expand_x (A, H) rows grouped by local expert, then source rank, token, k; dynamic_scales (A,)
    fp32 (0: no quantisation); assist_info_for_combine (A*128,) int32; expert_token_nums (local experts,)
    int64; ep_recv_counts (ep * local experts,) int32; tp_recv_counts (max(tp, 1),) int32; expand_scales (A,)
    fp32, each row's expert_scales weight (0 rows without expert_scales)).
    """
    op = "npu_moe_distribute_dispatch_v2"
    _unmodelled(op, scales=scales, **unmodelled)
    rules.moe_distribute_common(op, x, expert_ids, group_ep, group_tp, ep_world_size, ep_rank_id, moe_expert_num,
                                tp_world_size, shared_expert_num, x_active_mask)
    rules.dispatch_v2(x, expert_ids, x_active_mask, expert_scales, quant_mode)
    group = hccl.group_of(group_ep, op, ep_world_size, ep_rank_id)
    bs, k = expert_ids.shape
    active = x_active_mask if x_active_mask is not None else torch.ones(bs, dtype=torch.bool)
    rules.active_mask_values(op, active)
    weights = expert_scales if expert_scales is not None else torch.zeros(bs, k)
    everyone = hccl.all_gather_rows(group, [x, expert_ids, active, weights])
    local = moe_expert_num // ep_world_size
    first = ep_rank_id * local
    a = expand_rows(bs, k, ep_world_size, moe_expert_num, global_bs)
    rows: list[tuple[int, int, int, int]] = []  # (local expert, source rank, token, k)
    for src, (_, ids, act, _) in enumerate(everyone):
        for token in range(bs):
            if not bool(act[token]):
                continue
            for j in range(k):
                e = int(ids[token, j])
                if first <= e < first + local:
                    rows.append((e - first, src, token, j))
    rows.sort()
    if len(rows) > a:
        rules.fail(op, f"{len(rows)} rows arrive but expand_x holds A = {a}; raise global_bs")
    expand_x = x.new_zeros(a, x.shape[1])
    expand_scales = torch.zeros(a if expert_scales is not None else 0, dtype=torch.float32)
    assist = torch.zeros(a * ASSIST_STRIDE, dtype=torch.int32)
    ep_recv = torch.zeros(ep_world_size * local, dtype=torch.int32)
    for r, (e, src, token, j) in enumerate(rows):
        expand_x[r] = everyone[src][0][token]
        if expert_scales is not None:
            expand_scales[r] = everyone[src][3][token, j]
        assist[r * ASSIST_STRIDE: r * ASSIST_STRIDE + 3] = torch.tensor([src, token, j], dtype=torch.int32)
        ep_recv[e * ep_world_size + src] += 1
    counts = torch.bincount(torch.tensor([e for e, *_ in rows], dtype=torch.long), minlength=local)
    tp_recv = torch.zeros(max(tp_world_size, 1), dtype=torch.int32)
    tp_recv[0] = len(rows)
    dynamic_scales = torch.zeros(a, dtype=torch.float32)
    return expand_x, dynamic_scales, assist, counts, ep_recv, tp_recv, expand_scales


def npu_moe_distribute_combine_v2(
    expand_x: Tensor, expert_ids: Tensor, assist_info_for_combine: Tensor, ep_send_counts: Tensor,
    expert_scales: Tensor, group_ep: str, ep_world_size: int, ep_rank_id: int, moe_expert_num: int, *,
    tp_send_counts: Tensor | None = None, x_active_mask: Tensor | None = None, expand_scales: Tensor | None = None,
    group_tp: str = "", tp_world_size: int = 0, tp_rank_id: int = 0, expert_shard_type: int = 0,
    shared_expert_num: int = 1, shared_expert_rank_num: int = 0, global_bs: int = 0, comm_quant_mode: int = 0,
    comm_alg: str = "", **unmodelled: object,
) -> Tensor:
    """MC2 combine (npu_ops.md 2.14): each expert output row returns to its source token, weighted by the
    token's expert_scales[token, k]; out (BS, H) in expand_x's dtype, inactive tokens 0."""
    op = "npu_moe_distribute_combine_v2"
    _unmodelled(op, **unmodelled)
    rules.moe_distribute_common(op, expand_x, expert_ids, group_ep, group_tp, ep_world_size, ep_rank_id,
                                moe_expert_num, tp_world_size, shared_expert_num, x_active_mask)
    rules.combine_v2(expand_x, expert_scales, expand_scales)
    if comm_quant_mode != 0:
        rules.fail(op, f"the emulator models comm_quant_mode 0, got {comm_quant_mode}")
    group = hccl.group_of(group_ep, op, ep_world_size, ep_rank_id)
    bs, k = expert_ids.shape
    received = int(ep_send_counts.sum())
    info = assist_info_for_combine.view(-1, ASSIST_STRIDE)[:, :3]
    everyone = hccl.all_gather_rows(group, [expand_x, info, torch.tensor([received])])
    out = torch.zeros(bs, expand_x.shape[1], dtype=torch.float32)
    for rows, infos, n in everyone:
        for r in range(int(n[0])):
            src, token, j = (int(v) for v in infos[r])
            if src == ep_rank_id:
                out[token] += expert_scales[token, j] * rows[r].float()
    if x_active_mask is not None:
        out[~x_active_mask] = 0
    return out.to(expand_x.dtype)


