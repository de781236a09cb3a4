"""Stand-ins for torchair's GE compiler and torch_npu's npugraph_ex backend.

Both are dynamo backends that run the captured FX graph on the emulated (CPU) ops, after checking what the
real compilers require of a decode graph: one graph (callers pass fullgraph=True, so a graph break, a host
sync such as `.tolist()` or a data-dependent shape fails in dynamo) with static shapes. The GE backend also
does what GE's converters do for torchair's attention ops: torch.ops.air.* become the torch.ops.npu op with
the Tensor lengths read as lists. npugraph_ex has no converter for air ops, so they raise there, as on
hardware. Nothing is cached on disk (cache_compile compiles in-process).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from perfbench.emulation.npu import faults, rules

_AIR_OPS = ("npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2")
_LENGTH_ARGS = ("actual_seq_lengths", "actual_seq_lengths_kv", "actual_seq_qlen", "actual_seq_kvlen",
                "actual_shared_prefix_len")


class _Options:
    """Settable options with their allowed values, like torchair's OptionValue."""

    _allowed: dict[str, tuple[Any, ...]] = {}

    def __init__(self) -> None:
        for name, values in self._allowed.items():
            object.__setattr__(self, name, values[0])

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._allowed:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}")
        if value not in self._allowed[name]:
            raise ValueError(f"{type(self).__name__}.{name}: {value!r} is not one of {self._allowed[name]}")
        object.__setattr__(self, name, value)


class ExperimentalConfig(_Options):
    frozen_parameter: bool
    tiling_schedule_optimize: bool
    topology_sorting_strategy: str
    npu_fx_pass: bool
    _allowed = {"frozen_parameter": (False, True), "tiling_schedule_optimize": (False, True),
                "topology_sorting_strategy": ("DFS", "BFS", "RDFS", "StableRDFS"), "npu_fx_pass": (False, True)}


class CompilerConfig:
    """torchair.CompilerConfig: mode ("max-autotune" = GE graph) and experimental_config."""

    MODES = ("max-autotune", "reduce-overhead", "npugraph_ex")

    def __init__(self) -> None:
        self.mode = "max-autotune"
        self.experimental_config = ExperimentalConfig()


def _check_no_host_values(gm: GraphModule) -> None:
    """A value read back to the host (.item(), .tolist()) or a shape that depends on data (nonzero, boolean
    indexing) shows up as an unbacked symbol: a static device graph cannot hold it."""
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if value is not None and free_unbacked_symbols(value):
            raise rules.NpuRuleError(
                f"torchair graph: `{node.format_node()}` reads a tensor value on the host or has a "
                "data-dependent shape; a static decode graph cannot capture it")


def _check_static(example_inputs: list[Any]) -> None:
    for x in example_inputs:
        symbolic = isinstance(x, torch.SymInt) or (
            isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape))
        if symbolic:
            raise rules.NpuRuleError("torchair graph: the emulated GE backend compiles static shapes only "
                                     "(compile with dynamic=False)")


def _ge_attention(name: str) -> Callable[..., Any]:
    npu_op = getattr(torch.ops.npu, name)

    def converted(*args: Any, **kwargs: Any) -> Any:
        for key in _LENGTH_ARGS:
            if isinstance(kwargs.get(key), torch.Tensor):
                kwargs[key] = kwargs[key].tolist()
        return npu_op(*args, **kwargs)
    converted.__name__ = f"ge_{name}"
    return converted


def _ge_passes(gm: GraphModule, config: CompilerConfig) -> None:
    air = {getattr(torch.ops.air, n).default: n for n in _AIR_OPS} | {getattr(torch.ops.air, n): n for n in _AIR_OPS}
    tnd_ops = {torch.ops.npu.npu_fused_infer_attention_score_v2.default,
               torch.ops.npu.npu_fused_infer_attention_score_v2, torch.ops.air.npu_fused_infer_attention_score_v2,
               torch.ops.air.npu_fused_infer_attention_score_v2.default}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in tnd_ops and node.kwargs.get("input_layout") == "TND" and \
                config.experimental_config.tiling_schedule_optimize:
            # "当为TND时, 不支持图模式配置Tiling调度优化功能(tiling_schedule_optimize=True)"
            rules.fail("npu_fused_infer_attention_score_v2",
                       "TND layout does not support tiling_schedule_optimize=True in graph mode")
        if node.target in air:
            node.target = _ge_attention(air[node.target])
    gm.recompile()


def get_npu_backend(*, compiler_config: CompilerConfig | None = None,
                    custom_decompositions: dict[Any, Any] | None = None) -> Callable[..., Any]:
    """torchair.get_npu_backend: a dynamo backend running the GE-converted graph on the emulated ops."""
    config = compiler_config or CompilerConfig()

    def ge_backend(gm: GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        faults.check_graph_capture("ge")
        _check_static(example_inputs)
        _check_no_host_values(gm)
        if config.mode != "max-autotune":
            raise rules.NpuRuleError(f"torchair: the emulator models mode 'max-autotune' (GE), got {config.mode!r}")
        _ge_passes(gm, config)
        return gm.forward
    return ge_backend


def cache_compile(func: Callable[..., Any], *, config: CompilerConfig | None = None, backend: Any = None,
                  dynamic: bool = True, cache_dir: str | None = None, global_rank: int | None = None,
                  tp_rank: int | None = None, pp_rank: int | None = None,
                  custom_decompositions: dict[Any, Any] | None = None, ge_cache: bool = False,
                  **kwargs: Any) -> Callable[..., Any]:
    """torchair.inference.cache_compile: like torchair, takes a bound method of an nn.Module."""
    if not (inspect.ismethod(func) and isinstance(func.__self__, torch.nn.Module)):
        raise ValueError("torchair.inference.cache_compile: func must be a method of a torch.nn.Module instance")
    return torch.compile(func, backend=backend or get_npu_backend(compiler_config=config), dynamic=dynamic,
                         fullgraph=True)


def npugraph_ex_backend(gm: GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None
                        ) -> Callable[..., Any]:
    """The "npugraph_ex" dynamo backend (aclgraph capture): static shapes, no air-op conversion."""
    faults.check_graph_capture("npugraph_ex")
    _check_static(example_inputs)
    _check_no_host_values(gm)
    return gm.forward


def npugraph_ex_cache_compile(func: Callable[..., Any], *, dynamic: bool = True, cache_dir: str | None = None,
                              global_rank: int | None = None, tp_rank: int | None = None,
                              pp_rank: int | None = None, **kwargs: Any) -> Callable[..., Any]:
    return torch.compile(func, backend="npugraph_ex", dynamic=dynamic, fullgraph=True)


_registered: list[bool] = []


def register_backends() -> None:
    if not _registered:
        torch._dynamo.register_backend(npugraph_ex_backend, name="npugraph_ex")
        _registered.append(True)
