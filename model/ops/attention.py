"""Full attention over a BSND KV cache (toggle `fused_attention`): references, then NPU, CUDA and CPU.

Shapes: q [B, T, Nq, D]; fresh k, v [B, T, Nkv, D]; KV cache k_cache, v_cache [B, S, Nkv, D] (BSND,
viewed as BSH [B, S, Nkv*D] by FIA v1), preallocated with S = max prompt + max new tokens. GQA: query head
h reads kv head h // (Nq / Nkv). Prompts are right-padded: seq_lens [B] valid tokens per row.

Ops (one signature each, output in q.dtype):
  attention_prefill(q, k, v, seq_lens, scale) -> o [B, T, Nq, D]   causal within each prompt
  attention_decode(q, k_cache, v_cache, kv_lens, scale) -> o [B, 1, Nq, D]   keys at >= kv_lens[b] masked
  write_kv(k_cache, v_cache, k, v, positions) -> None   in place, rows b at positions[b] .. positions[b]+T-1

Implementations (chosen once by the plan; `model/optimizations.py::npu_attention_variant` picks the NPU one):
  ref      repeat_kv + q@k^T*scale + mask + fp32 softmax + @v (the recipe's removed eager_attention_forward).
  cpu      F.scaled_dot_product_attention (ATen's flash-attention CPU kernel: tiled online softmax, no
           [T, S] score tensor, no repeat_kv copy).
  cuda     the same SDPA call (flash / memory-efficient kernels).
  npu      FIA v1 `npu_fused_infer_attention_score`, BSH, contiguous cache (recipe HEAD, npu_recipe.md 1.4).
  npu_tnd  FIA v2 `npu_fused_infer_attention_score_v2`, TND; decode reads the cache as paged KV with block
           size 128 (npu_ops.md 2.4). CANN rejects TND for head_dim outside {64, 128, 192} (npu_ops.md 1.3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

# FIA paged-KV block size used by the recipe and vllm-ascend (npu_ops.md 2.4).
NPU_BLOCK_SIZE = 128


def _repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    # [B, S, Nkv, D] -> [B, S, Nkv*n_rep, D]; head h = kv_head * n_rep + r, so h // n_rep is its kv head.
    if n_rep == 1:
        return x
    b, s, n_kv, d = x.shape
    return x[:, :, :, None, :].expand(b, s, n_kv, n_rep, d).reshape(b, s, n_kv * n_rep, d)


def _valid_keys(lens: Tensor, s: int) -> Tensor:
    # [B, S] bool, True where position < lens[b]; tensor ops only, so it traces with static shapes.
    return torch.arange(s, device=lens.device) < lens[:, None]


# ---------------------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------------------


def attention_prefill_ref(q: Tensor, k: Tensor, v: Tensor, seq_lens: Tensor, scale: float) -> Tensor:
    """Causal GQA attention of each right-padded prompt over its own fresh K/V.

    Follows FIA with sparse_mode=3 (right-down causal) and q_len = kv_len = seq_lens[b], which for a prompt
    without cached prefix is plain causal: key j is visible to query i iff j <= i.

    Args:
        q: [B, T, Nq, D] queries after q_norm and RoPE.
        k, v: [B, T, Nkv, D] fresh keys (after k_norm and RoPE) and values; Nq % Nkv == 0.
        seq_lens: [B] int valid tokens per row. Not needed by the math: a valid query i < seq_lens[b] only
            sees keys j <= i, which are all valid, so padding never leaks into valid rows.
        scale: softmax scale, head_dim ** -0.5 for Qwen3.5.

    Returns:
        o [B, T, Nq, D] in q.dtype; fp32 scores, softmax and weighted sum, cast once. Rows at padded
        positions (i >= seq_lens[b]) are unspecified but finite (here: attention over j <= i).
    """
    del seq_lens  # see Args: causal masking alone is exact for valid rows
    t, n_rep = q.shape[1], q.shape[2] // k.shape[2]
    qf = q.float().transpose(1, 2)  # [B, Nq, T, D]
    kf = _repeat_kv(k.float(), n_rep).transpose(1, 2)
    vf = _repeat_kv(v.float(), n_rep).transpose(1, 2)
    scores = (qf @ kf.transpose(-1, -2)) * scale  # [B, Nq, T, T]
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return (scores.softmax(dim=-1) @ vf).transpose(1, 2).to(q.dtype)


def attention_decode_ref(q: Tensor, k_cache: Tensor, v_cache: Tensor, kv_lens: Tensor, scale: float) -> Tensor:
    """One query token per sequence over the KV cache, following FIA decode with actual_seq_lengths_kv.

    Args:
        q: [B, 1, Nq, D] the new token's queries.
        k_cache, v_cache: [B, S, Nkv, D] caches already holding the new token's K/V.
        kv_lens: [B] int tensor, valid cache positions per row including the new token (>= 1).
        scale: softmax scale.

    Returns:
        o [B, 1, Nq, D] in q.dtype, fp32 math. Keys at positions >= kv_lens[b] get -inf scores. Static
        shapes and no host sync, so it runs under torch.compile(fullgraph=True, dynamic=False).
    """
    n_rep = q.shape[2] // k_cache.shape[2]
    qf = q.float().transpose(1, 2)  # [B, Nq, 1, D]
    kf = _repeat_kv(k_cache.float(), n_rep).transpose(1, 2)  # [B, Nq, S, D]
    vf = _repeat_kv(v_cache.float(), n_rep).transpose(1, 2)
    scores = (qf @ kf.transpose(-1, -2)) * scale  # [B, Nq, 1, S]
    beyond = ~_valid_keys(kv_lens, k_cache.shape[1])[:, None, None, :]
    scores = scores.masked_fill(beyond, float("-inf"))
    return (scores.softmax(dim=-1) @ vf).transpose(1, 2).to(q.dtype)


def write_kv_ref(k_cache: Tensor, v_cache: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> None:
    """Write new K/V into the caches in place, following `torch_npu.scatter_update_(cache, positions, k, -2)`.

    Args:
        k_cache, v_cache: [B, S, Nkv, D] caches, written in place.
        k, v: [B, T, Nkv, D] new keys / values, in the caches' dtype.
        positions: [B] int start offset per row (prefill: zeros; decode: kv_len before the step);
            positions[b] + T must be <= S.

    One `index_put_` per cache with [B, T] row/column indices: no host sync, traceable with static shapes.
    This is also the CPU / CUDA implementation: the write is a single scatter kernel already and there is
    no fused alternative to switch to.
    """
    b, t = k.shape[:2]
    rows = torch.arange(b, device=k.device)[:, None]  # [B, 1]
    cols = positions.to(torch.long)[:, None] + torch.arange(t, device=k.device)  # [B, T]
    k_cache.index_put_((rows, cols), k)
    v_cache.index_put_((rows, cols), v)


# ---------------------------------------------------------------------------------------------------------
# CPU / CUDA: scaled_dot_product_attention
# ---------------------------------------------------------------------------------------------------------


def attention_prefill_cpu(q: Tensor, k: Tensor, v: Tensor, seq_lens: Tensor, scale: float) -> Tensor:
    """SDPA with is_causal=True on [B, N, T, D] views and enable_gqa (kv heads are not copied).

    No padding mask is needed: with right padding, causal masking alone keeps every valid query away from
    padded keys (see `attention_prefill_ref`), and every padded row still sees key 0, so no row is fully
    masked and nothing turns NaN. The output comes back contiguous in BSND.
    """
    del seq_lens
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True, scale=scale, enable_gqa=q.shape[2] != k.shape[2])
    return o.transpose(1, 2)


def attention_decode_cpu(q: Tensor, k_cache: Tensor, v_cache: Tensor, kv_lens: Tensor, scale: float) -> Tensor:
    """SDPA with GQA folded into the query length: q [B, 1, Nq, D] -> [B, Nkv, G, D], G = Nq / Nkv.

    The G query heads of a kv group become G query rows of one attention over that kv head, so one SDPA
    call covers all heads with the cache read once per kv head, no repeat_kv copy and no GQA broadcast.
    The cache is passed as a transposed [B, Nkv, S, D] view (no copy); the boolean mask [B, 1, 1, S]
    drops positions >= kv_lens[b].
    NOTE: chosen by measurement (2-core Xeon, 2 threads, S=512, Nq 16 / Nkv 2 / D 256, min of 11 runs):
    folded 0.17 / 0.55 ms vs SDPA enable_gqa 0.36 / 1.39 ms in fp32 at B=1 / 4, 0.16 / 0.41 vs
    0.15 / 0.69 ms in bf16. With G=2 and D=64 the two are within ~30% either way.
    """
    b, _, n_q, d = q.shape
    n_kv = k_cache.shape[2]
    mask = _valid_keys(kv_lens, k_cache.shape[1])[:, None, None, :]
    o = F.scaled_dot_product_attention(q.reshape(b, n_kv, n_q // n_kv, d), k_cache.transpose(1, 2),
                                       v_cache.transpose(1, 2), attn_mask=mask, scale=scale)
    return o.reshape(b, 1, n_q, d)


def attention_prefill_cuda(q: Tensor, k: Tensor, v: Tensor, seq_lens: Tensor, scale: float) -> Tensor:
    """Same SDPA call as the CPU path; on CUDA it dispatches to the flash kernel (causal, native GQA)."""
    return attention_prefill_cpu(q, k, v, seq_lens, scale)


def attention_decode_cuda(q: Tensor, k_cache: Tensor, v_cache: Tensor, kv_lens: Tensor, scale: float) -> Tensor:
    """Same folded-GQA SDPA call as the CPU path (memory-efficient kernel on CUDA, as it takes a mask)."""
    return attention_decode_cpu(q, k_cache, v_cache, kv_lens, scale)


# ---------------------------------------------------------------------------------------------------------
# NPU: npu_fused_infer_attention_score (v1, BSH) and _v2 (TND)
# ---------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _compressed_causal_mask(device: torch.device) -> Tensor:
    # sparse_mode 2/3/4 take one fixed 2048x2048 mask, True = masked (npu_ops.md 1.2); it is never written,
    # so one per device is kept instead of rebuilding 4 MiB per layer per prefill.
    return torch.ones(2048, 2048, dtype=torch.bool, device=device).triu(1)


def bind_decode_fia(fn: Callable[..., Tensor], *, v2: bool, ge_graph: bool) -> Callable[..., Tensor]:
    """`fn` (an NPU decode attention) with its FIA op resolved now, at build time, never inside a traced step.

    In a torchair GE graph FIA goes through torchair.ops, which takes the sequence lengths as Tensors (no host
    sync, not baked into the graph) and runs only in GE; otherwise torch.ops.npu, which takes host int lists
    (npu_ops.md 2.4, 4; the recipe's `torchair.ops if exe_mode == "ge_graph" else torch.ops.npu`). Importing
    torchair inside the traced step fails: after `import torch_npu` it is a lazy stand-in, not a module.
    """
    name = "npu_fused_infer_attention_score_v2" if v2 else "npu_fused_infer_attention_score"
    if ge_graph:
        import torchair  # NPU only, outside any trace

        return functools.partial(fn, fia=getattr(torchair.ops, name), tensor_lengths=True)
    import torch_npu  # noqa: F401 - registers torch.ops.npu

    return functools.partial(fn, fia=getattr(torch.ops.npu, name), tensor_lengths=False)


def attention_prefill_npu(q: Tensor, k: Tensor, v: Tensor, seq_lens: Tensor, scale: float) -> Tensor:
    """FIA v1, BSH, right-down causal (sparse_mode=3, compressed mask, next_tokens=0), per-row lengths.

    Prefill always runs eagerly (recipe), so the lengths go to the op as a host list.
    """
    import torch_npu  # noqa: F401 - registers torch.ops.npu

    b, t, n_q, d = q.shape
    n_kv = k.shape[2]
    lens = seq_lens.tolist()
    # FIA refuses a non-contiguous value; with merged projections v is a strided slice of the fused GEMM
    out, _ = torch.ops.npu.npu_fused_infer_attention_score(
        q.reshape(b, t, n_q * d), k.reshape(b, t, n_kv * d), v.reshape(b, t, n_kv * d).contiguous(),
        num_heads=n_q, num_key_value_heads=n_kv, input_layout="BSH", scale=scale,
        atten_mask=_compressed_causal_mask(q.device), sparse_mode=3, next_tokens=0,
        actual_seq_lengths=lens, actual_seq_lengths_kv=lens)
    return out.view(b, t, n_q, d)


def attention_prefill_npu_tnd(q: Tensor, k: Tensor, v: Tensor, seq_lens: Tensor, scale: float) -> Tensor:
    """FIA v2, TND: the valid tokens packed back to back, cumulative q/kv lengths, sparse_mode=3.

    K/V are TND tensors (no paging), so actual_seq_kvlen is cumulative like actual_seq_qlen (npu_ops.md
    1.1). Rows at padded positions come back as zeros.
    """
    import torch_npu

    b, t, n_q, d = q.shape
    valid = _valid_keys(seq_lens, t)  # [B, T]
    cu_lens = torch.cumsum(seq_lens, 0).tolist()
    out, _ = torch_npu.npu_fused_infer_attention_score_v2(
        q[valid], k[valid], v[valid], num_query_heads=n_q, num_key_value_heads=k.shape[2],
        softmax_scale=scale, input_layout="TND", sparse_mode=3, atten_mask=_compressed_causal_mask(q.device),
        actual_seq_qlen=cu_lens, actual_seq_kvlen=cu_lens)
    o = q.new_zeros(b, t, n_q, d)
    o[valid] = out
    return o


def attention_decode_npu(q: Tensor, k_cache: Tensor, v_cache: Tensor, kv_lens: Tensor, scale: float, *,
                         fia: Callable[..., Any] | None = None, tensor_lengths: bool = False) -> Tensor:
    """FIA v1, BSH over the contiguous cache, actual_seq_lengths_kv = kv_lens, no mask (recipe HEAD).

    `fia` and `tensor_lengths` come from `bind_decode_fia`; the defaults are the eager op with host lists.
    """
    if fia is None:
        import torch_npu  # noqa: F401 - registers torch.ops.npu

        fia = torch.ops.npu.npu_fused_infer_attention_score
    b, _, n_q, d = q.shape
    s, n_kv = k_cache.shape[1], k_cache.shape[2]
    lens: Any = kv_lens.to(torch.int64) if tensor_lengths else kv_lens.tolist()
    out, _ = fia(q.reshape(b, 1, n_q * d), k_cache.view(b, s, n_kv * d), v_cache.view(b, s, n_kv * d),
                 num_heads=n_q, num_key_value_heads=n_kv, input_layout="BSH", scale=scale,
                 actual_seq_lengths_kv=lens)
    return out.view(b, 1, n_q, d)


def _check_paged(s: int) -> None:
    if s % NPU_BLOCK_SIZE:
        raise ValueError(f"the TND attention path reads the KV cache as {NPU_BLOCK_SIZE}-token blocks, so the "
                         f"cache length must be a multiple of {NPU_BLOCK_SIZE}, got {s}; round it up when "
                         f"allocating the cache")


def attention_decode_npu_tnd(q: Tensor, k_cache: Tensor, v_cache: Tensor, kv_lens: Tensor, scale: float, *,
                             fia: Callable[..., Any] | None = None, tensor_lengths: bool = False) -> Tensor:
    """FIA v2, TND query, paged KV (npu_ops.md 2.4).

    The contiguous cache [B, S, Nkv, D] is exactly a paged cache of B * S/128 blocks [128, Nkv*D] whose
    block table row b is b*S/128 + arange(S/128), so no copy is needed. One query token per request:
    actual_seq_qlen = cumsum(ones(B)) (cumulative); with paging actual_seq_kvlen is per request (not
    cumulative). Needs S % 128 == 0. `fia` and `tensor_lengths` as in `attention_decode_npu`.
    """
    if fia is None:
        import torch_npu  # noqa: F401 - registers torch.ops.npu

        fia = torch.ops.npu.npu_fused_infer_attention_score_v2
    b, _, n_q, d = q.shape
    s, n_kv = k_cache.shape[1], k_cache.shape[2]
    _check_paged(s)
    blocks = s // NPU_BLOCK_SIZE
    block_table = torch.arange(b * blocks, dtype=torch.int32, device=q.device).view(b, blocks)
    if tensor_lengths:
        q_lens: Any = torch.arange(1, b + 1, dtype=torch.int64, device=q.device)
        kv: Any = kv_lens.to(torch.int64)
    else:
        q_lens, kv = list(range(1, b + 1)), kv_lens.tolist()
    paged = (b * blocks, NPU_BLOCK_SIZE, n_kv * d)
    out, _ = fia(q.reshape(b, n_q, d), k_cache.view(paged), v_cache.view(paged), num_query_heads=n_q,
                 num_key_value_heads=n_kv, softmax_scale=scale, input_layout="TND", sparse_mode=0,
                 actual_seq_qlen=q_lens, actual_seq_kvlen=kv, block_table=block_table,
                 block_size=NPU_BLOCK_SIZE)
    return out.view(b, 1, n_q, d)


def write_kv_npu(k_cache: Tensor, v_cache: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> None:
    """`torch_npu.scatter_update_` on the BSH views, per-row start offsets (recipe HEAD, npu_ops.md 2.5c)."""
    import torch_npu

    b, s, n_kv, d = k_cache.shape
    t = k.shape[1]
    starts = positions.to(torch.int64)
    torch_npu.scatter_update_(k_cache.view(b, s, n_kv * d), starts, k.reshape(b, t, n_kv * d), -2)
    torch_npu.scatter_update_(v_cache.view(b, s, n_kv * d), starts, v.reshape(b, t, n_kv * d), -2)


def write_kv_npu_tnd(k_cache: Tensor, v_cache: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> None:
    """Paged slot write `npu_scatter_nd_update_(cache.view(-1, Nkv, D), slots, k)` (npu_ops.md 2.5a).

    slot = b*S + positions[b] + t addresses the same memory as block b*S/128 + (pos // 128), offset
    pos % 128 of the paged view `attention_decode_npu_tnd` reads.
    """
    import torch_npu

    b, s, n_kv, d = k_cache.shape
    t = k.shape[1]
    slots = (torch.arange(b, device=k.device)[:, None] * s + positions.to(torch.int64)[:, None]
             + torch.arange(t, device=k.device)).reshape(-1, 1)
    torch_npu.npu_scatter_nd_update_(k_cache.view(b * s, n_kv, d), slots, k.reshape(b * t, n_kv, d))
    torch_npu.npu_scatter_nd_update_(v_cache.view(b * s, n_kv, d), slots, v.reshape(b * t, n_kv, d))


# ---------------------------------------------------------------------------------------------------------
# Device -> implementation ("npu" = FIA v1 BSH, "npu_tnd" = FIA v2 TND; the plan picks by head_dim)
# ---------------------------------------------------------------------------------------------------------

ATTENTION_PREFILL: dict[str, Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]] = {
    "ref": attention_prefill_ref, "cpu": attention_prefill_cpu, "cuda": attention_prefill_cuda,
    "npu": attention_prefill_npu, "npu_tnd": attention_prefill_npu_tnd,
}
ATTENTION_DECODE: dict[str, Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]] = {
    "ref": attention_decode_ref, "cpu": attention_decode_cpu, "cuda": attention_decode_cuda,
    "npu": attention_decode_npu, "npu_tnd": attention_decode_npu_tnd,
}
# CPU and CUDA write with the reference's single index_put_ (see write_kv_ref).
WRITE_KV: dict[str, Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], None]] = {
    "ref": write_kv_ref, "cpu": write_kv_ref, "cuda": write_kv_ref, "npu": write_kv_npu,
    "npu_tnd": write_kv_npu_tnd,
}
