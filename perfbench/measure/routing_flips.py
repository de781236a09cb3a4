"""Where a run's own expert choices differ from the reference's: information beside the numerics, never a reason
not to compare (the comparison replays the reference's choices: model/replay.py).

Rounding flips near-tied choices (exact ties are common in bf16 with hundreds of experts), so a few flips at
margins near zero are expected; flips at wide margins point at a router or a layer before it computing something
else. A compiled decode step logs nothing, so a graph_mode run's decode calls are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.routing_log import RoutedCall


@dataclass(frozen=True)
class RoutingFlips:
    """How many (token, layer) choices differ, the first step (0 = prefill, i = decode step i) where one did, the
    widest reference margin among them, and how many calls both logs had."""

    flips: int
    first_step: int | None
    widest_margin: float | None
    calls_compared: int


def rounding_flips(reference: list[RoutedCall], run: list[RoutedCall]) -> RoutingFlips:
    """Compare the calls of the two logs in order within each phase (the run's phase may be shorter: a compiled
    decode step logs nothing)."""
    flips, compared, first, widest = 0, 0, None, None
    layers = max(sum(c.prefill for c in reference), 1)
    for prefill in (True, False):
        ref_calls = [c for c in reference if c.prefill == prefill]
        run_calls = [c for c in run if c.prefill == prefill]
        for i, (ref, got) in enumerate(zip(ref_calls, run_calls)):
            if ref.layer != got.layer or ref.ids.shape != got.ids.shape:
                raise ValueError(f"routing logs differ in shape at {'prefill' if prefill else 'decode'} call {i}: "
                                 f"layer {ref.layer} {tuple(ref.ids.shape)} vs layer {got.layer} "
                                 f"{tuple(got.ids.shape)}")
            compared += 1
            differs = (ref.chosen_sets() != got.chosen_sets()).any(dim=-1)
            count = int(differs.sum())
            if not count:
                continue
            flips += count
            step = 0 if prefill else 1 + i // layers
            first = step if first is None else min(first, step)
            margin = float(ref.margin[differs].max())
            widest = margin if widest is None else max(widest, margin)
    return RoutingFlips(flips, first, widest, compared)


def routing_to_tensors(calls: list[RoutedCall]) -> dict[str, torch.Tensor]:
    """A log as named tensors, to keep beside the reference logits (safetensors)."""
    out = {"routing.prefill": torch.tensor([c.prefill for c in calls], dtype=torch.int8),
           "routing.layer": torch.tensor([c.layer for c in calls], dtype=torch.int32)}
    for i, c in enumerate(calls):
        out[f"routing.{i}.ids"] = c.ids.contiguous()
        out[f"routing.{i}.margin"] = c.margin.contiguous()
    return out


def routing_from_tensors(tensors: dict[str, torch.Tensor]) -> list[RoutedCall]:
    """The log written by `routing_to_tensors`; empty for a file written before logs were kept."""
    if "routing.prefill" not in tensors:
        return []
    return [RoutedCall(bool(p), int(layer), tensors[f"routing.{i}.ids"], tensors[f"routing.{i}.margin"])
            for i, (p, layer) in enumerate(zip(tensors["routing.prefill"].tolist(),
                                               tensors["routing.layer"].tolist()))]
