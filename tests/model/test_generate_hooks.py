"""The one generation loop: a step hook sees every forward, and scopes annotate phases and steps."""

from __future__ import annotations

import torch

from model.modeling import Qwen3_5MoeForCausalLM
from model.tracing import parse_scope

PROMPTS = [[3, 5, 7, 11, 13], [2, 4]]


def tiny() -> Qwen3_5MoeForCausalLM:
    return Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=1, dummy_weights=True, seed=0,
                                                 optimizations="none")


def test_step_hook_wraps_every_forward_and_leaves_the_output_alone():
    model = tiny()
    plain = model.generate(PROMPTS, max_new_tokens=4)
    seen = []

    def run_step(phase, step, forward):
        seen.append((phase, step))
        return forward()

    hooked = model.generate(PROMPTS, max_new_tokens=4, run_step=run_step)
    assert seen == [("prefill", 0), ("decode", 0), ("decode", 1), ("decode", 2)]
    assert hooked.tokens == plain.tokens and torch.equal(hooked.logits, plain.logits)


def test_step_scopes_without_layer_scopes():
    model = tiny()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with model.scopes.enable(layers=False):
            model.generate(PROMPTS, max_new_tokens=3)
    scopes = [parse_scope(e.name) for e in prof.events() if parse_scope(e.name)]
    assert [s for s in scopes if "phase" in s] == [{"phase": "prefill"}, {"phase": "decode", "step": "0"},
                                                   {"phase": "decode", "step": "1"}]
    assert not [s for s in scopes if "phase" not in s]  # no layer / module ranges
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with model.scopes.enable():
            model.generate(PROMPTS, max_new_tokens=2)
    assert any("module" in parse_scope(e.name) for e in prof.events())
    assert not model.scopes.enabled and not model.scopes.steps_enabled  # restored on exit
