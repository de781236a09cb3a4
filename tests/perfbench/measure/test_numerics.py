"""The numerics comparison: every row and step of a replayed run against the reference, by the relative error of
the centred logits (an independent expectation for each case is computed by hand in the test)."""

from __future__ import annotations

import math

import pytest
import torch

from perfbench.measure.numerics import logit_agreement, relative_logit_error


def test_relative_error_is_the_rms_of_the_centred_difference_over_the_centred_reference() -> None:
    reference = torch.tensor([[[1.0, -1.0, 3.0, -3.0]]])      # mean 0, RMS sqrt(5)
    run = reference + torch.tensor([[[0.5, -0.5, 0.0, 0.0]]])  # centred difference RMS sqrt(0.125)
    assert float(relative_logit_error(run, reference)) == pytest.approx(math.sqrt(0.125 / 5))


def test_a_constant_shift_of_every_logit_is_no_error() -> None:
    reference = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0))
    assert logit_agreement(reference + 7.0, reference).max_rel_logit_error == pytest.approx(0.0, abs=1e-6)


def test_a_scaled_step_is_found_and_located() -> None:
    reference = torch.randn(2, 4, 32, generator=torch.Generator().manual_seed(1))
    run = reference.clone()
    run[1, 2] = reference[1, 2] * 1.03                         # a 3 % scale error at row 1, step 2 only
    out = logit_agreement(run, reference)
    assert out.max_rel_logit_error == pytest.approx(0.03, rel=1e-4)
    assert (out.worst_row, out.worst_step, out.compared) == (1, 2, 8)


def test_every_step_is_compared_even_after_a_greedy_token_differs() -> None:
    reference = torch.tensor([[[1.0, 0.9, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    run = reference.clone()
    run[0, 0] = torch.tensor([0.9, 1.0, 0.0])                 # a near tie flips at step 0 ...
    run[0, 2, 2] = 2.0                                         # ... and step 2 is far off: still compared
    out = logit_agreement(run, reference)
    assert out.first_mismatch_step == 0 and out.top1_agreement == pytest.approx(2 / 3)
    assert out.worst_step == 2 and out.max_abs_logit_diff == pytest.approx(1.0)


def test_nan_or_inf_logits_are_a_nan_error() -> None:
    reference = torch.randn(1, 2, 8, generator=torch.Generator().manual_seed(2))
    for bad in (math.nan, math.inf):
        run = reference.clone()
        run[0, 1, 3] = bad
        out = logit_agreement(run, reference)
        assert math.isnan(out.max_rel_logit_error) and out.worst_step == 1


def test_shapes_that_differ_are_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        logit_agreement(torch.zeros(1, 2, 4), torch.zeros(1, 3, 4))
