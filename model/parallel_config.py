"""`parallel_config` exactly as the cann-recipes-infer YAMLs spell it, with validation against a model config."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from model.config import Qwen3_5MoeTextConfig

FIELDS = ("world_size", "attn_tp_size", "moe_tp_size", "embed_tp_size", "lmhead_tp_size", "shared_tp_size")


class ParallelConfigError(ValueError):
    """An invalid parallel layout; the message names the field and the numbers."""


@dataclass(frozen=True)
class ParallelConfig:
    world_size: int = 1
    attn_tp_size: int = 1
    moe_tp_size: int = 1
    embed_tp_size: int = 1
    lmhead_tp_size: int = 1
    shared_tp_size: int = 1

    @property
    def moe_ep_size(self) -> int:
        return self.world_size // self.moe_tp_size

    @property
    def attn_dp_size(self) -> int:
        return self.world_size // self.attn_tp_size

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None, where: str = "parallel_config") -> ParallelConfig:
        raw = dict(raw or {})
        ignored = {"dense_tp_size", "o_proj_tp_size", "cp_size", "offline_prefill_dp_group_size", "moe_ep_size"}
        unknown = sorted(set(raw) - set(FIELDS) - ignored)
        if unknown:
            raise ParallelConfigError(f"{where}.{unknown[0]}: unknown key; allowed {', '.join(FIELDS)}")
        values: dict[str, int] = {}
        for name in FIELDS:
            # a missing size is 1 (replicated), as in the recipe's ParallelConfig defaults
            value = raw.get(name, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ParallelConfigError(f"{where}.{name}: must be a positive integer, got {value!r}")
            values[name] = value
        cfg = cls(**values)
        cfg.validate(where=where)
        return cfg

    def validate(self, model: Qwen3_5MoeTextConfig | None = None, where: str = "parallel_config") -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ParallelConfigError(f"{where}.{name}: must be a positive integer, got {value!r}")
        w = self.world_size
        for name in FIELDS[1:]:
            size = getattr(self, name)
            if w % size:
                raise ParallelConfigError(f"{where}.{name}: {size} does not divide world_size {w}")
        if self.moe_tp_size > 1 and self.moe_ep_size > 1:
            raise ParallelConfigError(
                f"{where}.moe_tp_size: mixed MoE TP and EP is not supported (moe_tp_size {self.moe_tp_size} gives "
                f"moe_ep_size {self.moe_ep_size}); use moe_tp_size 1 (pure EP) or {w} (pure TP)")
        if model is None:
            return
        checks = (
            ("attn_tp_size", self.attn_tp_size, "num_attention_heads", model.num_attention_heads),
            ("attn_tp_size", self.attn_tp_size, "linear_num_key_heads", model.linear_num_key_heads),
            ("attn_tp_size", self.attn_tp_size, "linear_num_value_heads", model.linear_num_value_heads),
            ("moe_tp_size", self.moe_tp_size, "moe_intermediate_size", model.moe_intermediate_size),
            ("shared_tp_size", self.shared_tp_size, "shared_expert_intermediate_size",
             model.shared_expert_intermediate_size),
            ("embed_tp_size", self.embed_tp_size, "vocab_size", model.vocab_size),
            ("lmhead_tp_size", self.lmhead_tp_size, "vocab_size", model.vocab_size),
        )
        for name, size, model_field, total in checks:
            if total % size:
                raise ParallelConfigError(f"{where}.{name}: {size} does not divide {model_field} ({total})")
        if model.num_experts % self.moe_ep_size:
            raise ParallelConfigError(
                f"{where}: moe_ep_size {self.moe_ep_size} (world_size {w} // moe_tp_size {self.moe_tp_size}) "
                f"does not divide num_experts ({model.num_experts})")
        kv = model.num_key_value_heads
        if self.attn_tp_size > kv and self.attn_tp_size % kv:
            raise ParallelConfigError(f"{where}.attn_tp_size: {self.attn_tp_size} must be a multiple of "
                                      f"num_key_value_heads ({kv}) when larger than it (KV heads are replicated)")
        if self.attn_tp_size <= kv and kv % self.attn_tp_size:
            raise ParallelConfigError(f"{where}.attn_tp_size: {self.attn_tp_size} does not divide "
                                      f"num_key_value_heads ({kv})")

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "moe_ep_size": self.moe_ep_size}
