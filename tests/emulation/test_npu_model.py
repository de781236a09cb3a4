"""The whole model on the emulated NPU: every toggle requested, ragged batch, eager and graph mode, per
platform; greedy tokens equal the CPU all-off model's.

Dims: the tiny preset with the head dims the NPU ops document (GDN Dk = Dv = 128 for the chunk op; attention
head_dim 256 takes FIA v1 BSH, 128 takes FIA v2 TND). bf16 throughout (FIA has no fp32); logits may differ by
bf16 rounding at different points of the two paths over 4 layers, so both models decode the CPU model's greedy
tokens (teacher forcing), logits are compared with a tolerance, and the argmax must agree wherever the CPU
model's top-2 margin exceeds twice that tolerance.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from model import Qwen3_5MoeForCausalLM
from model.backend import detect_capabilities
from model.config import Qwen3_5MoeTextConfig
from model.optimizations import TOGGLE_NAMES
from perfbench.emulation import npu

pytestmark = [pytest.mark.npu_emulated, pytest.mark.slow]
PROMPTS = [[5, 17, 300, 999, 12, 40, 41], [7, 8], [1, 2, 3, 4]]
NEW_TOKENS = 4
# bf16 logits of two op paths. The largest difference (~0.2 in decode) is the NPU GDN decode's state, rounded to
# bf16 every step by design (model/ops/gdn.py _gdr_decode_bnvd); prefill logits agree within ~0.02.
LOGIT_TOL = 0.3
TOKEN_AGREEMENT = 0.75  # share of teacher-forced greedy tokens that must match the CPU model's
NEEDS_WORLD = {"mm_all_reduce", "moe_dispatch_combine"}  # multi-rank toggles: inactive at world size 1


@torch.inference_mode()
def _forced_logits(model: Qwen3_5MoeForCausalLM, tokens: list[list[int]]) -> torch.Tensor:
    """Prefill the prompts, then decode the given tokens (the CPU model's greedy ones), so both models see the
    same inputs at every step; [B, NEW_TOKENS, V] fp32 logits."""
    ids, seq_lens = model.pad_prompts(PROMPTS)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + NEW_TOKENS)
    steps = [model.prefill(ids, seq_lens, cache)]
    forced = torch.tensor(tokens)
    for i in range(NEW_TOKENS - 1):
        steps.append(model.decode_step(forced[:, i], cache))
    return torch.stack(steps, dim=1).float()


def _config(tmp_path: Path, head_dim: int) -> Path:
    config = dataclasses.replace(Qwen3_5MoeTextConfig.tiny(), head_dim=head_dim, linear_key_head_dim=128,
                                 linear_value_head_dim=128).with_layers(4)
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    return tmp_path


# every platform in both modes; each attention variant (BSH 256, TND 128) in both modes
CASES = [("910b", "eager", 256), ("910b", "ge_graph", 256), ("910_93", "eager", 128), ("910_93", "ge_graph", 128),
         ("950", "eager", 128), ("950", "ge_graph", 256)]


@pytest.mark.parametrize(("key", "exe", "head_dim"), CASES)
def test_all_toggles_match_cpu_all_off(emulate, tmp_path: Path, key: str, exe: str, head_dim: int) -> None:
    path = _config(tmp_path, head_dim)
    reference = Qwen3_5MoeForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device="cpu",
                                                      optimizations="none", dummy_weights=True, seed=0)
    expected = reference.generate(PROMPTS, max_new_tokens=NEW_TOKENS)
    emulate(key)
    toggles = {t: t != "graph_mode" or exe != "eager" for t in TOGGLE_NAMES}
    model = Qwen3_5MoeForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, device=npu.tensor_device("npu"), optimizations=toggles, dummy_weights=True,
        seed=0, caps=detect_capabilities("npu"), exe_mode="ge_graph")
    off = {n: d.reason for n, d in model.plan.decisions.items()
           if d.requested and not d.on and n not in NEEDS_WORLD}
    # a toggle the plan turns off must say why; the platform rules are the emulator's to enforce
    assert all(off.values()), off
    got = _forced_logits(model, expected.tokens)
    # the library's own loop runs too (TND decode reads whole 128-token blocks: new_cache rounds up for it)
    assert [len(t) for t in model.generate(PROMPTS, max_new_tokens=NEW_TOKENS).tokens] == [NEW_TOKENS] * 3
    torch._dynamo.reset()
    want = _forced_logits(reference, expected.tokens)
    assert (got - want).abs().max().item() <= LOGIT_TOL
    top2 = want.topk(2, dim=-1).values
    decisive = (top2[..., 0] - top2[..., 1]) > 2 * LOGIT_TOL  # no bf16 rounding can flip these
    # dummy weights give near-uniform logits (std ~0.3 here): a few near-ties may flip under bf16 rounding
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() >= TOKEN_AGREEMENT
    assert torch.equal(got.argmax(-1)[decisive], want.argmax(-1)[decisive])
