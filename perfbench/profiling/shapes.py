"""Input shapes as one text per op, the same for every profiler: dims joined by "," and inputs by ";".

Ascend writes them so already (`"32,1,224,224,8;121,4,16,8;64"`, quoted); Kineto's record_shapes writes a
JSON list per op (`Input Dims`: `[[10, 10], [10, 10], []]`), turned here into `10,10;10,10;` (a non-tensor
input keeps its empty place, so positions line up). See the `input_shapes` column in events.py.
"""

from __future__ import annotations

from typing import Any


def input_dims_text(dims: Any) -> str | None:
    """Kineto `Input Dims` as shape text; None when the op recorded none (not a list, or an empty one).
    An input that is itself a list of shapes (a TensorList) is written as its shapes in brackets."""
    if not isinstance(dims, list) or not dims:
        return None
    return ";".join(_one_input(d) for d in dims)


def _one_input(dims: Any) -> str:
    if not isinstance(dims, list):
        return str(dims)
    if all(isinstance(d, int) for d in dims):
        return ",".join(map(str, dims))
    return "".join(f"[{_one_input(d)}]" for d in dims)


def ascend_shapes_text(value: Any) -> str | None:
    """An Ascend `Input Shapes` cell or STRING_IDS value without its quotes and padding; None for N/A/empty."""
    if not isinstance(value, str):
        return None
    text = value.strip().strip('"').strip()
    return None if text in ("", "N/A", "NA") else text
