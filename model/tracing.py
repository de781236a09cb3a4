"""Profiler annotations: the names the model puts on record_function ranges.

Every range is named `pb|key=value|key=value` so a trace parser can recover phase, layer, layer type and module
from the enclosing ranges of any op (perfbench/profiling reads them with `parse_scope`). Scopes are off by
default (a no-op context), the harness turns them on for profiled iterations only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

PREFIX = "pb|"


def scope_name(**fields: object) -> str:
    return PREFIX + "|".join(f"{k}={v}" for k, v in fields.items())


def parse_scope(name: str) -> dict[str, str]:
    """`pb|phase=decode|step=3` -> {"phase": "decode", "step": "3"}; {} for other names."""
    if not name.startswith(PREFIX):
        return {}
    out: dict[str, str] = {}
    for part in name[len(PREFIX):].split("|"):
        key, _, value = part.partition("=")
        if key:
            out[key] = value
    return out


class Scopes:
    """Hands layers their annotation context. Disabled: a shared nullcontext (no per-call cost beyond a call)."""

    def __init__(self) -> None:
        self.enabled = False
        self._null = contextlib.nullcontext()

    def __call__(self, **fields: object) -> contextlib.AbstractContextManager:
        if not self.enabled:
            return self._null
        return torch.profiler.record_function(scope_name(**fields))

    @contextlib.contextmanager
    def enable(self) -> Iterator[None]:
        previous, self.enabled = self.enabled, True
        try:
            yield
        finally:
            self.enabled = previous
