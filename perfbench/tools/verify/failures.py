"""Turning an exception into a reported failure: the NPU op involved, the exact call, the error.

In eager code `NpuCallRecorder` (a TorchDispatchMode) sees every torch.ops.npu / torch.ops.air call and keeps
the one that raised, with its arguments. Inside a compiled graph no mode runs; there the op is the first torch_npu
op the error message names, and a dynamo failure is a graph-capture failure.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perfbench.emulation.npu.calls import describe_call
from perfbench.emulation.npu.schemas import schema_strings
from perfbench.tools.verify.summary import FAIL, Check

NAMESPACES = ("npu", "air")


@dataclass(frozen=True)
class Failure:
    op: str
    call: str
    error: str


class NpuCallRecorder(TorchDispatchMode):
    """Records the first torch_npu / torchair op call that raised inside the `with` block."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: tuple[str, str] | None = None  # (op, call)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func.namespace not in NAMESPACES:
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except Exception:
            if self.failed is None:
                name = func._schema.name.split("::", 1)[-1]
                names = [a.name for a in func._schema.arguments]
                self.failed = (name, describe_call(name, args, kwargs, names))
            raise


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception: dynamo and the dispatcher wrap the op's own error."""
    seen = {id(exc)}
    while True:
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def error_line(exc: BaseException) -> str:
    root = root_cause(exc)
    text = next((line.strip() for line in str(root).splitlines() if line.strip()), "")
    return f"{type(root).__name__}: {text}" if text else type(root).__name__


def named_op(text: str) -> str:
    """The first torch_npu op of the 2.14.0 schemas that `text` names, or ""."""
    names = sorted({*schema_strings()["npu"], *schema_strings()["air"]}, key=len, reverse=True)
    found = re.search(r"\b(" + "|".join(map(re.escape, names)) + r")\b", text)
    return found.group(1) if found else ""


def is_capture_failure(exc: BaseException) -> bool:
    """Dynamo (or the graph backend it called) refused the graph: a capture failure, not a run failure."""
    return isinstance(exc, torch._dynamo.exc.TorchDynamoException)


def describe(exc: BaseException, recorder: NpuCallRecorder | None = None, op: str = "", call: str = "") -> Failure:
    """The failure of `exc`: the recorded failing op call if there is one, else `op`/`call` as given, else the op
    the error names."""
    error = error_line(exc)
    if recorder is not None and recorder.failed is not None:
        return Failure(recorder.failed[0], recorder.failed[1], error)
    return Failure(op or named_op(error), call, error)


def failed_check(name: str, exc: BaseException, log: list[str], recorder: NpuCallRecorder | None = None,
                 op: str = "", call: str = "", detail: str = "", **data: Any) -> Check:
    """A failed check for `exc`, its traceback appended to the item's log."""
    failure = describe(exc, recorder, op, call)
    log.append(f"--- {name}: {failure.error}\n" + "".join(traceback.format_exception(exc)))
    return Check(name, FAIL, detail, failure.op, failure.call, failure.error, dict(data))
