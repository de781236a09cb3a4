"""One line for an op call: `npu_rms_norm(self=bfloat16[3, 7, 256], gamma=bfloat16[256], epsilon=1e-06)`.

Failure reports (`perfbench verify`) and injected faults name the exact call this way: tensors as dtype[shape],
lists of tensors element-wise, other values by repr (shortened).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

MAX_VALUE_CHARS = 60


def describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value):
        return "[" + ", ".join(describe_value(v) for v in value) + "]"
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def describe_call(op: str, args: Sequence[Any], kwargs: Mapping[str, Any], names: Sequence[str] = ()) -> str:
    """`op(a=..., b=...)`; positional arguments are named by `names` (the schema's) where given."""
    parts = [f"{names[i]}={describe_value(a)}" if i < len(names) else describe_value(a) for i, a in enumerate(args)]
    parts += [f"{k}={describe_value(v)}" for k, v in kwargs.items()]
    return f"{op}({', '.join(parts)})"
