"""The routing log: off records nothing; on, each MoE call's ids as the route op chose them and each token's margin
(smallest chosen minus largest unchosen router probability), in call order (prefill, then each decode step)."""

from __future__ import annotations

import math

import pytest
import torch

from model.modeling import Qwen3_5MoeForCausalLM
from model.routing_log import RoutingLog


def test_a_call_logs_the_ops_ids_and_the_margin() -> None:
    log = RoutingLog()
    # softmax of log([1, 2, 4, 1]) = [1/8, 2/8, 4/8, 1/8]: top 2 are experts 2 and 1; margin 2/8 - 1/8
    logits = torch.log(torch.tensor([[1.0, 2.0, 4.0, 1.0]]))
    log.record(0, True, logits, torch.tensor([[2, 1]]))
    assert log.calls == []                                   # off by default
    with log.recording():
        log.record(3, False, logits, torch.tensor([[2, 1]]))
        log.record(4, False, logits, torch.tensor([[2, 0]]))  # an op that chose expert 0 over expert 1
    first, second = log.calls
    assert (first.prefill, first.layer, first.ids.tolist()) == (False, 3, [[2, 1]])   # the op's order kept
    assert first.margin.tolist() == pytest.approx([0.125])
    assert second.margin.tolist() == pytest.approx([-0.125])  # chosen 1/8 against an unchosen 2/8
    with log.recording():
        log.record(0, True, logits, torch.tensor([[0, 1, 2, 3]]))  # every expert chosen: nothing can flip
    assert math.isinf(log.calls[0].margin.item())


def test_a_generation_logs_every_moe_call_in_order() -> None:
    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=2, dummy_weights=True, seed=0)
    config = model.config
    with model.routing_log.recording() as log:
        model.generate([[3, 5, 7, 11, 13], [2, 4, 6]], max_new_tokens=3)
    k = config.num_experts_per_tok
    assert [(c.prefill, c.layer, tuple(c.ids.shape)) for c in log.calls] == (
        [(True, 0, (10, k)), (True, 1, (10, k))] + [(False, 0, (2, k)), (False, 1, (2, k))] * 2)
    assert all(bool((c.margin >= 0).all()) and bool((c.chosen_sets().diff(dim=-1) > 0).all()) for c in log.calls)
    model.generate([[3, 5]], max_new_tokens=2)
    assert len(log.calls) == 6                               # recording ended with the block
