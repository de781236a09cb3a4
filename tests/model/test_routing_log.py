"""The routing log: off records nothing; on, each MoE call's sorted top-k ids and its k-th minus (k+1)-th router
probability, in call order (prefill, then each decode step), as the numerics check needs."""

from __future__ import annotations

import math

import pytest
import torch

from model.modeling import Qwen3_5MoeForCausalLM
from model.routing_log import RoutingLog


def test_a_call_logs_sorted_ids_and_the_margin_at_k() -> None:
    log = RoutingLog()
    # softmax of log([1, 2, 4, 1]) = [1/8, 2/8, 4/8, 1/8]: top 2 are experts 2 and 1; margin 2/8 - 1/8
    logits = torch.log(torch.tensor([[1.0, 2.0, 4.0, 1.0]]))
    log.record(0, True, logits, 2)
    assert log.calls == []                                   # off by default
    with log.recording():
        log.record(3, False, logits, 2)
    (call,) = log.calls
    assert (call.prefill, call.layer, call.ids.tolist()) == (False, 3, [[1, 2]])
    assert call.margin.tolist() == pytest.approx([0.125])
    with log.recording():
        log.record(0, True, logits, 4)                       # every expert chosen: nothing can flip
    assert math.isinf(log.calls[0].margin.item())


def test_a_generation_logs_every_moe_call_in_order() -> None:
    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", num_layers=2, dummy_weights=True, seed=0)
    config = model.config
    with model.routing_log.recording() as log:
        model.generate([[3, 5, 7, 11, 13], [2, 4, 6]], max_new_tokens=3)
    k = config.num_experts_per_tok
    assert [(c.prefill, c.layer, tuple(c.ids.shape)) for c in log.calls] == (
        [(True, 0, (10, k)), (True, 1, (10, k))] + [(False, 0, (2, k)), (False, 1, (2, k))] * 2)
    assert all(bool((c.margin >= 0).all()) and bool((c.ids.diff(dim=-1) > 0).all()) for c in log.calls)
    model.generate([[3, 5]], max_new_tokens=2)
    assert len(log.calls) == 6                               # recording ended with the block
