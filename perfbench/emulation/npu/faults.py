"""Injected faults: a test-only hook of the NPU emulator, so `perfbench verify` can show how each kind of failure
is reported (docs/verify.md, "Fault hook").

    PERFBENCH_VERIFY_FAULT=op_raises:npu_rms_norm perfbench verify --emulate-npu 910b --quick

The variable holds one fault or several, comma-separated:

| fault | effect under the emulator |
|---|---|
| `op_raises:OP` | every call of torch_npu op OP raises `InjectedFault`, naming the call |
| `op_numerics:OP` | OP's first output is doubled: it runs, and its numbers are wrong |
| `op_missing:OP` | the emulated torch_npu has no attribute OP (as an older torch_npu would lack it) |
| `graph_capture[:ge\\|:npugraph_ex]` | the GE backend, the npugraph_ex backend, or both refuse to compile |
| `rank_dies:R` | the process of rank R is killed (SIGKILL) when its HCCL process group is created |

Faults are read when the emulator is activated (`activate()` calls `load_from_env`), so torchrun ranks started
from an emulated process inherit them. Real torch_npu is never touched: the hook exists only in the emulator.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perfbench.emulation.npu.calls import describe_call
from perfbench.emulation.npu.platforms import active as active_platform

ENV_VAR = "PERFBENCH_VERIFY_FAULT"
OP_KINDS = ("op_raises", "op_numerics", "op_missing")
GRAPH_BACKENDS = ("ge", "npugraph_ex")
KINDS = (*OP_KINDS, "graph_capture", "rank_dies")


class FaultSpecError(ValueError):
    """A PERFBENCH_VERIFY_FAULT value that names no known fault, op or rank."""


class InjectedFault(RuntimeError):
    """The failure an injected fault produces (never raised without PERFBENCH_VERIFY_FAULT)."""


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str = ""  # the op, the graph backend ("" = both) or the rank

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}" if self.target else self.kind


def _known_ops() -> list[str]:
    from perfbench.emulation.npu.schemas import schema_strings

    return list(schema_strings()["npu"])


def parse(text: str) -> tuple[Fault, ...]:
    """`kind[:target][,kind[:target]...]` -> faults; a bad part raises FaultSpecError naming it."""
    faults = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, target = part.partition(":")
        if kind not in KINDS:
            raise FaultSpecError(f"{ENV_VAR}: unknown fault {kind!r} in {part!r}; faults are {', '.join(KINDS)}")
        if kind in OP_KINDS and target not in _known_ops():
            raise FaultSpecError(f"{ENV_VAR}: {part!r} names no torch_npu 2.14.0 op the emulator has "
                                 f"(e.g. {kind}:npu_rms_norm)")
        if kind == "graph_capture" and target not in ("", *GRAPH_BACKENDS):
            raise FaultSpecError(f"{ENV_VAR}: {part!r}: graph_capture takes no target or one of "
                                 f"{', '.join(GRAPH_BACKENDS)}")
        if kind == "rank_dies" and not target.isdigit():
            raise FaultSpecError(f"{ENV_VAR}: {part!r}: rank_dies needs a rank number, e.g. rank_dies:1")
        faults.append(Fault(kind, target))
    return tuple(faults)


_active: list[Fault] = []


def install(faults: tuple[Fault, ...]) -> None:
    _active[:] = faults


def load_from_env() -> tuple[Fault, ...]:
    """The faults of PERFBENCH_VERIFY_FAULT, made active (none when it is unset)."""
    install(parse(os.environ.get(ENV_VAR, "")))
    return active()


def active() -> tuple[Fault, ...]:
    return tuple(_active)


def _has(kind: str, target: str) -> bool:
    return any(f.kind == kind and f.target == target for f in _active)


def missing_ops() -> frozenset[str]:
    return frozenset(f.target for f in _active if f.kind == "op_missing")


def _where() -> str:
    p = active_platform()
    return f" [{p.label}]" if p else ""


def guarded_kernel(name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel` with the op faults of `name` applied at call time (op_raises, op_numerics)."""
    from perfbench.emulation.npu.schemas import parsed

    arg_names = [a.name for a in parsed("npu", name).arguments]

    def run(*args: Any, **kwargs: Any) -> Any:
        if _has("op_raises", name):
            raise InjectedFault(f"{name}: injected fault op_raises ({ENV_VAR}){_where()} in "
                                f"{describe_call(name, args, kwargs, arg_names)}")
        out = kernel(*args, **kwargs)
        if _has("op_numerics", name):
            _double_first_output(out)
        return out

    run.__name__ = name
    return run


def _double_first_output(out: Any) -> None:
    first = out[0] if isinstance(out, list | tuple) else out
    if isinstance(first, list | tuple):
        first = first[0]
    if isinstance(first, torch.Tensor) and first.is_floating_point():
        first.mul_(2)  # in place: the output may alias an input (the in-place ops)


def check_graph_capture(backend: str) -> None:
    """Raise for graph_capture (both backends) or graph_capture:`backend`."""
    if _has("graph_capture", "") or _has("graph_capture", backend):
        what = "torchair GE" if backend == "ge" else "npugraph_ex"
        raise InjectedFault(f"{what} graph capture: injected fault graph_capture ({ENV_VAR}){_where()}")


def check_rank_alive(rank: int) -> None:
    """rank_dies:R kills this process (rank R) outright, as a crashed or OOM-killed rank would end."""
    if _has("rank_dies", str(rank)):
        print(f"injected fault rank_dies:{rank} ({ENV_VAR}): rank {rank} is killed{_where()}", file=sys.stderr,
              flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
