"""Routing flips: a run's expert choices against the reference's, a flip excused only where the reference's
k-th and (k+1)-th probabilities were nearly tied; and the log's round trip through the reference file."""

from __future__ import annotations

import pytest
import torch

from model.routing_log import RoutedCall
from perfbench.measure.routing_flips import near_tie_margin, rounding_flips, routing_from_tensors, routing_to_tensors

WIDE, TIE = 0.05, 1e-8


def call(prefill: bool, layer: int, ids: list[list[int]], margins: list[float]) -> RoutedCall:
    return RoutedCall(prefill, layer, torch.tensor(ids), torch.tensor(margins))


def log(decode_ids: list[list[list[int]]], decode_margins: list[list[float]] | None = None) -> list[RoutedCall]:
    """Two layers; batch 2, prompt 2 (prefill tokens row-major: row 0 = tokens 0-1, row 1 = tokens 2-3); then one
    call per layer per decode step, `decode_ids[j]` the [B, K] ids of decode call j."""
    prefill = [call(True, layer, [[0, 1], [0, 2], [1, 2], [1, 3]], [WIDE] * 4) for layer in (0, 1)]
    margins = decode_margins or [[WIDE, WIDE]] * len(decode_ids)
    return prefill + [call(False, j % 2, ids, m) for j, (ids, m) in enumerate(zip(decode_ids, margins))]


SAME = [[0, 1], [2, 3]]


def test_identical_routing_has_no_flip() -> None:
    ref = log([SAME] * 4)
    flips = rounding_flips(ref, log([SAME] * 4), batch=2, near_tie=1e-5)
    assert flips.first_step == [None, None] and flips.step is None and flips.margin is None


def test_a_near_tied_choice_that_flipped_names_its_row_and_step() -> None:
    # decode call 3 = layer 1 of decode step 2 (calls 0-1 are step 1); row 1 chose expert 1 instead of 2
    ref = log([SAME] * 4, [[WIDE, WIDE]] * 3 + [[WIDE, TIE]])
    run = log([SAME] * 3 + [[[0, 1], [1, 3]]])
    flips = rounding_flips(ref, run, batch=2, near_tie=1e-5)
    assert flips.first_step == [None, 2] and flips.step == 2 and flips.margin == pytest.approx(TIE)


def test_a_flip_where_the_margin_was_wide_is_not_excused() -> None:
    run = log([SAME] * 3 + [[[0, 1], [1, 3]]])
    assert rounding_flips(log([SAME] * 4), run, batch=2, near_tie=1e-5).first_step == [None, None]


def test_only_a_rows_first_difference_decides() -> None:
    # row 0 first differs at step 1 with a wide margin (a real difference), then at a near tie: still not excused
    ref = log([SAME] * 4, [[WIDE, WIDE], [WIDE, WIDE], [TIE, WIDE], [WIDE, WIDE]])
    run = log([[[0, 2], [2, 3]], SAME, [[1, 2], [2, 3]], SAME])
    assert rounding_flips(ref, run, batch=2, near_tie=1e-5).first_step == [None, None]


def test_a_prefill_flip_maps_tokens_to_rows() -> None:
    ref = log([SAME] * 2)
    ref[1] = call(True, 1, [[0, 1], [0, 2], [1, 2], [1, 3]], [WIDE, WIDE, TIE, WIDE])
    run = log([SAME] * 2)
    run[1] = call(True, 1, [[0, 1], [0, 2], [1, 3], [1, 3]], [WIDE] * 4)  # token 2 is row 1's first token
    assert rounding_flips(ref, run, batch=2, near_tie=1e-5).first_step == [None, 0]


def test_a_compiled_decode_that_logged_nothing_compares_prefill_only() -> None:
    run = log([])
    assert rounding_flips(log([SAME] * 4), run, batch=2, near_tie=1e-5).first_step == [None, None]


def test_logs_of_different_computations_excuse_nothing() -> None:
    ref = log([SAME] * 2, [[TIE, TIE]] * 2)
    run = log([[[0, 1, 2], [1, 2, 3]], SAME])  # another top-k
    assert rounding_flips(ref, run, batch=2, near_tie=1e-5).first_step == [None, None]


def test_the_near_tie_margin_follows_the_dtype_tolerance() -> None:
    assert near_tie_margin("float32") == 1e-5 and near_tie_margin("bfloat16") == 1e-3


def test_a_log_round_trips_through_tensors() -> None:
    ref = log([SAME] * 2, [[WIDE, TIE]] * 2)
    back = routing_from_tensors(routing_to_tensors(ref))
    assert [(c.prefill, c.layer) for c in back] == [(c.prefill, c.layer) for c in ref]
    assert all(torch.equal(a.ids, b.ids) and torch.equal(a.margin, b.margin) for a, b in zip(back, ref))
    assert routing_from_tensors({"logits": torch.zeros(1)}) == []  # a reference file from before logs were kept
