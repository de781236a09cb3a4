"""RMSNorm family (toggle `fused_rmsnorm`): references first, then the NPU, CUDA and CPU implementations.

Shapes: x, residual, gate [..., H] (any leading dims, e.g. [B, T, H] or per head [B, T, N, D]);
gamma, weight [H]. Every implementation returns tensors in x.dtype.

Weight convention. Qwen3.5's main norms (input/post-attention/final, q_norm, k_norm) are zero-centred: HF
computes `x * rsqrt(mean(x^2) + eps) * (1 + w)`. `torch_npu.npu_rms_norm` / `npu_add_rms_norm` multiply by
`gamma` as given, so every function here takes the *effective* weight `gamma = 1 + w`, precomputed once by the
caller (the recipe's `norm_weight`). HF adds 1 in fp32 (`1 + w.float()`); precomputing gamma in a bf16 model
rounds `1 + w` to bf16 (relative error <= 2^-9, what the recipe does). The GDN output norm
(`gated_rms_norm_*`) uses the plain weight, not 1 + w.

Implementations (chosen once by the plan, see `model/optimizations.py`):
  ref   fp32 pow/mean/rsqrt/mul in eager torch; the unfused fallback and the spec.
  npu   torch_npu.npu_rms_norm / npu_add_rms_norm (npu_ops.md 2.2, 2.3; npu_recipe.md 1.3).
  cuda  F.rms_norm: ATen's fused CUDA kernel (quack on sm90/sm100); residual add as its own kernel.
  cpu   the reference math compiled by inductor into one generated C++ kernel per op (x read twice,
        written once).
        Faster than the reference on prefill-sized inputs, but each eager call pays a fixed dynamo guard /
        wrapper overhead, so on decode-sized inputs it is slower than the reference unless graph_mode
        compiles the whole decode step, where it is inlined.
        NOTE: torch 2.13 has no fused CPU kernel behind F.rms_norm: `aten::_fused_rms_norm` is
        CompositeImplicitAutograd on CPU and runs pow, mean, add, rsqrt, mul, mul (profiled), i.e. the
        reference sequence; it is bit-identical to `rms_norm_ref` and only saves Python dispatch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from model.ops.inductor import fused_call

# ---------------------------------------------------------------------------------------------------------
# References (pure torch, fp32 math)
# ---------------------------------------------------------------------------------------------------------


def rms_norm_ref(x: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """RMSNorm with an effective weight, following `torch_npu.npu_rms_norm(x, gamma, eps)[0]`.

    Args:
        x: [..., H] activations, any float dtype; may be non-contiguous.
        gamma: [H] effective weight (`1 + w` for Qwen3.5's zero-centred norms), any float dtype.
        eps: added to mean(x^2) before the rsqrt.

    Returns:
        y [..., H] in x.dtype: `(x_f32 * rsqrt(mean(x_f32^2) + eps)) * gamma_f32`, cast once, which is HF's
        `Qwen3_5MoeRMSNorm` order when gamma = 1 + w.float().
    """
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * gamma.float()).to(x.dtype)


def add_rms_norm_ref(x: Tensor, residual: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Residual add then RMSNorm, following `torch_npu.npu_add_rms_norm(residual, x, gamma, eps)`.

    Args:
        x: [..., H] sub-layer output (attention / GDN / MoE).
        residual: [..., H] running residual stream, same shape and dtype as x.
        gamma: [H] effective weight (1 + w).
        eps: as in `rms_norm_ref`.

    Returns:
        (y, new_residual): new_residual = residual + x in x.dtype (HF adds in the model dtype), and
        y = rms_norm_ref(new_residual) computed from that rounded sum. The NPU op does not document whether
        y uses the fp32 or the rounded sum (npu_ops.md 2.3); in fp32 the two agree.
    """
    new_residual = residual + x
    return rms_norm_ref(new_residual, gamma, eps), new_residual


def gated_rms_norm_ref(x: Tensor, gate: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The GDN output norm, HF `Qwen3_5MoeRMSNormGated`: plain weight, then a SiLU gate.

    Args:
        x: [..., Dv] delta-rule output per value head.
        gate: [..., Dv] the z projection, same shape as x.
        weight: [Dv] plain weight (initialised to 1, NOT 1 + w), shared by all value heads.
        eps: as in `rms_norm_ref`.

    Returns:
        y [..., Dv] in x.dtype: `weight * norm(x_f32).to(x.dtype)`, times `silu(gate_f32)`, cast to x.dtype.
        NOTE: the normalised x is rounded to x.dtype before the weight multiply because HF does so; this is
        the one reference that rounds twice (identical to a single rounding in fp32).
    """
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    y = weight * normed
    return (y * F.silu(gate.float())).to(x.dtype)


# ---------------------------------------------------------------------------------------------------------
# NPU (torch_npu; imported inside so this module loads without it)
# ---------------------------------------------------------------------------------------------------------


def rms_norm_npu(x: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """`torch_npu.npu_rms_norm` (aclnnRmsNorm). torch_npu 2.14.0 documents gamma in self's dtype (npu_ops.md
    2.2), and the model keeps gamma in fp32, so it is cast here as in `add_rms_norm_npu`."""
    import torch_npu

    if gamma.dtype != x.dtype:
        gamma = gamma.to(x.dtype)
    return torch_npu.npu_rms_norm(x, gamma, eps)[0]


def add_rms_norm_npu(x: Tensor, residual: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """`torch_npu.npu_add_rms_norm(residual, x, gamma, eps)` -> (y, rstd, residual + x); rstd is dropped."""
    import torch_npu

    # NOTE: npu_add_rms_norm requires gamma in x's dtype (npu_ops.md 2.3); pass gamma precomputed in the
    # model dtype to avoid this per-call cast of an [H] vector.
    if gamma.dtype != x.dtype:
        gamma = gamma.to(x.dtype)
    y, _, new_residual = torch_npu.npu_add_rms_norm(residual, x, gamma, eps)
    return y, new_residual


def gated_rms_norm_npu(x: Tensor, gate: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Recipe form (npu_recipe.md 1.3): `npu_rms_norm(x, weight)[0] * silu(gate_f32)`, cast to x.dtype.

    Differs from the reference only in rounding: `npu_rms_norm` rounds `norm(x) * weight` once, HF rounds
    `norm(x)` and then `weight * norm(x)`.
    """
    import torch_npu

    y = torch_npu.npu_rms_norm(x, weight, eps)[0]
    return (y * F.silu(gate.float())).to(x.dtype)


# ---------------------------------------------------------------------------------------------------------
# CUDA: ATen's fused rms_norm kernel
# ---------------------------------------------------------------------------------------------------------


def _same_dtype(w: Tensor, x: Tensor) -> Tensor:
    # NOTE: F.rms_norm takes its fused kernel only when weight and input dtypes match (layer_norm.cpp warns
    # "Cannot dispatch to fused implementation" otherwise); a fp32 gamma is rounded to x.dtype here.
    return w if w.dtype == x.dtype else w.to(x.dtype)


def rms_norm_cuda(x: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """`F.rms_norm`; the kernel accumulates in fp32 for bf16/fp16 input and writes x.dtype."""
    return F.rms_norm(x, (x.shape[-1],), _same_dtype(gamma, x), eps)


def add_rms_norm_cuda(x: Tensor, residual: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Residual add (one elementwise kernel), then the fused `F.rms_norm` on the sum."""
    new_residual = residual + x
    return F.rms_norm(new_residual, (x.shape[-1],), _same_dtype(gamma, x), eps), new_residual


def gated_rms_norm_cuda(x: Tensor, gate: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Fused `F.rms_norm` with the plain weight, then the SiLU gate (the NPU recipe's composition)."""
    y = F.rms_norm(x, (x.shape[-1],), _same_dtype(weight, x), eps)
    return (y * F.silu(gate.float())).to(x.dtype)


# ---------------------------------------------------------------------------------------------------------
# CPU: inductor-compiled reference math
# ---------------------------------------------------------------------------------------------------------


def _rows(t: Tensor) -> Tensor:
    # Flatten leading dims so [T, H], [B, T, H] and [B, T, N, D] inputs share compiled kernels; a view
    # whenever the leading dims are mergeable (e.g. the per-head q slice of the interleaved q/gate output).
    return t.reshape(-1, t.shape[-1])


def rms_norm_cpu(x: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """`rms_norm_ref` compiled by inductor: one reduction + one elementwise pass per row, no temporaries."""
    return fused_call(rms_norm_ref, _rows(x), gamma, eps).view(x.shape)


def add_rms_norm_cpu(x: Tensor, residual: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """`add_rms_norm_ref` compiled by inductor: the add, the reduction and both outputs in one kernel."""
    y, new_residual = fused_call(add_rms_norm_ref, _rows(x), _rows(residual), gamma, eps)
    return y.view(x.shape), new_residual.view(x.shape)


def gated_rms_norm_cpu(x: Tensor, gate: Tensor, weight: Tensor, eps: float) -> Tensor:
    """`gated_rms_norm_ref` compiled by inductor (norm, weight and SiLU gate in one kernel).

    NOTE: inductor computes the fused chain in fp32 and may skip the reference's intermediate rounding of
    norm(x) to x.dtype, so bf16 results can differ from the reference by one bf16 ulp.
    """
    return fused_call(gated_rms_norm_ref, _rows(x), _rows(gate), weight, eps).view(x.shape)


# ---------------------------------------------------------------------------------------------------------
# Device -> implementation
# ---------------------------------------------------------------------------------------------------------

RMS_NORM: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "ref": rms_norm_ref, "cpu": rms_norm_cpu, "cuda": rms_norm_cuda, "npu": rms_norm_npu,
}
ADD_RMS_NORM: dict[str, Callable[[Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor]]] = {
    "ref": add_rms_norm_ref, "cpu": add_rms_norm_cpu, "cuda": add_rms_norm_cuda, "npu": add_rms_norm_npu,
}
GATED_RMS_NORM: dict[str, Callable[[Tensor, Tensor, Tensor, float], Tensor]] = {
    "ref": gated_rms_norm_ref, "cpu": gated_rms_norm_cpu, "cuda": gated_rms_norm_cuda,
    "npu": gated_rms_norm_npu,
}
