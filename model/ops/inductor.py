"""Inductor-compiled pure-torch math, the CPU implementation of several fused ops (norms, rotary, the
gated-delta-rule chunk terms)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


@functools.cache
def compiled(fn: Callable[..., Any], dynamic: bool | None = True) -> Callable[..., Any]:
    """`fn` under torch.compile, built once per (function, dynamic) on first use.

    NOTE: dynamic=True (the default here) makes token counts and batch sizes share one kernel (dynamo still
    specialises sizes 0 and 1: one extra compile for decode); None is dynamo's automatic mode (static kernels
    for the first shape, one dynamic recompile when a shape changes). Built lazily because `torch.compile`
    imports dynamo and inductor (~2 s), which a plain `import model` should not pay.
    """
    return torch.compile(fn, dynamic=dynamic)


def fused_call(fn: Callable[..., Any], *args: Any, dynamic: bool | None = True) -> Any:
    """Run `fn(*args)` compiled, or inline when already being traced by an outer graph (graph_mode decode),
    where the outer compile fuses it with its neighbours."""
    if torch.compiler.is_compiling():
        return fn(*args)
    return compiled(fn, dynamic)(*args)
