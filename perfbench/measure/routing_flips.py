"""Where rounding flipped a near-tied expert choice: a run's routing against the reference's (model/routing_log.py).

A toggle that only rounds differently can still change which experts a token gets, when the reference's k-th and
(k+1)-th router probabilities were nearly tied; from that step on the two runs compute different (equally right)
things and their logits no longer answer the numerics question. A flip where the reference's margin was wide is
not rounding: it is left for the logit comparison to catch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.routing_log import RoutedCall
from perfbench.results.records import LOGIT_TOLERANCE

# A margin below this share of the dtype's logit tolerance counts as a near tie: fp32 rounding moves router
# probabilities by ~1e-7 (a flip at a margin of 2e-8 was seen), so 1e-5 leaves a wide berth and still excuses
# nothing a wrong kernel does to a margin of ordinary size (1e-3 and up on the tiny preset).
NEAR_TIE_SHARE = 1e-2


def near_tie_margin(dtype: str) -> float:
    return LOGIT_TOLERANCE.get(dtype, LOGIT_TOLERANCE["float32"]) * NEAR_TIE_SHARE


@dataclass(frozen=True)
class RoutingFlips:
    """Per batch row, the first step (0 = prefill, i = decode step i) at which a near-tied choice flipped, or None;
    with the reference's margin at the earliest such flip."""

    first_step: list[int | None]
    margin: float | None

    @property
    def step(self) -> int | None:
        steps = [s for s in self.first_step if s is not None]
        return min(steps) if steps else None


def _step_and_rows(call: RoutedCall, index_in_phase: int, layers: int, batch: int) -> tuple[int, torch.Tensor]:
    """The step of a call and the batch row of each of its tokens (prefill: B x T tokens row-major)."""
    tokens = call.ids.shape[0]
    if call.prefill:
        return 0, torch.arange(tokens) // max(tokens // batch, 1)
    return 1 + index_in_phase // max(layers, 1), torch.arange(tokens)


def rounding_flips(reference: list[RoutedCall], run: list[RoutedCall], batch: int, near_tie: float) -> RoutingFlips:
    """Compare the calls of the two logs in order within each phase (a compiled decode step logs nothing, so a
    phase may be shorter in the run); the first differing choice of a row counts when its reference margin is
    below `near_tie`."""
    first: list[int | None] = [None] * batch
    decided = [False] * batch  # a row's first difference was found (a near tie or not)
    margin_at: dict[int, float] = {}
    layers = sum(c.prefill for c in reference)
    for prefill in (True, False):
        ref_calls = [c for c in reference if c.prefill == prefill]
        run_calls = [c for c in run if c.prefill == prefill]
        for i, (ref, got) in enumerate(zip(ref_calls, run_calls)):
            if ref.layer != got.layer or ref.ids.shape != got.ids.shape:
                return RoutingFlips([None] * batch, None)  # not the same computation: excuse nothing
            step, rows = _step_and_rows(ref, i, layers, batch)
            differs = (ref.ids != got.ids).any(dim=-1)
            for row in rows[differs].unique().tolist():
                if decided[row]:
                    continue
                decided[row] = True
                margin = float(ref.margin[differs & (rows == row)].min())
                if margin < near_tie:
                    first[row] = step
                    margin_at[row] = margin
    rows_flipped = [r for r, s in enumerate(first) if s is not None]
    earliest = min(rows_flipped, key=lambda r: first[r]) if rows_flipped else None  # type: ignore[arg-type,return-value]
    return RoutingFlips(first, margin_at[earliest] if earliest is not None else None)


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
