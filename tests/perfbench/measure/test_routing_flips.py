"""Routing flips, as information: a run's own expert choices against the reference's (how many, where first, the
widest reference margin among them); and the log's round trip through the reference file."""

from __future__ import annotations

import pytest
import torch

from model.routing_log import RoutedCall
from perfbench.measure.routing_flips import rounding_flips, routing_from_tensors, routing_to_tensors

WIDE, TIE = 0.05, 1e-8


def call(prefill: bool, layer: int, ids: list[list[int]], margins: list[float]) -> RoutedCall:
    return RoutedCall(prefill, layer, torch.tensor(ids), torch.tensor(margins))


def log(decode_ids: list[list[list[int]]], decode_margins: list[list[float]] | None = None) -> list[RoutedCall]:
    """Two layers, four prefill tokens, then one call per layer per decode step (`decode_ids[j]`: call j's ids)."""
    prefill = [call(True, layer, [[0, 1], [0, 2], [1, 2], [1, 3]], [WIDE] * 4) for layer in (0, 1)]
    margins = decode_margins or [[WIDE, WIDE]] * len(decode_ids)
    return prefill + [call(False, j % 2, ids, m) for j, (ids, m) in enumerate(zip(decode_ids, margins))]


SAME = [[0, 1], [2, 3]]


def test_identical_routing_has_no_flip() -> None:
    flips = rounding_flips(log([SAME] * 4), log([SAME] * 4))
    assert (flips.flips, flips.first_step, flips.widest_margin, flips.calls_compared) == (0, None, None, 6)


def test_the_same_experts_in_another_order_are_no_flip() -> None:
    assert rounding_flips(log([SAME] * 2), log([[[1, 0], [3, 2]]] * 2)).flips == 0


def test_flips_are_counted_with_their_first_step_and_widest_margin() -> None:
    # decode call 3 = layer 1 of decode step 2; both rows chose another expert there
    ref = log([SAME] * 4, [[WIDE, WIDE]] * 3 + [[WIDE, TIE]])
    run = log([SAME] * 3 + [[[0, 2], [1, 3]]])
    flips = rounding_flips(ref, run)
    assert (flips.flips, flips.first_step) == (2, 2) and flips.widest_margin == pytest.approx(WIDE)


def test_a_compiled_decode_that_logs_nothing_compares_prefill_only() -> None:
    ref = log([SAME] * 4)
    run = [c for c in log([SAME] * 4) if c.prefill]
    assert rounding_flips(ref, run).calls_compared == 2


def test_logs_of_another_shape_are_refused() -> None:
    ref = log([SAME])
    run = [call(True, 0, [[0, 1]], [WIDE])] + log([SAME])[1:]
    with pytest.raises(ValueError, match="differ in shape"):
        rounding_flips(ref, run)


def test_a_log_round_trips_through_tensors() -> None:
    calls = log([SAME] * 2, [[WIDE, TIE]] * 2)
    back = routing_from_tensors(routing_to_tensors(calls))
    assert [(c.prefill, c.layer, c.ids.tolist(), c.margin.tolist()) for c in back] == \
        [(c.prefill, c.layer, c.ids.tolist(), c.margin.tolist()) for c in calls]
    assert routing_from_tensors({}) == []
