"""The numerics check: logits compared only while the run and the reference decode the same tokens."""

from __future__ import annotations

import math

import torch

from perfbench.measure.numerics import logit_agreement


def one_hot_logits(tokens: list[list[int]], vocab: int = 4) -> torch.Tensor:
    """[B, steps, vocab] logits whose greedy token per step is `tokens[b][s]` (value 1 there, 0 elsewhere)."""
    return torch.nn.functional.one_hot(torch.tensor(tokens), vocab).float()


def test_matching_runs_compare_every_step() -> None:
    ref = one_hot_logits([[0, 1, 2], [3, 3, 1]])
    run = ref.clone()
    run[1, 2, 0] += 0.25                                  # last step of row 1, token still 1
    out = logit_agreement(run, ref)
    assert out == {"max_abs_logit_diff": 0.25, "tokens_match": True, "first_mismatch_step": None}


def test_a_row_is_compared_through_its_first_differing_token_only() -> None:
    ref = one_hot_logits([[0, 1, 2], [3, 3, 1]])
    run = one_hot_logits([[0, 1, 2], [3, 2, 0]])          # row 1 flips at step 1, then decodes another sequence
    run[0, 2, 3] += 0.5                                   # row 0 matches throughout: its step 2 counts
    run[1, 2] += 100.0                                    # row 1 after its flip: not comparable, ignored
    out = logit_agreement(run, ref)
    # row 1 step 1: token 3 -> 2 moves two logits by 1 each
    assert out == {"max_abs_logit_diff": 1.0, "tokens_match": False, "first_mismatch_step": 1}


def test_nan_in_a_compared_step_propagates() -> None:
    ref = one_hot_logits([[0, 1]])
    run = ref.clone()
    run[0, 0, 2] = math.nan
    assert math.isnan(logit_agreement(run, ref)["max_abs_logit_diff"])


def test_a_row_is_compared_only_before_its_routing_flip() -> None:
    ref = one_hot_logits([[0, 1, 2, 3], [3, 3, 1, 0]])
    run = ref.clone()
    run[0, 1, 0] += 0.125                                 # row 0 before its flip (step 2): counts
    run[0, 2, 0] += 0.5                                   # row 0 at its flip: a near tie's other expert, ignored
    run[0, 3] = one_hot_logits([[1]])[0, 0]               # ... and a token changed after it: ignored too
    run[1, 3, 2] += 0.25                                  # row 1 has no flip: every step counts
    out = logit_agreement(run, ref, not_after=[2, None])
    assert out == {"max_abs_logit_diff": 0.25, "tokens_match": True, "first_mismatch_step": 3}


def test_a_flip_in_prefill_leaves_nothing_to_compare() -> None:
    ref = one_hot_logits([[0, 1]])
    run = one_hot_logits([[2, 2]])
    out = logit_agreement(run, ref, not_after=[0])
    assert out["max_abs_logit_diff"] is None and out["tokens_match"] is None
