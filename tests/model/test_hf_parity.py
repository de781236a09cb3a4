"""Our unfused reference model equals HF transformers' Qwen3_5MoeForCausalLM (the independent oracle)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from model import Qwen3_5MoeForCausalLM
from model.config import Qwen3_5MoeTextConfig
from tests.hf_reference import build_hf_model, hf_greedy, random_prompts, save_hf_checkpoint, second_config

pytest.importorskip("transformers")

LENGTHS = [5, 37, 64, 130]
NEW_TOKENS = 16


CONFIGS = {"tiny": Qwen3_5MoeTextConfig.tiny, "second": second_config}


@pytest.fixture(scope="module", params=list(CONFIGS))
def case(request, tmp_path_factory):
    config = CONFIGS[request.param]()
    hf = build_hf_model(config, seed=1)
    folder = save_hf_checkpoint(hf, tmp_path_factory.mktemp(request.param))
    prompts = random_prompts(LENGTHS, config.vocab_size, seed=2)
    return config, folder, prompts, hf_greedy(hf, prompts, NEW_TOKENS)


def test_ragged_batch_matches_hf(case):
    config, folder, prompts, ref = case
    model = Qwen3_5MoeForCausalLM.from_pretrained(str(folder), dtype=torch.float32, optimizations="none")
    assert dataclasses.asdict(model.config)["layer_types"] == config.layer_types
    out = model.generate(prompts, max_new_tokens=NEW_TOKENS)
    assert out.logits.shape == (len(prompts), NEW_TOKENS, config.vocab_size)
    for i in range(len(prompts)):
        assert out.tokens[i] == ref.tokens[i], f"prompt {i} (len {len(prompts[i])}): tokens differ"
        err = (out.logits[i] - ref.logits[i]).abs().max().item()
        assert err <= 1e-4, f"prompt {i} (len {len(prompts[i])}): max abs logit diff {err:.3g}"


def test_cached_decode_equals_full_forward(case):
    _, folder, prompts, _ = case
    model = Qwen3_5MoeForCausalLM.from_pretrained(str(folder), dtype=torch.float32, optimizations="none")
    out = model.generate(prompts, max_new_tokens=8)
    # the full sequence of each prompt + its generated tokens (except the last, whose logits were not needed)
    for i, prompt in enumerate(prompts):
        seq = torch.tensor([prompt + out.tokens[i][:-1]])
        full = model(seq)[0, len(prompt) - 1:]
        err = (full - out.logits[i]).abs().max().item()
        assert err <= 1e-4, f"prompt {i}: cached decode vs no-cache forward differ by {err:.3g}"
