"""Decode-step graph capture for `graph_mode`: torchair on NPU, torch.compile + CUDA graphs on CUDA, inductor on CPU.

Every variant compiles with static shapes and fullgraph=True, so a recompile or graph break is an error, not a
silent fallback to eager.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from pathlib import Path

import torch

from model.cache import Qwen3_5MoeCache

DecodeFn = Callable[..., torch.Tensor]


def eager(fn: DecodeFn, cache_dir: Path | None = None) -> DecodeFn:
    return fn


def compile_cpu(fn: DecodeFn, cache_dir: Path | None = None) -> DecodeFn:
    if cache_dir is not None:
        # inductor's FX-graph and kernel caches live here: a second process (or a dynamo reset) compiles warm.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
        torch._inductor.config.fx_graph_cache = True
    # cpp_wrapper: the generated kernels are called from C++ instead of a Python wrapper; a decode step is a few
    # hundred small kernels, so the per-kernel Python overhead saved outweighs the longer compile.
    return torch.compile(fn, fullgraph=True, dynamic=False, options={"cpp_wrapper": True})


def compile_cuda(fn: DecodeFn, cache_dir: Path | None = None) -> DecodeFn:
    """Inductor kernels replayed through CUDA graphs (mode reduce-overhead) for `fn(tokens, cache)`.

    A decode step writes its cache in place, and inductor skips CUDA graphs (with only a log warning) for a
    graph that mutates inputs whose address may change. The cache's tensors are allocated once and updated in
    place, so they are marked static-address: the graph then writes them directly. A new cache (other
    addresses) makes the graph re-record, not read stale memory.
    """
    if cache_dir is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
        torch._inductor.config.fx_graph_cache = True
    compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True, dynamic=False)
    # the cache last marked, held weakly (it must not keep a dropped cache's memory): a decode step only checks
    # its identity
    marked: list[weakref.ref[Qwen3_5MoeCache]] = []

    @functools.wraps(fn)
    def step(tokens: torch.Tensor, cache: Qwen3_5MoeCache, *inputs: torch.Tensor) -> torch.Tensor:
        if not marked or marked[0]() is not cache:
            for t in cache.tensors():
                torch._dynamo.mark_static_address(t)
            marked[:] = [weakref.ref(cache)]
        return compiled(tokens, cache, *inputs)

    return step


def compile_npu_ge(fn: DecodeFn, cache_dir: Path | None = None, *, tnd_attention: bool = False) -> DecodeFn:
    """torchair GE graph with the recipe's options (npu_recipe.md section 4).

    Tiling schedule optimisation is documented as unsupported with TND fused attention, so it is left off then.
    """
    import torchair as tng  # NPU only
    from torchair.configs.compiler_config import CompilerConfig

    config = CompilerConfig()
    config.experimental_config.frozen_parameter = True
    config.experimental_config.tiling_schedule_optimize = not tnd_attention
    config.experimental_config.topology_sorting_strategy = "StableRDFS"
    if cache_dir is not None:
        return tng.inference.cache_compile(fn, cache_dir=str(cache_dir), config=config, dynamic=False,
                                           fullgraph=True, ge_cache=True)
    backend = tng.get_npu_backend(compiler_config=config)
    return torch.compile(fn, dynamic=False, fullgraph=True, backend=backend)


def compile_npu_graph_ex(fn: DecodeFn, cache_dir: Path | None = None) -> DecodeFn:
    """npugraph_ex (aclgraph capture) with the recipe's options."""
    options: dict[str, str | int | bool | Callable[..., object]] = {"frozen_parameter": True}
    if cache_dir is not None:
        return torch.npu.npugraph_ex.inference.cache_compile(  # type: ignore[attr-defined]
            fn, cache_dir=str(cache_dir), dynamic=False, options=options)
    return torch.compile(fn, dynamic=False, fullgraph=True, backend="npugraph_ex", options=options)


def graph_compiler(device: str, exe_mode: str, tnd_attention: bool = False
                   ) -> Callable[[DecodeFn, Path | None], DecodeFn]:
    if device == "npu":
        if exe_mode == "npugraph_ex":
            return compile_npu_graph_ex
        return functools.partial(compile_npu_ge, tnd_attention=tnd_attention)
    return compile_cuda if device == "cuda" else compile_cpu
