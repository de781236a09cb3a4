"""Wrong kernels on purpose: a fused op family whose output is off by a few percent, to prove that the numerics
check catches it (and a rounding-only change, to prove that it does not cry wolf).

Each family's fused implementations are wrapped in the op tables that `model.ops.opset.build_ops` reads, so a
model built inside `planted(...)` binds the wrong kernel for every fused key (CPU, CUDA, NPU, emulated NPU) and the
unfused reference ("ref") stays right. `family` names follow the toggles.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from model.layers import linear
from model.ops import attention, comm, gdn, moe, norm, rope

# family -> the op tables whose non-reference entries it plants into
FAMILY_TABLES: dict[str, list[dict[str, Callable[..., Any]]]] = {
    "fused_rmsnorm": [norm.RMS_NORM, norm.ADD_RMS_NORM, norm.GATED_RMS_NORM],
    "fused_rope": [rope.APPLY_ROPE],
    "fused_attention": [attention.ATTENTION_PREFILL, attention.ATTENTION_DECODE],
    "chunk_gdr": [gdn.GDR_PREFILL],
    "grouped_moe": [moe.EXPERTS_PREFILL, moe.EXPERTS_DECODE],
    "mm_all_reduce": [comm.ROW_PARALLEL_LINEAR],
    "moe_dispatch_combine": [comm.EP_EXCHANGE],
}
# graph mode's own kernel: the CPU decode experts that only a compiled decode step uses
GRAPH_ONLY = {"graph_mode": (moe.EXPERTS_DECODE, "cpu_graph")}
FAMILIES = (*FAMILY_TABLES, "merged_projections", *GRAPH_ONLY)


def scaled(fn: Callable[..., Any], factor: float) -> Callable[..., Any]:
    """`fn` with its output (the first one, for ops that return (output, state)) times `factor`."""
    def wrong(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return (out[0] * factor, *out[1:])
        return out * factor
    return wrong


def upcast(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with the same math rounded differently: floating tensors in, computed one precision up (fp32 for
    bf16/fp16, fp64 for fp32), outputs cast back to their input's dtype. The near miss that must pass."""
    def wider(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.to(torch.float64 if t.dtype == torch.float32 else torch.float32)
        if isinstance(t, (list, tuple)):
            return type(t)(wider(x) for x in t)
        return t

    def same_math(*args: Any, **kwargs: Any) -> Any:
        reference = fn(*args, **kwargs)  # for the output dtypes (and any in-place effects) of the op as it is
        out = fn(*[wider(a) for a in args], **{k: wider(v) for k, v in kwargs.items()})
        if isinstance(out, tuple):
            return tuple(o.to(r.dtype) if isinstance(o, torch.Tensor) else o for o, r in zip(out, reference))
        return out.to(reference.dtype)
    return same_math


@contextlib.contextmanager
def planted(family: str, factor: float | None) -> Iterator[None]:
    """Inside the block, models built get `family`'s fused kernels scaled by `factor` (None: computed one precision
    up instead, a rounding-only change)."""
    undo: list[tuple[dict[str, Callable[..., Any]], str, Callable[..., Any]]] = []
    original_forward = linear.Projections.forward

    def change(fn: Callable[..., Any]) -> Callable[..., Any]:
        return upcast(fn) if factor is None else scaled(fn, factor)
    try:
        if family in FAMILY_TABLES:
            for table in FAMILY_TABLES[family]:
                for key, fn in list(table.items()):
                    if key != "ref" and fn is not table["ref"]:
                        undo.append((table, key, fn))
                        table[key] = change(fn)
        elif family in GRAPH_ONLY:
            table, key = GRAPH_ONLY[family]
            undo.append((table, key, table[key]))
            table[key] = change(table[key])
        elif family == "merged_projections":
            def merged_wrong(self: linear.Projections, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
                if not self.merged:
                    return original_forward(self, x)
                if factor is None:
                    wide = torch.float64 if x.dtype == torch.float32 else torch.float32
                    return tuple(p.to(x.dtype) for p in
                                 torch.nn.functional.linear(x.to(wide), self.weight.to(wide)).split(self.sizes, -1))
                return tuple(p * factor for p in original_forward(self, x))
            linear.Projections.forward = merged_wrong  # type: ignore[method-assign]
        else:
            raise ValueError(f"no planted fault for {family!r}; families: {', '.join(FAMILIES)}")
        yield
    finally:
        linear.Projections.forward = original_forward  # type: ignore[method-assign]
        for table, key, fn in reversed(undo):
            table[key] = fn
