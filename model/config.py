"""Qwen3.5-MoE text config with HF field names, read from a checkpoint's config.json, plus presets.

Field names and defaults mirror transformers' `Qwen3_5MoeTextConfig` (the released 35B-A3B values), so a
checkpoint's `config.json` (text-only, or the multimodal form with a nested `text_config`) maps 1:1.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAYER_TYPES = ("linear_attention", "full_attention")


# the multimodal checkpoint's and its text model's; another model's config.json would load and measure nonsense
MODEL_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")


class ConfigError(ValueError):
    """A config.json or preset that cannot describe a model; the message names the file and field."""


def _check_model_type(model_type: Any, source: str, name: str) -> None:
    if model_type is not None and model_type not in MODEL_TYPES:
        raise ConfigError(f"{source}: `{name}` {model_type!r} is not a Qwen3.5-MoE checkpoint "
                          f"(expected {' or '.join(map(repr, MODEL_TYPES))})")


@dataclass
class Qwen3_5MoeTextConfig:
    vocab_size: int = 248320
    hidden_size: int = 2048
    num_hidden_layers: int = 40
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    mrope_section: list[int] = field(default_factory=lambda: [11, 11, 10])
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    num_experts_per_tok: int = 8
    num_experts: int = 256
    full_attention_interval: int = 4
    layer_types: list[str] = field(default_factory=list)  # empty (or null in config.json): the default pattern
    eos_token_id: int | list[int] | None = None
    # keys of config.json we do not use, kept for the record instead of failing on them
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.layer_types:
            self.layer_types = [
                "full_attention" if (i + 1) % self.full_attention_interval == 0 else "linear_attention"
                for i in range(self.num_hidden_layers)
            ]
        self.validate()

    # ---- derived sizes -------------------------------------------------------------------------
    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    def validate(self, source: str = "config") -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"{source}: `{name}` {why}, got {getattr(self, name)!r}")

        for name in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
            "linear_num_key_heads", "linear_num_value_heads", "moe_intermediate_size",
            "shared_expert_intermediate_size", "num_experts_per_tok", "num_experts", "full_attention_interval",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise bad(name, "must be a positive integer")
        if self.hidden_act != "silu":
            raise bad("hidden_act", "must be 'silu' (the only activation Qwen3.5-MoE uses)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise bad("num_attention_heads", f"must be a multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise bad("linear_num_value_heads", f"must be a multiple of linear_num_key_heads "
                                                f"({self.linear_num_key_heads})")
        if self.num_experts_per_tok > self.num_experts:
            raise bad("num_experts_per_tok", f"must be <= num_experts ({self.num_experts})")
        if not 0 < self.partial_rotary_factor <= 1 or self.rotary_dim % 2:
            raise bad("partial_rotary_factor", f"must give an even rotary dim in (0, head_dim={self.head_dim}]")
        # NaN passes `<= 0` (every comparison with it is false): finiteness is checked by name
        if not isinstance(self.rms_norm_eps, (int, float)) or not math.isfinite(self.rms_norm_eps) \
                or self.rms_norm_eps <= 0:
            raise bad("rms_norm_eps", f"must be a positive finite number, got {self.rms_norm_eps!r}")
        if not isinstance(self.rope_theta, (int, float)) or not math.isfinite(self.rope_theta) or self.rope_theta <= 0:
            raise bad("rope_theta", f"must be a positive finite number, got {self.rope_theta!r}")
        if len(self.layer_types) != self.num_hidden_layers:
            raise ConfigError(f"{source}: `layer_types` has {len(self.layer_types)} entries but "
                              f"num_hidden_layers is {self.num_hidden_layers}")
        unknown = sorted(set(self.layer_types) - set(LAYER_TYPES))
        if unknown:
            raise ConfigError(f"{source}: `layer_types` has unknown entries {unknown}; allowed {list(LAYER_TYPES)}")

    # ---- construction --------------------------------------------------------------------------
    def with_layers(self, num_layers: int) -> Qwen3_5MoeTextConfig:
        """The same model cut (or extended, by repeating the layer pattern) to `num_layers` layers."""
        if num_layers <= 0:
            raise ConfigError(f"layer-count override must be a positive integer, got {num_layers}")
        types = [self.layer_types[i % len(self.layer_types)] for i in range(num_layers)]
        return dataclasses.replace(self, num_hidden_layers=num_layers, layer_types=types)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config.json") -> Qwen3_5MoeTextConfig:
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: expected a JSON object")
        _check_model_type(raw.get("model_type"), source, "model_type")
        if "text_config" in raw:  # multimodal Qwen3_5MoeConfig wraps the text model's config
            if not isinstance(raw["text_config"], dict):
                raise ConfigError(f"{source}: `text_config` must be an object")
            raw = raw["text_config"]
            _check_model_type(raw.get("model_type"), source, "text_config.model_type")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "rope_theta", "partial_rotary_factor",
                                                              "mrope_section"}
        kwargs: dict[str, Any] = {k: raw[k] for k in known if k in raw}
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ConfigError(f"{source}: `rope_parameters` must be an object")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", "mrope"):
            raise ConfigError(f"{source}: `rope_parameters.rope_type` {rope_type!r} is not supported "
                              f"(only 'default')")
        for key in ("rope_theta", "partial_rotary_factor", "mrope_section"):
            if key in rope:
                kwargs[key] = rope[key]
            elif key in raw:
                kwargs[key] = raw[key]
        kwargs["extra"] = {k: v for k, v in raw.items() if k not in known and k != "rope_parameters"}
        for name, typ in (("rms_norm_eps", (int, float)), ("rope_theta", (int, float)),
                          ("partial_rotary_factor", (int, float))):
            if name in kwargs and (not isinstance(kwargs[name], typ) or isinstance(kwargs[name], bool)):
                raise ConfigError(f"{source}: `{name}` must be a number, got {kwargs[name]!r}")
        try:
            cfg = cls(**kwargs)
        except ConfigError as err:
            raise ConfigError(str(err).replace("config:", f"{source}:", 1)) from None
        except TypeError as err:
            raise ConfigError(f"{source}: {err}") from None
        return cfg

    @classmethod
    def from_json_file(cls, path: str | Path) -> Qwen3_5MoeTextConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config.json not found")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
        required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
        text = raw.get("text_config", raw) if isinstance(raw, dict) else raw
        if isinstance(text, dict):
            missing = [k for k in required if k not in text]
            if missing:
                raise ConfigError(f"{path}: missing required field `{missing[0]}`")
        return cls.from_dict(raw, source=str(path))

    def to_hf_dict(self) -> dict[str, Any]:
        """config.json content in HF's text-config form."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("extra", "rope_theta", "partial_rotary_factor", "mrope_section")}
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rope_theta,
                                  "partial_rotary_factor": self.partial_rotary_factor,
                                  "mrope_section": list(self.mrope_section)}
        out["model_type"] = "qwen3_5_moe_text"
        return out

    # ---- presets -------------------------------------------------------------------------------
    @classmethod
    def tiny(cls) -> Qwen3_5MoeTextConfig:
        """17.6M params: the CPU peer model of docs/model_hf.md section 4."""
        return cls(vocab_size=4096, hidden_size=256, num_hidden_layers=8, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=64, rope_theta=1e7, partial_rotary_factor=0.25,
                   mrope_section=[3, 3, 2], linear_num_key_heads=4, linear_key_head_dim=32,
                   linear_num_value_heads=8, linear_value_head_dim=32, num_experts=16, num_experts_per_tok=4,
                   moe_intermediate_size=128, shared_expert_intermediate_size=128)

    @classmethod
    def small(cls) -> Qwen3_5MoeTextConfig:
        """~0.5B params (~2 GB fp32): far beyond the 480 MB L3 here, for decode-bandwidth measurements."""
        return cls(vocab_size=32000, hidden_size=1024, num_hidden_layers=8, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=128, rope_theta=1e7, partial_rotary_factor=0.25,
                   mrope_section=[6, 5, 5], linear_num_key_heads=8, linear_key_head_dim=64,
                   linear_num_value_heads=16, linear_value_head_dim=64, num_experts=64, num_experts_per_tok=4,
                   moe_intermediate_size=256, shared_expert_intermediate_size=512)

    @classmethod
    def qwen3_5_35b_a3b(cls) -> Qwen3_5MoeTextConfig:
        """The published Qwen3.5-35B-A3B text model (rope_theta 1e7 as the released checkpoint)."""
        return cls(rope_theta=1e7)

    @classmethod
    def qwen3_5_122b_a10b(cls) -> Qwen3_5MoeTextConfig:
        """Qwen3.5-122B-A10B text model as public configs give it (48 layers, 1 in 4 full attention, 256
        experts top-8); for cost estimates without the checkpoint (its config.json is authoritative)."""
        return cls(hidden_size=3072, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=2,
                   linear_num_value_heads=64, moe_intermediate_size=1024, shared_expert_intermediate_size=1024,
                   rope_theta=1e7)

    @classmethod
    def qwen3_5_397b_a17b(cls) -> Qwen3_5MoeTextConfig:
        """Qwen3.5-397B-A17B text model as public configs give it (60 layers, 512 experts top-10); for cost
        estimates without the checkpoint (its config.json is authoritative)."""
        return cls(hidden_size=4096, num_hidden_layers=60, num_attention_heads=32, num_key_value_heads=2,
                   linear_num_value_heads=64, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=1024,
                   shared_expert_intermediate_size=1024, rope_theta=1e7)


PRESETS = {
    "tiny": Qwen3_5MoeTextConfig.tiny,
    "small": Qwen3_5MoeTextConfig.small,
    "qwen3.5-35b-a3b": Qwen3_5MoeTextConfig.qwen3_5_35b_a3b,
    "qwen3.5-122b-a10b": Qwen3_5MoeTextConfig.qwen3_5_122b_a10b,
    "qwen3.5-397b-a17b": Qwen3_5MoeTextConfig.qwen3_5_397b_a17b,
}


def load_config(path_or_preset: str | Path, num_layers: int | None = None) -> Qwen3_5MoeTextConfig:
    """A preset name, a checkpoint folder (its config.json) or a config.json path."""
    key = str(path_or_preset)
    if key in PRESETS:
        cfg = PRESETS[key]()
    else:
        path = Path(key)
        if path.is_dir():
            path = path / "config.json"
        elif not path.exists():
            raise ConfigError(f"{key}: no such checkpoint folder, config.json or preset "
                              f"(presets: {', '.join(PRESETS)})")
        cfg = Qwen3_5MoeTextConfig.from_json_file(path)
    return cfg.with_layers(num_layers) if num_layers is not None else cfg
