"""Fake (meta) kernels of the emulated ops: output shapes and dtypes only, for dynamo tracing. They also check
the shape and dtype rules, so a graph that breaks one fails while it is captured."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from perfbench.emulation.npu import rules
from perfbench.emulation.npu.kernels import ASSIST_STRIDE, expand_rows


def npu_rms_norm(self: Tensor, gamma: Tensor, epsilon: float = 1e-6) -> tuple[Tensor, Tensor]:
    rules.rms_norm(self, gamma)
    rstd_shape = (*self.shape[: self.dim() - gamma.dim()], *([1] * gamma.dim()))
    return torch.empty_like(self), self.new_empty(rstd_shape, dtype=torch.float32)


def npu_add_rms_norm(x1: Tensor, x2: Tensor, gamma: Tensor, epsilon: float = 1e-6) -> tuple[Tensor, Tensor, Tensor]:
    rules.add_rms_norm(x1, x2, gamma)
    rstd_shape = (*x1.shape[: x1.dim() - gamma.dim()], *([1] * gamma.dim()))
    return torch.empty_like(x1), x1.new_empty(rstd_shape, dtype=torch.float32), torch.empty_like(x1)


def npu_rotary_mul(self: Tensor, r1: Tensor, r2: Tensor, rotary_mode: str = "half",
                   rotate: Tensor | None = None) -> Tensor:
    rules.rotary_mul(self, r1, r2, rotary_mode)
    return torch.empty_like(self, memory_format=torch.contiguous_format)


def npu_fused_infer_attention_score(query: Tensor, key: Tensor, value: Tensor, *, atten_mask: Tensor | None = None,
                                    num_heads: int = 1, input_layout: str = "BSH", num_key_value_heads: int = 0,
                                    sparse_mode: int = 0, **_: object) -> tuple[Tensor, Tensor]:
    rules.fia_v1(query, key, value, atten_mask, num_heads, input_layout, num_key_value_heads, sparse_mode)
    n_kv = num_key_value_heads or num_heads
    dv = value.shape[-1] // n_kv
    out = query.new_empty(query.shape[0], query.shape[1], num_heads * dv)
    return out, query.new_empty(1, dtype=torch.float32)


def npu_fused_infer_attention_score_v2(query: Tensor, key: Tensor, value: Tensor, *,
                                       atten_mask: Tensor | None = None, block_table: Tensor | None = None,
                                       num_query_heads: int = 1, num_key_value_heads: int = 0,
                                       input_layout: str = "BSH", sparse_mode: int = 0, block_size: int = 0,
                                       **_: object) -> tuple[Tensor, Tensor]:
    rules.fia_v2(query, key, value, atten_mask, block_table, num_query_heads, num_key_value_heads, input_layout,
                 sparse_mode, block_size)
    n_kv = num_key_value_heads or num_query_heads
    dv = value.shape[-1] if block_table is None else value.shape[-1] // n_kv
    return query.new_empty(query.shape[0], num_query_heads, dv), query.new_empty(1, dtype=torch.float32)


def scatter_update_(self: Tensor, indices: Tensor, updates: Tensor, axis: int) -> Tensor:
    rules.scatter_update(self, indices, updates, axis)
    return self


def npu_scatter_nd_update_(self: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
    rules.scatter_nd_update(self, indices, updates)
    return self


def npu_chunk_gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, **kwargs: Any
                               ) -> tuple[Tensor, Tensor]:
    """Keyword arguments as in the CPU kernel (the schema's); out shaped like value, the final state like the
    initial state."""
    rules.chunk_gdr(query, key, value, **kwargs)
    initial_state = kwargs["initial_state"]
    assert isinstance(initial_state, Tensor)  # required, checked above
    return torch.empty_like(value, memory_format=torch.contiguous_format), torch.empty_like(initial_state)


def npu_recurrent_gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, state: Tensor,
                                   **kwargs: Any) -> Tensor:
    """Keyword arguments as in the CPU kernel (the schema's); out shaped like value (state is updated in place)."""
    rules.recurrent_gdr(query, key, value, state, **kwargs)
    return torch.empty_like(value, memory_format=torch.contiguous_format)


def npu_moe_gating_top_k_softmax(x: Tensor, finished: Tensor | None = None, k: int = 1
                                 ) -> tuple[Tensor, Tensor, Tensor]:
    rules.gating_top_k_softmax(x, finished, k)
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int32), x.new_empty(shape, dtype=torch.int32)


def npu_moe_init_routing_v2(x: Tensor, expert_idx: Tensor, *, active_num: int = -1, expert_num: int = -1,
                            drop_pad_mode: int = 0, expert_tokens_num_type: int = 0,
                            expert_tokens_num_flag: bool = False, quant_mode: int = -1,
                            active_expert_range: list[int] | None = None, row_idx_type: int = 0,
                            **_: object) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    rules.init_routing_v2(x, expert_idx, drop_pad_mode, expert_tokens_num_type, expert_tokens_num_flag,
                          quant_mode, row_idx_type)
    n, k = expert_idx.shape
    rows = n * k if active_num <= 0 else min(active_num, n * k)
    start, end = tuple(active_expert_range or ()) or (0, expert_num)
    return (x.new_empty(rows, x.shape[1]), x.new_empty(n * k, dtype=torch.int32),
            x.new_empty(end - start, dtype=torch.int64), x.new_empty(0, dtype=torch.float32))


def npu_grouped_matmul(x: list[Tensor], weight: list[Tensor], *, group_list: Tensor | None = None,
                       split_item: int | None = 0, group_type: int | None = None, group_list_type: int | None = 0,
                       **_: object) -> list[Tensor]:
    rules.grouped_matmul(x, weight, group_list, split_item or 0, group_type, group_list_type or 0)
    return [x[0].new_empty(x[0].shape[0], weight[0].shape[2])]


def npu_swiglu(self: Tensor, dim: int = -1) -> Tensor:
    rules.swiglu(self, dim)
    shape = list(self.shape)
    shape[dim] //= 2
    return self.new_empty(shape)


def npu_moe_finalize_routing(expanded_permuted_rows: Tensor, skip1: Tensor | None, skip2: Tensor | None,
                             bias: Tensor | None, scales: Tensor | None, expanded_src_to_dst_row: Tensor,
                             export_for_source_row: Tensor | None, drop_pad_mode: int | None = 0,
                             k: int | None = 1) -> Tensor:
    scales = rules.finalize_routing(expanded_permuted_rows, scales, expanded_src_to_dst_row, drop_pad_mode)
    return expanded_permuted_rows.new_empty(scales.shape[0], expanded_permuted_rows.shape[1])


def npu_mm_all_reduce_base(x1: Tensor, x2: Tensor, hcom: str, *, reduce_op: str = "sum", **_: object) -> Tensor:
    rules.mm_all_reduce(x1, x2, reduce_op, 1)
    return x1.new_empty(*x1.shape[:-1], x2.shape[1])


def npu_moe_distribute_dispatch_v2(
    x: Tensor, expert_ids: Tensor, group_ep: str, ep_world_size: int, ep_rank_id: int, moe_expert_num: int, *,
    x_active_mask: Tensor | None = None, expert_scales: Tensor | None = None, group_tp: str = "",
    tp_world_size: int = 0, shared_expert_num: int = 1, quant_mode: int = 0, global_bs: int = 0, **_: object,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    op = "npu_moe_distribute_dispatch_v2"
    rules.moe_distribute_common(op, x, expert_ids, group_ep, group_tp, ep_world_size, ep_rank_id, moe_expert_num,
                                tp_world_size, shared_expert_num, x_active_mask)
    rules.dispatch_v2(x, expert_ids, x_active_mask, expert_scales, quant_mode)
    bs, k = expert_ids.shape
    a = expand_rows(bs, k, ep_world_size, moe_expert_num, global_bs)
    local = moe_expert_num // ep_world_size
    f32, i32 = torch.float32, torch.int32
    return (x.new_empty(a, x.shape[1]), x.new_empty(a, dtype=f32), x.new_empty(a * ASSIST_STRIDE, dtype=i32),
            x.new_empty(local, dtype=torch.int64), x.new_empty(ep_world_size * local, dtype=i32),
            x.new_empty(max(tp_world_size, 1), dtype=i32),
            x.new_empty(a if expert_scales is not None else 0, dtype=f32))


def npu_moe_distribute_combine_v2(
    expand_x: Tensor, expert_ids: Tensor, assist_info_for_combine: Tensor, ep_send_counts: Tensor,
    expert_scales: Tensor, group_ep: str, ep_world_size: int, ep_rank_id: int, moe_expert_num: int, *,
    x_active_mask: Tensor | None = None, expand_scales: Tensor | None = None, group_tp: str = "",
    tp_world_size: int = 0, shared_expert_num: int = 1, **_: object,
) -> Tensor:
    op = "npu_moe_distribute_combine_v2"
    rules.moe_distribute_common(op, expand_x, expert_ids, group_ep, group_tp, ep_world_size, ep_rank_id,
                                moe_expert_num, tp_world_size, shared_expert_num, x_active_mask)
    rules.combine_v2(expand_x, expert_scales, expand_scales)
    return expand_x.new_empty(expert_ids.shape[0], expand_x.shape[1])
