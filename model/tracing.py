"""Profiler annotations: the names the model puts on record_function ranges.

Range names are built by `model.tracing_names` (torch-free, so trace parsers can read them offline). Scopes are off by
default (a no-op context), the harness turns them on for profiled iterations only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from model.tracing_names import PREFIX, parse_scope, scope_name

__all__ = ["PREFIX", "Scopes", "parse_scope", "scope_name"]


class Scopes:
    """Hands layers their annotation context. Disabled: a shared nullcontext (no per-call cost beyond a call)."""

    def __init__(self) -> None:
        self.enabled = False  # layer and module ranges
        self.steps_enabled = False  # phase / step ranges of generation
        self._null = contextlib.nullcontext()

    def __call__(self, **fields: object) -> contextlib.AbstractContextManager:
        if not self.enabled:
            return self._null
        return torch.profiler.record_function(scope_name(**fields))

    def step(self, **fields: object) -> contextlib.AbstractContextManager:
        """A phase / step range: it sits outside a compiled decode graph, so it can be on when layer ranges
        (which would force a recompile inside the graph) are off."""
        if not self.steps_enabled:
            return self._null
        return torch.profiler.record_function(scope_name(**fields))

    @contextlib.contextmanager
    def enable(self, layers: bool = True) -> Iterator[None]:
        """Phase / step ranges on, and layer / module ranges too unless `layers` is False."""
        previous = self.enabled, self.steps_enabled
        self.enabled, self.steps_enabled = layers, True
        try:
            yield
        finally:
            self.enabled, self.steps_enabled = previous
