"""The numerics replay's layer taps live on the host: the prefill's tap is a host buffer streamed a layer at a time,
a decode step's is on the device for that step only, and a replay's layer inputs stay on the host until their
forward (model/replay.py). "meta" stands in for an accelerator: a tap put on the device shows there."""

from __future__ import annotations

import pytest
import torch

from model.modeling import Qwen3_5MoeForCausalLM
from model.replay import Capture, Replay


@pytest.fixture(scope="module")
def recorded() -> tuple[Qwen3_5MoeForCausalLM, torch.Tensor, torch.Tensor, Capture, list]:
    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", dtype=torch.float32, device="cpu", optimizations="none",
                                                  dummy_weights=True, seed=0, num_layers=2)
    ids, seq_lens = model.pad_prompts([[1, 2, 3, 4, 5], [6, 7]])
    capture = Capture()
    with model.routing_log.recording() as log:
        tokens, _ = model.generate_padded(ids, seq_lens, model.new_cache(2, 9), 4, capture=capture)
    return model, ids, tokens, capture, list(log.calls)


def test_a_replay_keeps_its_layer_inputs_on_the_host_until_their_forward(recorded) -> None:
    model, _, tokens, capture, calls = recorded
    inputs = [t.inputs for t in capture.taps]
    replay = Replay.of(tokens, calls, model.config.num_hidden_layers, "meta", layer_inputs=inputs)
    assert replay.tokens.device.type == "meta"  # the small parts go to the device
    assert all(x is y for x, y in zip(replay.layer_inputs or [], inputs))  # the taps stay where they were given
    tap = replay.tap(1, torch.empty(0, device="meta"))
    assert tap.inputs.device.type == tap.outputs.device.type == "meta"  # one forward, when it runs
    assert replay.layer_inputs is not None and replay.layer_inputs[1].device.type == "cpu"


def test_the_prefill_tap_is_on_the_host_and_a_decode_steps_on_the_device(recorded, monkeypatch) -> None:
    model = recorded[0]
    monkeypatch.setattr(model, "device", torch.device("meta"))
    capture = Capture()
    prefill = model._tap(0, capture, None, 2, 5)
    decode = model._tap(1, capture, None, 2, 1)
    assert prefill is not None and prefill.inputs.device.type == prefill.outputs.device.type == "cpu"
    assert decode is not None and decode.outputs.device.type == "meta"


def test_a_replayed_generation_captures_every_tap_on_the_host_without_copying_the_inputs(recorded) -> None:
    model, ids, tokens, capture, calls = recorded
    inputs = [t.inputs for t in capture.taps]
    replay = Replay.of(tokens, calls, model.config.num_hidden_layers, "cpu", layer_inputs=inputs)
    again = Capture()
    seq_lens = torch.tensor([5, 2])
    model.generate_padded(ids, seq_lens, model.new_cache(2, 9), 4, replay=replay, capture=again)
    assert len(again.taps) == 4 and all(t.outputs.device.type == "cpu" for t in again.taps)
    assert all(t.inputs is x for t, x in zip(again.taps[1:], inputs[1:]))  # the host inputs, not a copy back
    # the same model replaying its own reference: every branch output is what it recorded
    for got, want in zip(again.taps, capture.taps):
        torch.testing.assert_close(got.outputs, want.outputs)
