"""`perfbench list`: toggles (what each replaces, phases, implementations), model presets, scenario options
(key path, default, help), shipped scenarios."""

from __future__ import annotations

from model.config import PRESETS, Qwen3_5MoeTextConfig
from model.optimizations import TOGGLES


def _params(cfg: Qwen3_5MoeTextConfig) -> int:
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    experts = cfg.num_experts * 3 * h * cfg.moe_intermediate_size
    shared = 3 * h * cfg.shared_expert_intermediate_size
    attn = h * (cfg.num_attention_heads * 2 + 2 * cfg.num_key_value_heads) * cfg.head_dim + \
        cfg.num_attention_heads * cfg.head_dim * h
    gdn = h * (cfg.linear_conv_dim + cfg.linear_value_dim + 2 * cfg.linear_num_value_heads) + cfg.linear_value_dim * h
    mixers = sum(attn if t == "full_attention" else gdn for t in cfg.layer_types)
    return mixers + layers * (experts + shared + cfg.num_experts * h) + 2 * cfg.vocab_size * h


def listing(what: str) -> str:
    if what == "toggles":
        lines = []
        for spec in TOGGLES.values():
            lines.append(f"{spec.name}  [{', '.join(spec.phases)}]  replaces: {spec.replaces}")
            for device, impl in spec.impls.items():
                lines.append(f"    {device:<5} {impl or '(not implemented: inactive)'}")
        return "\n".join(lines)
    if what == "presets":
        lines = []
        for name, make in PRESETS.items():
            cfg = make()
            lines.append(f"{name:<16} {_params(cfg) / 1e6:>9.1f}M params  hidden {cfg.hidden_size}, "
                         f"{cfg.num_hidden_layers} layers, {cfg.num_experts} experts top-{cfg.num_experts_per_tok}, "
                         f"vocab {cfg.vocab_size}")
        return "\n".join(lines)
    if what == "options":
        from perfbench.config.scenario import SECTIONS
        from perfbench.config.schema import options

        rows = [row for section in SECTIONS.values() if section is not None for row in options(section)]
        width = max(len(path) for path, _, _ in rows)
        return "\n".join(f"{path:<{width}}  {default:<9} {help_text}".rstrip() for path, default, help_text in rows)
    from perfbench.config.scenario import list_scenarios

    return "\n".join(f"{name:<24} {summary}" for name, summary in list_scenarios())
