"""Shared comparison helper for op tests: reference vs implementation, with readable failure messages."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

# The Ascend platform the NPU implementations run on when no real device is present (docs/npu_emulator.md).
EMULATED_NPU_PLATFORM = "910b"


@functools.cache
def real_npu_available() -> bool:
    """True with a real torch_npu and an Ascend device; the NPU emulator's stand-in module does not count."""
    module = sys.modules.get("torch_npu")
    if module is None:
        if importlib.util.find_spec("torch_npu") is None:
            return False
        import torch_npu  # noqa: F401
    elif hasattr(module, "__emulated__"):
        return False
    runtime = getattr(torch, "npu", None)
    return runtime is not None and bool(runtime.is_available())


def impl_param(impl: str, *values: object, id: str | None = None) -> object:
    """A pytest.param for `impl` (plus further parameter `values`): without a real Ascend device an NPU
    implementation runs under the NPU emulator, so its id says "emulated" and it carries `npu_emulated`."""
    emulated = impl.startswith("npu") and not real_npu_available()
    label = f"{impl}_emulated" if emulated else impl
    return pytest.param(impl, *values, id=f"{label}-{id}" if id else label,
                        marks=[pytest.mark.npu_emulated] if emulated else [])


def device_for(impl: str) -> str:
    """Where an implementation's inputs live.

    NPU implementations: "npu" on an Ascend host with torch_npu; otherwise the test runs under the NPU
    emulator (conftest's `npu_device` fixture, requested for every test whose `impl` starts with "npu"), whose
    tensors live on the CPU. The CUDA paths are plain torch, so without a GPU they run on CPU tensors: that
    checks their composition and dtype handling, not the CUDA kernels."""
    if impl.startswith("npu"):
        if real_npu_available():
            return "npu"
        from perfbench.emulation import npu

        if npu.active() is None:
            raise RuntimeError(f"{impl}: no Ascend device and the NPU emulator is not active "
                               "(request the npu_device fixture)")
        return npu.tensor_device("npu")
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
