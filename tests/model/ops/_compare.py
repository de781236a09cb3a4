"""Shared comparison helper for op tests: reference vs implementation, with readable failure messages."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor


def device_for(impl: str) -> str:
    """Where an implementation's inputs live; skips NPU implementations without torch_npu and an Ascend device.

    The CUDA paths are plain torch, so without a GPU they run on CPU tensors: that checks their composition and
    dtype handling, not the CUDA kernels."""
    if impl.startswith("npu"):
        if importlib.util.find_spec("torch_npu") is None:
            pytest.skip("npu implementations need torch_npu and an Ascend device")
        import torch_npu  # noqa: F401

        if not torch.npu.is_available():  # type: ignore[attr-defined]
            pytest.skip("npu implementations need an Ascend device")
        return "npu"
    return "cuda" if impl == "cuda" and torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def strict_recompiles(limit: int = 32) -> Iterator[None]:
    """Each new size-1 / stride / dtype pattern is one more compiled variant of a CPU kernel; past dynamo's
    limit (default 8) it would silently run the eager reference instead. Raise the limit and make hitting it
    an error, so a test never passes on the reference while claiming to test the compiled kernel."""
    import torch._dynamo

    with torch._dynamo.config.patch(recompile_limit=limit, fail_on_recompile_limit_hit=True):
        yield


def error_stats(ref: Tensor, out: Tensor) -> tuple[float, float]:
    """Max-abs and relative-RMS error of `out` against `ref`, both computed in fp64.

    Relative RMS is ||out - ref||_2 / ||ref||_2 (0 when both are all-zero); it is the measure that stays
    meaningful for bf16, where single elements may be off by a few ulps while the tensor as a whole is right.
    """
    r = ref.detach().to(torch.float64)
    o = out.detach().to(torch.float64)
    diff = o - r
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    ref_norm = r.norm().item()
    diff_norm = diff.norm().item()
    rel_rms = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    return max_abs, rel_rms


def assert_close(name: str, ref: Tensor, out: Tensor, atol: float, rtol: float) -> None:
    """Assert `out` matches `ref`: elementwise |out - ref| <= atol + rtol * |ref| after a NaN/shape guard.

    The message always reports max-abs error and relative RMS error so a failure says how far off it is.
    NaN or inf in `out` where `ref` is finite fails regardless of tolerance.
    """
    if ref.shape != out.shape:
        raise AssertionError(f"{name}: shape mismatch, ref {tuple(ref.shape)} vs out {tuple(out.shape)}")
    r = ref.detach().to(torch.float64)
    o = out.detach().to(torch.float64)
    bad_out = ~torch.isfinite(o) & torch.isfinite(r)
    if bad_out.any():
        raise AssertionError(
            f"{name}: {int(bad_out.sum())} non-finite values in out where ref is finite "
            f"(first at index {tuple(bad_out.nonzero()[0].tolist())})"
        )
    if not torch.isfinite(r).all():
        raise AssertionError(f"{name}: reference contains non-finite values")
    max_abs, rel_rms = error_stats(r, o)
    excess = (o - r).abs() - (atol + rtol * r.abs())
    if (excess > 0).any():
        worst = excess.flatten().argmax()
        idx = tuple(int(i) for i in torch.unravel_index(worst, r.shape))
        raise AssertionError(
            f"{name}: {int((excess > 0).sum())}/{r.numel()} elements out of tolerance "
            f"(atol={atol:g}, rtol={rtol:g}); max_abs_err={max_abs:.3e}, rel_rms_err={rel_rms:.3e}; "
            f"worst at {idx}: ref={r[idx].item():.6g} out={o[idx].item():.6g}"
        )
