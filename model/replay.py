"""Replaying a reference's decisions in another run, so that two runs of one model compute the same thing at
every row, step and layer and can be compared everywhere, each layer on its own.

A rounding difference can flip a near-tied expert choice or greedy token, and a deep random-weight model amplifies
a layer's rounding several-fold by the last layer; compared at the logits alone, a legit fused kernel in bf16 then
moves them as much as a wrong kernel that is off by 2 %. So a replayed run
- is fed the reference's greedy tokens at every decode step (teacher forcing);
- uses the reference's experts at every MoE layer, weighted by its own router (routing replay, as RL rollout systems
  keep training and inference MoE numerics consistent);
- feeds every decoder layer the reference's inputs to that layer (hidden states and residual), and hands back each
  layer's branch outputs (the mixer's and the MoE block's), so that a layer's error is its own kernels' error only.

`LayerTap` carries one forward's layer inputs [L, 2, B, T, H] (hidden, residual; layer 0 has no residual) and
branch outputs [L, 2, B, T, H] (mixer, MoE). Recording writes the inputs; replaying reads them. Both write the
outputs. The tensors are plain inputs of a forward, so a compiled decode step takes them as graph inputs.

Taps are kept on the host (4 values of the hidden size per layer and token, a run's whole generation: more than
the model's own activations for long runs). The eager prefill's tap lives on the host and streams one layer at a
time (each layer's inputs are moved to the device as it enters, each branch output copied back as it is made);
a decode step's tap, a graph input, is on the device for that step only and moved to the host after it
(`Capture.to_host`). A replay's layer inputs stay where they were given (the host) until their forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model.routing_log import RoutedCall

MIXER, MOE = 0, 1  # the branch outputs a layer hands back, by index


@dataclass(frozen=True)
class LayerTap:
    inputs: torch.Tensor
    outputs: torch.Tensor
    force: bool  # True: feed each layer inputs[layer]; False: record what each layer got into inputs[layer]

    @classmethod
    def empty(cls, layers: int, hidden: torch.Tensor) -> LayerTap:
        """Buffers for recording a forward whose hidden states look like `hidden` [B, T, H]."""
        shape = (layers, 2, *hidden.shape)
        return cls(hidden.new_zeros(shape), hidden.new_zeros(shape), force=False)

    def enter(self, layer: int, hidden: torch.Tensor, residual: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.force:
            forced = self.inputs[layer].to(hidden.device, hidden.dtype)
            return forced[0], None if residual is None else forced[1]
        self.inputs[layer, 0].copy_(hidden)
        if residual is not None:
            self.inputs[layer, 1].copy_(residual)
        return hidden, residual

    def branch(self, layer: int, which: int, out: torch.Tensor) -> None:
        self.outputs[layer, which].copy_(out)


@dataclass
class Capture:
    """Filled by a generation: each forward's (prefill, then each decode step) layer tap, on the host."""

    taps: list[LayerTap] = field(default_factory=list)

    def to_host(self, inputs: torch.Tensor | None = None) -> None:
        """Move the last tap to the host once its forward ran (`inputs`: a replay's host copy of its inputs, kept
        instead of copying them back)."""
        last = self.taps[-1]
        host = inputs if inputs is not None else last.inputs.cpu()
        self.taps[-1] = LayerTap(host, last.outputs.cpu(), last.force)


@dataclass(frozen=True)
class Replay:
    """What one generation replays.

    tokens [B, S]: the reference's greedy tokens; decode step i is fed tokens[:, i].
    prefill_ids [L, B*T, K]: the expert ids of every prefill token at every layer (row-major over the padded
    batch); decode_ids [S-1, L, B, K]: those of each decode step.
    layer_inputs: per forward (prefill, then each decode step), every layer's inputs [L, 2, B, T, H], or None to
    let each layer take the previous one's output.
    """

    tokens: torch.Tensor
    prefill_ids: torch.Tensor
    decode_ids: torch.Tensor
    layer_inputs: list[torch.Tensor] | None = None

    @classmethod
    def of(cls, tokens: torch.Tensor, calls: list[RoutedCall], num_layers: int,
           device: torch.device | str = "cpu", layer_inputs: list[torch.Tensor] | None = None) -> Replay:
        """From a reference's tokens, routing log (every layer's prefill call, then every decode step's calls in
        layer order) and, optionally, its recorded layer inputs. Raises ValueError when the log does not cover
        the generation."""
        steps = tokens.shape[1]
        prefill = [c for c in calls if c.prefill]
        decode = [c for c in calls if not c.prefill]
        if [c.layer for c in prefill] != list(range(num_layers)):
            raise ValueError(f"the reference's routing log has prefill calls for layers "
                             f"{[c.layer for c in prefill]}, expected 0..{num_layers - 1}")
        expected = [layer for _ in range(steps - 1) for layer in range(num_layers)]
        if [c.layer for c in decode] != expected:
            raise ValueError(f"the reference's routing log has {len(decode)} decode calls, expected "
                             f"{len(expected)} ({steps - 1} steps x {num_layers} layers)")
        if layer_inputs is not None and len(layer_inputs) != steps:
            raise ValueError(f"the reference recorded layer inputs for {len(layer_inputs)} forwards, expected "
                             f"{steps}")
        prefill_ids = torch.stack([c.ids for c in prefill])
        k = prefill_ids.shape[-1]
        decode_ids = (torch.stack([c.ids for c in decode]).reshape(steps - 1, num_layers, -1, k) if decode
                      else prefill_ids.new_empty(0, num_layers, tokens.shape[0], k))
        inputs = None if layer_inputs is None else list(layer_inputs)  # moved forward by forward (`tap`)
        return cls(tokens.to(device), prefill_ids.to(device), decode_ids.to(device), inputs)

    def tap(self, forward: int, outputs_like: torch.Tensor) -> LayerTap:
        """The tap of forward `forward` (0 = prefill): the reference's inputs and fresh output buffers, both on
        `outputs_like`'s device."""
        assert self.layer_inputs is not None
        inputs = self.layer_inputs[forward].to(outputs_like.device)
        return LayerTap(inputs, torch.zeros_like(inputs, dtype=outputs_like.dtype, device=outputs_like.device),
                        force=True)
