"""Per-expert routing counts: equal to a top-k computed here from each MoE layer's input and router weight, sum
to tokens x top_k, cost nothing when off, and leave a compiled decode step alone."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from model.backend import detect_capabilities
from model.modeling import Qwen3_5MoeForCausalLM

PROMPTS = [[3, 5, 7, 11, 13, 17, 19], [2, 4, 6]]  # ragged: prefill routes the padded [2, 7] positions
NEW_TOKENS = 4


def tiny(optimizations: str | dict[str, bool] = "none", layers: int = 2) -> Qwen3_5MoeForCausalLM:
    return Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=layers, dummy_weights=True, seed=0,
                                                 optimizations=optimizations)


def router_weight(block: torch.nn.Module, num_experts: int) -> torch.Tensor:
    """The [E, H] router rows, whether the router shares one GEMM with the shared-expert gate or not."""
    gates = block.gates
    return gates.weight[:num_experts] if gates.merged else gates.weights[0]


def hand_counts(model: Qwen3_5MoeForCausalLM, run) -> dict[str, dict[int, list[int]]]:
    """Top-k of (MoE input @ router^T) per layer call, computed here from the captured inputs, then counted."""
    config = model.config
    seen: dict[str, dict[int, torch.Tensor]] = defaultdict(dict)

    def capture(layer: int):
        def hook(block, args):
            x, step = args
            logits = x.reshape(-1, x.shape[-1]).float() @ router_weight(block, config.num_experts).float().T
            ids = torch.topk(logits, config.num_experts_per_tok, dim=-1).indices
            phase = "prefill" if step.prefill else "decode"
            hits = torch.bincount(ids.reshape(-1), minlength=config.num_experts)
            seen[phase][layer] = seen[phase].get(layer, 0) + hits
        return hook

    handles = [layer.mlp.register_forward_pre_hook(capture(i)) for i, layer in enumerate(model.layers)]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return {phase: {layer: hits.tolist() for layer, hits in by_layer.items()} for phase, by_layer in seen.items()}


@pytest.mark.parametrize("optimizations", ["none", {"merged_projections": True, "grouped_moe": True}],
                         ids=["unfused", "merged-grouped"])
def test_counts_equal_a_top_k_of_the_router_logits(optimizations):
    model = tiny(optimizations)
    with model.expert_counts.recording():
        expected = hand_counts(model, lambda: model.generate(PROMPTS, max_new_tokens=NEW_TOKENS))
    got = model.expert_counts.totals()
    assert got == expected
    k = model.config.num_experts_per_tok
    prefill_tokens = len(PROMPTS) * max(map(len, PROMPTS))
    decode_tokens = len(PROMPTS) * (NEW_TOKENS - 1)
    for layer in range(len(model.layers)):
        assert sum(got["prefill"][layer]) == prefill_tokens * k
        assert sum(got["decode"][layer]) == decode_tokens * k
        assert len(got["prefill"][layer]) == model.config.num_experts


def test_nothing_is_recorded_when_off_and_each_recording_starts_from_zero():
    model = tiny(layers=1)
    model.generate(PROMPTS, max_new_tokens=2)
    assert model.expert_counts.totals() == {}
    for _ in range(2):
        with model.expert_counts.recording():
            model.generate(PROMPTS, max_new_tokens=2)
        once = model.expert_counts.totals()
        assert sum(once["prefill"][0]) == len(PROMPTS) * 7 * model.config.num_experts_per_tok
    assert not model.expert_counts.enabled


@pytest.mark.slow
@pytest.mark.skipif(not detect_capabilities("cpu").inductor, reason="graph_mode on CPU needs a C++ compiler")
def test_compiled_decode_records_no_counts_and_does_not_recompile():
    model = tiny({"graph_mode": True, "grouped_moe": True}, layers=1)
    assert model.plan.on("graph_mode")
    plain = model.generate(PROMPTS, max_new_tokens=3)  # compiles the decode step, recording off
    compiles = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with model.expert_counts.recording():
        counted = model.generate(PROMPTS, max_new_tokens=3)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == compiles
    assert counted.tokens == plain.tokens
    totals = model.expert_counts.totals()
    assert set(totals) == {"prefill"}  # prefill runs eagerly; the compiled decode step carries no recording
