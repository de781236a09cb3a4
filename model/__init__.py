"""Qwen3.5-MoE text model in which every NPU optimization is a toggle with an unfused fallback."""

from model.config import Qwen3_5MoeTextConfig
from model.modeling import GenerateOutput, Qwen3_5MoeForCausalLM

__all__ = ["GenerateOutput", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig"]
