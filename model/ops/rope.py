"""Partial rotary position embedding (toggle `fused_rope`): cos/sin tables, the reference, then NPU, CUDA, CPU.

Shapes: q [B, T, Nq, D], k [B, T, Nkv, D] (BSND, as the projections produce them), positions [B, T],
cos / sin [B, T, R] with R = rotary dim = int(D * partial_rotary_factor) (64 of 256 for Qwen3.5).

Only the first R dims of every head rotate, NeoX / rotate_half style *within that slice*: dim i pairs with
i + R/2. Dims R..D pass through unchanged. cos / sin are laid out `cat(freqs, freqs)` (HF and
`npu_rotary_mul(rotary_mode='half')` agree on this, npu_ops.md 2.1).

Implementations (chosen once by the plan):
  ref   explicit slice / rotate_half / cat in eager torch, fp32 math; the unfused fallback (the recipe's
        unused `apply_rotary_pos_emb`).
  npu   torch_npu.npu_rotary_mul(rotary_mode='half') on the 4-D rotary slices, cat with the pass-through.
  cuda  the reference math compiled by inductor (one Triton kernel per output).
  cpu   the reference math compiled by inductor (one C++ loop per output).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from model.ops.inductor import fused_call


def rope_inv_freq(rope_theta: float, rotary_dim: int) -> Tensor:
    """inv_freq [R/2] fp32 = theta^(-arange(0, R, 2) / R), HF's default rope init (attention scaling 1.0)."""
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim
    return 1.0 / (rope_theta**exponent)


def rotary_cos_sin(positions: Tensor, inv_freq: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos / sin tables for the given token positions.

    Qwen3.5's MRoPE builds freqs for three position rows (t, h, w) and interleaves them; for text-only input
    the three rows are identical, so the interleave is a no-op and this plain 1-D form is exact
    (model_hf.md 2.2).

    Args:
        positions: [B, T] integer token positions (int64).
        inv_freq: [R/2] fp32 inverse frequencies (`rope_inv_freq`).
        dtype: activation dtype; HF computes cos / sin in fp32 and casts them to it.

    Returns:
        (cos, sin), each [B, T, R] in `dtype`, = cos / sin of cat(freqs, freqs), freqs = positions * inv_freq.
    """
    freqs = positions.float()[..., None] * inv_freq.to(device=positions.device, dtype=torch.float32)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


# ---------------------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------------------


def _rotate_slice(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    # x [..., N, D]; cos / sin [..., 1, R] broadcast over heads.
    rotary_dim = cos.shape[-1]
    half = rotary_dim // 2
    x_rot = x[..., :rotary_dim].float()
    # rotate_half over the R slice: (x1, x2) -> (-x2, x1)
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    out = x_rot * cos.float() + rotated * sin.float()
    if rotary_dim == x.shape[-1]:
        return out.to(x.dtype)
    return torch.cat((out.to(x.dtype), x[..., rotary_dim:]), dim=-1)


def apply_rope_ref(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate the first R dims of every q and k head, following `npu_rotary_mul(rotary_mode='half')`.

    Args:
        q: [B, T, Nq, D] queries (after q_norm).
        k: [B, T, Nkv, D] keys (after k_norm).
        cos, sin: [B, T, R] from `rotary_cos_sin`, R = cos.shape[-1] <= D, R even.

    Returns:
        (q_out, k_out) with the shapes and dtypes of q and k:
        out[..., :R] = x_rot * cos + rotate_half(x_rot) * sin, rotate_half(x) = cat(-x[R/2:], x[:R/2]);
        out[..., R:] = x[..., R:]. Computed in fp32 and cast once (HF multiplies in the activation dtype,
        so in bf16 HF rounds more often than this reference; fp32 results are identical).
    """
    cos4, sin4 = cos.unsqueeze(2), sin.unsqueeze(2)  # [B, T, 1, R]: broadcast over heads
    return _rotate_slice(q, cos4, sin4), _rotate_slice(k, cos4, sin4)


# ---------------------------------------------------------------------------------------------------------
# NPU
# ---------------------------------------------------------------------------------------------------------


def _rotary_mul_npu(x: Tensor, cos4: Tensor, sin4: Tensor) -> Tensor:
    import torch_npu

    rotary_dim = cos4.shape[-1]
    if rotary_dim == x.shape[-1]:
        return torch_npu.npu_rotary_mul(x, cos4, sin4, rotary_mode="half")
    # NOTE: x[..., :R] is a strided BSND view; the recipe passes it as is (npu_recipe.md 1.4).
    rot = torch_npu.npu_rotary_mul(x[..., :rotary_dim], cos4, sin4, rotary_mode="half")
    return torch.cat((rot, x[..., rotary_dim:]), dim=-1)


def apply_rope_npu(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """`torch_npu.npu_rotary_mul(x_rot, cos[B,T,1,R], sin[B,T,1,R], rotary_mode='half')` on q and k.

    BSND input with BS1D cos / sin (a documented broadcast, npu_ops.md 2.1). The kernel casts cos / sin to
    x.dtype and computes in an undocumented precision.
    """
    cos4, sin4 = cos.unsqueeze(2), sin.unsqueeze(2)
    return _rotary_mul_npu(q, cos4, sin4), _rotary_mul_npu(k, cos4, sin4)


# ---------------------------------------------------------------------------------------------------------
# CPU / CUDA: inductor-compiled reference math
# ---------------------------------------------------------------------------------------------------------


def _rope_tokens(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    # q [N, Nq, D], k [N, Nkv, D], cos / sin [N, 1, R] with N = B*T tokens.
    return _rotate_slice(q, cos, sin), _rotate_slice(k, cos, sin)


def _apply_rope_compiled(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    b, t = q.shape[:2]
    # Flatten B*T so batch and length variations share one compiled kernel.
    args = (q.reshape(b * t, *q.shape[2:]), k.reshape(b * t, *k.shape[2:]),
            cos.reshape(b * t, 1, cos.shape[-1]), sin.reshape(b * t, 1, sin.shape[-1]))
    q_out, k_out = fused_call(_rope_tokens, *args)
    return q_out.view(q.shape), k_out.view(k.shape)


def apply_rope_cpu(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """`apply_rope_ref` compiled by inductor: q and k in one call, each written by one fused loop.

    NOTE: an eager call of a compiled function pays a fixed dynamo guard / wrapper overhead, so at decode
    (T=1) outside graph_mode this path is slower than the reference; it pays off on prefill-sized inputs.
    Under graph_mode the call is inlined into the decode graph and the overhead goes away.
    """
    return _apply_rope_compiled(q, k, cos, sin)


def apply_rope_cuda(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """`apply_rope_ref` compiled by inductor into Triton kernels (same source as the CPU path)."""
    return _apply_rope_compiled(q, k, cos, sin)


APPLY_ROPE: dict[str, Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]] = {
    "ref": apply_rope_ref, "cpu": apply_rope_cpu, "cuda": apply_rope_cuda, "npu": apply_rope_npu,
}
