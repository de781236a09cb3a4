"""Qwen3.5-MoE text model in which every NPU optimization is a toggle with an unfused fallback.

The public names load on first use, so that torch-free submodules (`model.toggles`, `model.tracing_names`,
`model.config`) can be imported by offline analysis without pulling in torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from model.config import Qwen3_5MoeTextConfig
    from model.modeling import GenerateOutput, Qwen3_5MoeForCausalLM

__all__ = ["GenerateOutput", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig"]

_HOMES = {"GenerateOutput": "model.modeling", "Qwen3_5MoeForCausalLM": "model.modeling",
          "Qwen3_5MoeTextConfig": "model.config"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'model' has no attribute {name!r}")
