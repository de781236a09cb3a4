"""HF transformers as the independent reference: build a random HF Qwen3.5-MoE, save it, decode greedily.

Used by the parity tests and by benchmarks/vs_transformers.py. transformers is a dev dependency only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from model.config import Qwen3_5MoeTextConfig


def hf_config(config: Qwen3_5MoeTextConfig):
    from transformers import Qwen3_5MoeTextConfig as HFConfig

    d = config.to_hf_dict()
    d.pop("model_type", None)
    d.pop("full_attention_interval", None)
    return HFConfig(**d)


def build_hf_model(config: Qwen3_5MoeTextConfig, seed: int = 0, perturb_norms: float = 0.1,
                   dtype: torch.dtype = torch.float32):
    """A randomly initialised HF model; 1-D parameters (norms, A_log, dt_bias) get N(0, perturb_norms) added so
    that a `w` vs `1 + w` mistake shows."""
    from transformers import Qwen3_5MoeForCausalLM as HFModel

    torch.manual_seed(seed)
    model = HFModel._from_config(hf_config(config), dtype=dtype).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * perturb_norms)
    return model


def save_hf_checkpoint(model, folder: Path) -> Path:
    model.save_pretrained(folder, safe_serialization=True)
    return folder


@dataclass
class Reference:
    tokens: list[list[int]]
    logits: list[torch.Tensor]  # per prompt [max_new_tokens, V] fp32


@torch.no_grad()
def hf_greedy(model, prompts: list[list[int]], max_new_tokens: int) -> Reference:
    """Each prompt decoded alone (no padding in the reference), logits of every chosen token."""
    tokens, logits = [], []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             min_new_tokens=max_new_tokens, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
        tokens.append(out.sequences[0, len(prompt):].tolist())
        logits.append(torch.stack([step[0].float() for step in out.logits]))
    return Reference(tokens, logits)


def random_prompts(lengths: list[int], vocab: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


def second_config() -> Qwen3_5MoeTextConfig:
    """A config unlike `tiny`: no GQA, other head dims, full attention every 3rd layer, vocab not a power of
    two, top-1 routing."""
    return Qwen3_5MoeTextConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=4,
        head_dim=32, rope_theta=1e6, partial_rotary_factor=0.5, mrope_section=[3, 3, 2],
        linear_num_key_heads=2, linear_key_head_dim=16, linear_num_value_heads=2, linear_value_head_dim=24,
        num_experts=8, num_experts_per_tok=1, moe_intermediate_size=64, shared_expert_intermediate_size=96,
        full_attention_interval=3)
