"""The documented input rules of each emulated torch_npu op, checked per platform.

Each rule quotes (in short) what torch_npu 2.14.0's docstring or the Ascend op-plugin doc says
(npu_ops.md section 2 has the op notes). A broken rule raises `NpuRuleError` naming the op, the rule and the
platform, as the real op would refuse the call (the real messages differ; the rule is the same).
Rules that the sources contradict each other on are not enforced (docs/npu_emulator.md lists them).

Shape and dtype rules also run in the fake (meta) kernels, so a compiled graph fails at trace time; rules on
tensor values (lengths, counts) run in the CPU kernels only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import torch
from torch import Tensor

from perfbench.emulation.npu.platforms import require_active

HALF_TYPES = (torch.float16, torch.bfloat16)
FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32)


class NpuRuleError(RuntimeError):
    """A call that breaks a documented torch_npu input rule."""


def fail(op: str, rule: str) -> NoReturn:
    raise NpuRuleError(f"{op}: {rule} [{require_active().label}]")


def series() -> str:
    return require_active().series


def _dtype(op: str, name: str, t: Tensor | None, allowed: Sequence[torch.dtype]) -> None:
    if t is not None and t.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        fail(op, f"{name} dtype must be one of {names}, got {str(t.dtype).removeprefix('torch.')}")


def _dims(op: str, name: str, t: Tensor, allowed: Sequence[int]) -> None:
    if t.dim() not in allowed:
        fail(op, f"{name} must have {' or '.join(map(str, allowed))} dims, got shape {tuple(t.shape)}")


# ---- norms, rotary ---------------------------------------------------------------------------------------


def rms_norm(x: Tensor, gamma: Tensor) -> None:
    op = "npu_rms_norm"
    _dtype(op, "self", x, FLOAT_TYPES)
    if gamma.dtype != x.dtype:  # "gamma: 数据类型需要和self保持一致" (gamma dtype must equal self's)
        fail(op, f"gamma dtype must equal self dtype (gamma {gamma.dtype}, self {x.dtype})")
    if not 1 <= gamma.dim() <= 8 or tuple(x.shape[-gamma.dim():]) != tuple(gamma.shape):
        fail(op, f"gamma shape {tuple(gamma.shape)} must be the trailing dims of self {tuple(x.shape)}")


def add_rms_norm(x1: Tensor, x2: Tensor, gamma: Tensor) -> None:
    op = "npu_add_rms_norm"
    _dtype(op, "x1", x1, FLOAT_TYPES)
    if x2.dtype != x1.dtype or gamma.dtype != x1.dtype:
        fail(op, f"x1, x2 and gamma must share one dtype (got {x1.dtype}, {x2.dtype}, {gamma.dtype})")
    if x1.shape != x2.shape:
        fail(op, f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have the same shape")
    if tuple(x1.shape[-gamma.dim():]) != tuple(gamma.shape):
        fail(op, f"gamma shape {tuple(gamma.shape)} must be the trailing dims of x1 {tuple(x1.shape)}")


def rotary_mul(x: Tensor, r1: Tensor, r2: Tensor, rotary_mode: str) -> None:
    op = "npu_rotary_mul"
    if rotary_mode not in ("half", "interleave"):
        fail(op, f"rotary_mode must be 'half' or 'interleave', got {rotary_mode!r}")
    _dims(op, "self", x, (4,))
    _dtype(op, "self", x, FLOAT_TYPES)
    d = x.shape[-1]
    if d >= 896 or d % 2:  # "D < 896，且为2的倍数"
        fail(op, f"head dim D must be even and < 896, got {d}")
    for name, r in (("r1", r1), ("r2", r2)):
        if r.dtype != x.dtype:
            fail(op, f"{name} dtype must equal self dtype ({r.dtype} vs {x.dtype})")
        if r.dim() != 4 or r.shape[-1] != d:
            fail(op, f"{name} must be 4-D with last dim {d}, got {tuple(r.shape)}")
        # BSND input takes 1S1D, BS1D or BSND cos/sin
        if r.shape[2] not in (1, x.shape[2]) or r.shape[1] != x.shape[1] or r.shape[0] not in (1, x.shape[0]):
            fail(op, f"{name} shape {tuple(r.shape)} is not 1S1D, BS1D or BSND for self {tuple(x.shape)}")


# ---- attention ---------------------------------------------------------------------------------------------


def _fia_common(op: str, query: Tensor, key: Tensor, value: Tensor, num_heads: int, num_kv_heads: int) -> None:
    # query: fp16/bf16/int8 (no fp32); key/value fp16/bf16/int8/int4; this emulator models fp16/bf16 only
    _dtype(op, "query", query, HALF_TYPES)
    _dtype(op, "key", key, HALF_TYPES)
    _dtype(op, "value", value, HALF_TYPES)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        fail(op, f"query, key and value must share one dtype (got {query.dtype}, {key.dtype}, {value.dtype})")
    if not value.is_contiguous():  # "value: 不支持非连续的Tensor"
        fail(op, "value must be contiguous (non-contiguous tensors are not supported)")
    if num_kv_heads and num_heads % num_kv_heads:
        fail(op, f"num heads {num_heads} must be a multiple of num_key_value_heads {num_kv_heads}")


def _mask(op: str, atten_mask: Tensor | None, sparse_mode: int) -> None:
    if sparse_mode not in (0, 2, 3, 4):
        fail(op, f"the emulator models sparse_mode 0, 2, 3 and 4, got {sparse_mode}")
    if sparse_mode in (2, 3, 4):
        if atten_mask is None:
            fail(op, f"sparse_mode {sparse_mode} needs the compressed atten_mask")
        elif tuple(atten_mask.shape[-2:]) != (2048, 2048) or any(s != 1 for s in atten_mask.shape[:-2]):
            # "sparse_mode为2、3、4时，shape输入支持(2048,2048)或(1,2048,2048)或(1,1,2048,2048)"
            fail(op, f"sparse_mode {sparse_mode} takes a (2048, 2048) atten_mask, got {tuple(atten_mask.shape)}")
    if atten_mask is not None and atten_mask.dtype not in (torch.bool, torch.int8, torch.uint8):
        fail(op, f"atten_mask dtype must be bool, int8 or uint8, got {atten_mask.dtype}")


def fia_v1(query: Tensor, key: Tensor, value: Tensor, atten_mask: Tensor | None, num_heads: int,
           input_layout: str, num_key_value_heads: int, sparse_mode: int) -> None:
    op = "npu_fused_infer_attention_score"
    _fia_common(op, query, key, value, num_heads, num_key_value_heads)
    if input_layout != "BSH":
        fail(op, f"the emulator models input_layout BSH for this op, got {input_layout!r}")
    _dims(op, "query", query, (3,))
    if query.shape[-1] % num_heads:
        fail(op, f"query hidden {query.shape[-1]} is not a multiple of num_heads {num_heads}")
    d = query.shape[-1] // num_heads
    if d > 512:
        fail(op, f"head dim must be <= 512, got {d}")
    _mask(op, atten_mask, sparse_mode)


def fia_v2(query: Tensor, key: Tensor, value: Tensor, atten_mask: Tensor | None, block_table: Tensor | None,
           num_query_heads: int, num_key_value_heads: int, input_layout: str, sparse_mode: int,
           block_size: int) -> None:
    op = "npu_fused_infer_attention_score_v2"
    _fia_common(op, query, key, value, num_query_heads, num_key_value_heads)
    if input_layout != "TND":
        fail(op, f"the emulator models input_layout TND for this op, got {input_layout!r}")
    _dims(op, "query", query, (3,))
    if query.dtype != torch.bfloat16:  # TND: "数据类型仅支持BFLOAT16"
        fail(op, f"TND layout supports bfloat16 only, got {query.dtype}")
    qd = query.shape[-1]
    if block_table is None:
        kd, vd = key.shape[-1], value.shape[-1]
    else:
        n_kv = num_key_value_heads or num_query_heads
        kd, vd = key.shape[-1] // n_kv, value.shape[-1] // n_kv
        if block_size <= 0 or key.dim() != 3 or key.shape[1] != block_size:
            fail(op, f"paged key/value must be (blocknum, block_size={block_size}, H), got {tuple(key.shape)}")
        if block_table.dtype != torch.int32:
            fail(op, f"block_table dtype must be int32, got {block_table.dtype}")
    # "TND场景，要求Q_D、K_D、V_D等于128，或者Q_D、K_D等于192，V_D等于128/192"
    if not ((qd == kd == vd == 128) or (qd == kd == 192 and vd in (128, 192))):
        fail(op, f"TND head dims must be Q_D=K_D=V_D=128, or Q_D=K_D=192 with V_D 128/192; got "
                 f"Q_D={qd}, K_D={kd}, V_D={vd}")
    _mask(op, atten_mask, sparse_mode)


def fia_lengths(op: str, name: str, lengths: Sequence[int] | None, batch: int, limit: int,
                cumulative: bool) -> None:
    """Per-batch (or cumulative, TND) lengths: non-negative, not above the tensor's sequence length."""
    if lengths is None:
        return
    values = list(lengths)
    if any(v < 0 for v in values):
        fail(op, f"{name} must be non-negative, got {values}")
    if cumulative:
        if any(b < a for a, b in zip(values, values[1:])):
            fail(op, f"{name} is cumulative in TND and must not decrease, got {values}")
        if values and values[-1] != limit:
            fail(op, f"{name} must end at the token count {limit} in TND, got {values}")
    else:
        if len(values) not in (1,) and len(values) < batch:
            fail(op, f"{name} needs 1 or at least batch={batch} entries, got {len(values)}")
        if any(v > limit for v in values):
            fail(op, f"{name} entries must be <= the sequence length {limit}, got {values}")


# ---- KV cache writes --------------------------------------------------------------------------------------


def scatter_update(data: Tensor, indices: Tensor, updates: Tensor, axis: int) -> None:
    op = "scatter_update_"
    if not 2 <= data.dim() <= 8 or data.dim() != updates.dim():
        fail(op, f"data must have 2-8 dims, as many as updates (data {tuple(data.shape)}, updates "
                 f"{tuple(updates.shape)})")
    _dtype(op, "indices", indices, (torch.int32, torch.int64))
    if indices.dim() != 1:
        fail(op, f"the emulator models 1-D indices (one start offset per row), got shape {tuple(indices.shape)}")
    if indices.numel() == 0 or data.numel() == 0:
        fail(op, "empty tensors are not supported")
    if updates.dtype != data.dtype:
        fail(op, f"updates dtype must equal data dtype ({updates.dtype} vs {data.dtype})")
    if axis not in (-2, data.dim() - 2):
        fail(op, f"the emulator models axis -2 (the sequence axis), got {axis}")
    if indices.shape[0] != data.shape[0] or updates.shape[0] != data.shape[0] or \
            updates.shape[-1] != data.shape[-1]:
        fail(op, f"indices {tuple(indices.shape)} / updates {tuple(updates.shape)} do not match data "
                 f"{tuple(data.shape)}")


def scatter_nd_update(data: Tensor, indices: Tensor, updates: Tensor) -> None:
    op = "npu_scatter_nd_update_"
    _dtype(op, "indices", indices, (torch.int32, torch.int64))
    a = indices.shape[-1]
    expected = tuple(indices.shape[:-1]) + tuple(data.shape[a:])
    if tuple(updates.shape) != expected:  # updates = indices.shape[:-1] + data.shape[a:]
        fail(op, f"updates shape must be {expected} for indices {tuple(indices.shape)} and self "
                 f"{tuple(data.shape)}, got {tuple(updates.shape)}")
    if updates.dtype != data.dtype:
        fail(op, f"updates dtype must equal self dtype ({updates.dtype} vs {data.dtype})")


# ---- gated delta rule ---------------------------------------------------------------------------------------


def chunk_gdr(query: Tensor, key: Tensor, value: Tensor, *, beta: Tensor | None = None,
              initial_state: Tensor | None = None, actual_seq_lengths: Tensor | None = None, g: Tensor | None = None,
              **unchecked: object) -> None:
    """The op's shape and dtype rules; takes its arguments as the schema names them (`scale` has no rule)."""
    op = "npu_chunk_gated_delta_rule"
    for name, t in (("query", query), ("key", key), ("value", value), ("beta", beta),
                    ("initial_state", initial_state)):
        _dtype(op, name, t, (torch.bfloat16,))
    _dtype(op, "g", g, (torch.float32,))
    if initial_state is None or actual_seq_lengths is None or beta is None:
        fail(op, "beta, initial_state and actual_seq_lengths are required")
    _dtype(op, "actual_seq_lengths", actual_seq_lengths, (torch.int32,))
    _dims(op, "query", query, (3,))
    nk, dk, nv, dv = query.shape[1], query.shape[2], value.shape[1], value.shape[2]
    # "Nk <= 64, Nv <= 64, Dk = 128, Dv = 128, Nv 是 Nk 整数倍"
    if dk != 128 or dv != 128:
        fail(op, f"head dims must be Dk = Dv = 128, got Dk={dk}, Dv={dv}")
    if nk > 64 or nv > 64 or nv % nk:
        fail(op, f"heads must satisfy Nk <= 64, Nv <= 64 and Nv a multiple of Nk, got Nk={nk}, Nv={nv}")
    b = actual_seq_lengths.shape[0]
    if tuple(initial_state.shape) != (b, nv, dv, dk):
        fail(op, f"initial_state must be (B, Nv, Dv, Dk) = {(b, nv, dv, dk)}, got {tuple(initial_state.shape)}")


def chunk_gdr_lengths(actual_seq_lengths: Tensor, tokens: int) -> None:
    total = int(actual_seq_lengths.sum())
    if total != tokens:
        fail("npu_chunk_gated_delta_rule", f"actual_seq_lengths (per sequence) must sum to the token count "
                                           f"{tokens}, got {total}")


def recurrent_gdr(query: Tensor, key: Tensor, value: Tensor, state: Tensor, *, beta: Tensor | None = None,
                  actual_seq_lengths: Tensor | None = None, ssm_state_indices: Tensor | None = None,
                  g: Tensor | None = None, gk: Tensor | None = None, **unchecked: object) -> None:
    """The op's shape and dtype rules; takes its arguments as the schema names them (`scale` and
    `num_accepted_tokens` have no rule)."""
    op = "npu_recurrent_gated_delta_rule"
    for name, t in (("query", query), ("key", key), ("value", value), ("beta", beta), ("state", state)):
        _dtype(op, name, t, (torch.bfloat16,))
    _dtype(op, "g", g, (torch.float32,))
    if gk is not None:
        fail(op, "the emulator models gk=None (no per-key decay)")
    if actual_seq_lengths is None or ssm_state_indices is None or beta is None:
        fail(op, "beta, actual_seq_lengths and ssm_state_indices are required")
    _dtype(op, "actual_seq_lengths", actual_seq_lengths, (torch.int32,))
    _dtype(op, "ssm_state_indices", ssm_state_indices, (torch.int32,))
    nk, dk, nv, dv = query.shape[1], query.shape[2], value.shape[1], value.shape[2]
    if max(nk, nv, dk, dv) > 256:  # "N_k <= 256，N_v <= 256，D_k <= 256，D_v <= 256"
        fail(op, f"Nk, Nv, Dk, Dv must be <= 256, got {nk}, {nv}, {dk}, {dv}")
    if nv % nk:
        fail(op, f"Nv {nv} must be a multiple of Nk {nk}")
    if ssm_state_indices.shape != (query.shape[0],):
        fail(op, f"ssm_state_indices must be (T,) = ({query.shape[0]},), got {tuple(ssm_state_indices.shape)}")
    if state.dim() != 4 or tuple(state.shape[1:]) != (nv, dv, dk):
        fail(op, f"state must be (BlockNum, Nv, Dv, Dk) with Nv={nv}, Dv={dv}, Dk={dk}, got {tuple(state.shape)}")


# ---- MoE ---------------------------------------------------------------------------------------------------


def gating_top_k_softmax(x: Tensor, finished: Tensor | None, k: int) -> None:
    op = "npu_moe_gating_top_k_softmax"
    _dtype(op, "x", x, FLOAT_TYPES)
    if not 0 < k <= min(x.shape[-1], 1024):  # "0<k<=x的-1轴大小, k<=1024"
        fail(op, f"k must satisfy 0 < k <= min(x.shape[-1], 1024) = {min(x.shape[-1], 1024)}, got {k}")
    if finished is not None:
        fail(op, "the emulator models finished=None")


def init_routing_v2(x: Tensor, expert_idx: Tensor, drop_pad_mode: int, expert_tokens_num_type: int,
                    expert_tokens_num_flag: bool, quant_mode: int, row_idx_type: int) -> None:
    op = "npu_moe_init_routing_v2"
    _dims(op, "x", x, (2,))
    _dtype(op, "expert_idx", expert_idx, (torch.int32,))
    if expert_idx.dim() != 2 or expert_idx.shape[0] != x.shape[0]:
        fail(op, f"expert_idx must be (N, K) with N = {x.shape[0]}, got {tuple(expert_idx.shape)}")
    if expert_tokens_num_type not in (1, 2):  # "当前仅支持1和2"
        fail(op, f"expert_tokens_num_type must be 1 or 2 (documented as the only supported values), got "
                 f"{expert_tokens_num_type}")
    if expert_tokens_num_type == 2:
        fail(op, "the emulator models expert_tokens_num_type 1 (count mode)")
    if not expert_tokens_num_flag:  # "当前仅支持True"
        fail(op, "expert_tokens_num_flag must be True (documented as the only supported value)")
    if drop_pad_mode != 0 or quant_mode != -1 or row_idx_type != 0:
        fail(op, f"the emulator models drop_pad_mode=0, quant_mode=-1, row_idx_type=0; got {drop_pad_mode}, "
                 f"{quant_mode}, {row_idx_type}")


def grouped_matmul(x: Sequence[Tensor], weight: Sequence[Tensor], group_list: Tensor | None, split_item: int,
                   group_type: int | None, group_list_type: int) -> None:
    op = "npu_grouped_matmul"
    if group_type != 0 or len(x) != 1 or len(weight) != 1:
        fail(op, "the emulator models group_type=0 with one x and one weight tensor")
    if split_item not in (2, 3):  # group_type 0: "仅支持split_item为2或3"
        fail(op, f"group_type 0 supports split_item 2 or 3 only, got {split_item}")
    a, w = x[0], weight[0]
    _dims(op, "x[0]", a, (2,))
    _dims(op, "weight[0]", w, (3,))
    if not a.is_contiguous():  # "x不支持转置"
        fail(op, "x must not be transposed (contiguous)")
    if w.shape[1] != a.shape[1]:
        fail(op, f"weight[0] (E, K, N) needs K = x's last dim {a.shape[1]}, got {tuple(w.shape)}")
    if group_list is None:  # "必须传group_list"
        fail(op, "group_list is required with group_type 0")
    elif group_list.dim() != 1 or group_list.shape[0] != w.shape[0] or group_list.shape[0] > 1024:
        fail(op, f"group_list must be (E,) with E = {w.shape[0]} <= 1024 groups, got {tuple(group_list.shape)}")
    elif group_list_type == 1 and group_list.shape[0] == 1:  # "当group_list_type为1时 ... 长度不能为1"
        fail(op, "with group_list_type 1 the group_list length must not be 1")
    if group_list_type not in (0, 1):
        fail(op, f"the emulator models group_list_type 0 or 1, got {group_list_type}")


def grouped_matmul_counts(group_list: Tensor, group_list_type: int, rows: int) -> None:
    """Counts non-negative and ending within x. NOTE: the doc asks the total to equal x's rows; MC2 callers
    (the project, vllm-ascend) pass a padded expand_x with fewer counted rows, so <= is enforced."""
    op = "npu_grouped_matmul"
    values = group_list.tolist()
    if group_list_type == 1:
        if any(v < 0 for v in values):
            fail(op, f"group_list (counts) must be non-negative, got {values}")
        end = sum(values)
    else:
        if any(b < a for a, b in zip(values, values[1:])):
            fail(op, f"group_list (cumulative) must not decrease, got {values}")
        end = values[-1] if values else 0
    if end > rows:
        fail(op, f"group_list covers {end} rows but x has {rows}")


def swiglu(x: Tensor, dim: int) -> None:
    op = "npu_swiglu"
    _dtype(op, "x", x, FLOAT_TYPES)
    if not 1 <= x.dim() <= 8 or x.shape[dim] % 2:
        fail(op, f"x must have 1-8 dims and an even size along dim {dim}, got {tuple(x.shape)}")


def finalize_routing(rows: Tensor, scales: Tensor | None, src_to_dst: Tensor, drop_pad_mode: int | None) -> Tensor:
    """The op's rules; returns `scales`, which the emulator requires."""
    op = "npu_moe_finalize_routing"
    if drop_pad_mode not in (0, 2):
        fail(op, f"the emulator models the dropless drop_pad_mode 0 and 2, got {drop_pad_mode}")
    if scales is None:
        fail(op, "the emulator models calls with scales")
    if scales.dtype != rows.dtype:  # "数据类型要求与expanded_permuted_rows一致"
        fail(op, f"scales dtype must equal expanded_permuted_rows dtype ({scales.dtype} vs {rows.dtype})")
    elif scales.dim() != 2 or src_to_dst.numel() != scales.numel():
        fail(op, f"scales must be (NUM_ROWS, K) matching expanded_src_to_dst_row ({src_to_dst.numel()}), got "
                 f"{tuple(scales.shape)}")
    return scales


# ---- communication (MC2) ------------------------------------------------------------------------------------


def mm_all_reduce(x1: Tensor, x2: Tensor, reduce_op: str, world_size: int) -> None:
    op = "npu_mm_all_reduce_base"
    if reduce_op != "sum":
        fail(op, f"reduce_op must be 'sum', got {reduce_op!r}")
    if world_size not in (1, 2, 4, 8):  # "支持1、2、4、8卡"
        fail(op, f"the communicator must have 1, 2, 4 or 8 ranks, got {world_size}")
    _dims(op, "x1", x1, (2, 3))
    if not x1.is_contiguous():  # "x1不支持输入转置后的tensor"
        fail(op, "x1 must not be transposed (contiguous)")
    if x2.dim() != 2 or x2.shape[0] != x1.shape[-1]:
        fail(op, f"x2 must be 2-D with first dim = x1's last dim {x1.shape[-1]}, got {tuple(x2.shape)}")
    _dtype(op, "x1", x1, HALF_TYPES)
    if x2.dtype != x1.dtype:
        fail(op, f"x2 dtype must equal x1 dtype ({x2.dtype} vs {x1.dtype})")


def moe_distribute_common(op: str, x_or_expand: Tensor, expert_ids: Tensor, group_ep: str, group_tp: str,
                          ep_world_size: int, ep_rank_id: int, moe_expert_num: int, tp_world_size: int,
                          shared_expert_num: int, x_active_mask: Tensor | None) -> None:
    _dtype(op, "expert_ids", expert_ids, (torch.int32,))
    if expert_ids.dim() != 2:
        fail(op, f"expert_ids must be (BS, K), got {tuple(expert_ids.shape)}")
    if not 0 < expert_ids.shape[1] <= 16:  # "K: 0<K≤16"
        fail(op, f"K must satisfy 0 < K <= 16, got {expert_ids.shape[1]}")
    if not 0 <= ep_rank_id < ep_world_size or moe_expert_num % ep_world_size:
        fail(op, f"ep_rank_id {ep_rank_id} must be in [0, {ep_world_size}) and moe_expert_num {moe_expert_num} "
                 f"a multiple of ep_world_size")
    if x_active_mask is not None and (x_active_mask.dtype != torch.bool or x_active_mask.dim() != 1):
        fail(op, f"x_active_mask must be a 1-D bool tensor, got {x_active_mask.dtype} {tuple(x_active_mask.shape)}")
    if series() == "A2":
        if tp_world_size != 0:  # "Atlas A2: 不支持TP域通信，使用默认值0即可"
            fail(op, f"Atlas A2 has no TP domain: tp_world_size must be the default 0, got {tp_world_size}")
        if shared_expert_num != 1:  # "Atlas A2: 暂不支持该参数，使用默认值即可" (default 1)
            fail(op, f"Atlas A2 does not support shared_expert_num: leave the default 1, got {shared_expert_num}")
        if group_tp not in ("", group_ep):  # eager: default ""; graph mode: the same name as group_ep
            fail(op, "Atlas A2: group_tp must be the default '' (or equal group_ep in graph mode)")
    elif series() == "A3":
        h = x_or_expand.shape[-1]
        if not 1024 <= h <= 8192:  # "H (A3): 取值为[1024, 8192]"
            fail(op, f"Atlas A3 needs hidden size H in [1024, 8192], got {h}")
        if tp_world_size not in (0, 1, 2):
            fail(op, f"Atlas A3: tp_world_size must be in [0, 2], got {tp_world_size}")
        if not 0 <= shared_expert_num <= 4:
            fail(op, f"Atlas A3: shared_expert_num must be in [0, 4], got {shared_expert_num}")
    else:
        fail(op, f"MC2 dispatch/combine v2 are documented for Atlas A2 and A3, not for {series()}")


def dispatch_v2(x: Tensor, expert_ids: Tensor, x_active_mask: Tensor | None, expert_scales: Tensor | None,
                quant_mode: int) -> None:
    op = "npu_moe_distribute_dispatch_v2"
    _dims(op, "x", x, (2,))
    _dtype(op, "x", x, HALF_TYPES)
    if expert_ids.shape[0] != x.shape[0]:
        fail(op, f"expert_ids rows {expert_ids.shape[0]} must equal x rows {x.shape[0]}")
    if x_active_mask is not None and x_active_mask.shape[0] != x.shape[0]:
        fail(op, f"x_active_mask must be (BS,) = ({x.shape[0]},), got {tuple(x_active_mask.shape)}")
    if quant_mode != 0:
        fail(op, f"the emulator models quant_mode 0 (no quantisation), got {quant_mode}")
    if series() == "A2":
        # A2: expert_scales (BS, K) fp32 feeds the expand_scales output that combine_v2 requires on A2
        if expert_scales is None:
            fail(op, "Atlas A2 needs expert_scales (BS, K) float32: combine_v2 requires the expand_scales "
                     "output it produces")
    if expert_scales is not None and (expert_scales.dtype != torch.float32
                                      or tuple(expert_scales.shape) != tuple(expert_ids.shape)):
        fail(op, f"expert_scales must be (BS, K) float32, got {expert_scales.dtype} {tuple(expert_scales.shape)}")


def active_mask_values(op: str, x_active_mask: Tensor) -> None:
    mask = x_active_mask.tolist()
    if any(b and not a for a, b in zip(mask, mask[1:])):  # "true必须排到false之前"
        fail(op, "x_active_mask: every True must come before every False")


def combine_v2(expand_x: Tensor, expert_scales: Tensor, expand_scales: Tensor | None) -> None:
    op = "npu_moe_distribute_combine_v2"
    _dims(op, "expand_x", expand_x, (2,))
    _dtype(op, "expand_x", expand_x, HALF_TYPES)
    _dtype(op, "expert_scales", expert_scales, (torch.float32,))
    if series() == "A2":
        if expand_scales is None:  # "Atlas A2: 必选参数 ... shape为(A, )，数据类型支持float32"
            fail(op, "Atlas A2 requires expand_scales (the dispatch_v2 output from expert_scales)")
        elif expand_scales.dtype != torch.float32 or tuple(expand_scales.shape) != (expand_x.shape[0],):
            fail(op, f"expand_scales must be (A,) = ({expand_x.shape[0]},) float32, got {expand_scales.dtype} "
                     f"{tuple(expand_scales.shape)}")
