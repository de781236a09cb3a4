"""torch_npu 2.14.0's op schemas (schemas.yaml, copied verbatim from the wheel) as parsed FunctionSchemas."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch
import yaml

SCHEMA_FILE = Path(__file__).with_name("schemas.yaml")


@functools.cache
def schema_strings() -> dict[str, dict[str, str]]:
    """{"npu": {op: schema}, "air": {op: schema}}."""
    return yaml.safe_load(SCHEMA_FILE.read_text())


@functools.cache
def parsed(namespace: str, op: str) -> Any:
    return torch._C.parse_schema(schema_strings()[namespace][op])


def default_of(op: str, arg: str, namespace: str = "npu") -> Any:
    for a in parsed(namespace, op).arguments:
        if a.name == arg:
            return a.default_value if a.has_default_value() else None
    raise KeyError(f"{namespace}::{op} has no argument {arg}")
