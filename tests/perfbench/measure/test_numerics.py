"""The numerics comparison of a replayed run: each (phase, layer, branch) pooled over its tokens, and the logits;
every expected value below is computed by hand from the planted difference."""

from __future__ import annotations

import math

import pytest
import torch

from perfbench.measure.numerics import compare_replayed

L, B, T, H, S, V = 2, 2, 3, 4, 3, 5


def outputs(seed: int) -> list[torch.Tensor]:
    """Branch outputs of a prefill [L, 2, B, T, H] and two decode steps [L, 2, B, 1, H]."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(L, 2, B, T, H, generator=gen)] + [torch.randn(L, 2, B, 1, H, generator=gen)
                                                          for _ in range(S - 1)]


def logits(seed: int = 9) -> torch.Tensor:
    return torch.randn(B, S, V, generator=torch.Generator().manual_seed(seed))


FULL = torch.tensor([T, T])


def test_identical_runs_have_no_error() -> None:
    ref = outputs(0)
    out = compare_replayed([x.clone() for x in ref], ref, logits(), logits(), FULL)
    assert out.max_rel_error == 0.0 and out.top1_agreement == 1.0 and out.compared == B * S


def test_a_branch_off_by_three_percent_at_every_token_is_found_and_located() -> None:
    ref = outputs(0)
    run = [x.clone() for x in ref]
    for forward in run[1:]:
        forward[1, 0] *= 1.03                         # layer 1's mixer, every decode step
    out = compare_replayed(run, ref, logits(), logits(), FULL)
    assert out.max_rel_error == pytest.approx(0.03, rel=1e-5)
    assert (out.phase, out.layer, out.branch, out.where) == ("decode", 1, "mixer", "decode layer 1 mixer")


def test_tokens_are_pooled_so_one_token_counts_by_its_share() -> None:
    ref = [torch.ones(L, 2, B, T, H)]
    run = [ref[0].clone()]
    run[0][0, 1, 0, 0] *= 1.1                         # one of six prefill tokens of layer 0's MoE branch
    out = compare_replayed(run, ref, logits()[:, :1], logits()[:, :1], FULL)
    assert out.max_rel_error == pytest.approx(math.sqrt(0.1 ** 2 / 6))


def test_padding_of_a_ragged_prompt_is_not_compared() -> None:
    ref = [torch.ones(L, 2, B, T, H)]
    run = [ref[0].clone()]
    run[0][:, :, 1, 2] = 100.0                        # row 1's third token: padding when its prompt is 2 long
    assert compare_replayed(run, ref, logits()[:, :1], logits()[:, :1], torch.tensor([3, 2])).max_rel_error == 0.0
    assert compare_replayed(run, ref, logits()[:, :1], logits()[:, :1], FULL).max_rel_error > 1.0


def test_the_logits_are_compared_centred() -> None:
    ref_logits = logits()
    run_logits = ref_logits + 3.0                     # a constant shift: no probability moves
    run_logits[0, 2] = ref_logits[0, 2] * 1.5 + 3.0   # one decode step's logits scaled
    ref = outputs(0)
    out = compare_replayed([x.clone() for x in ref], ref, run_logits, ref_logits, FULL)
    centred = ref_logits[:, 1:] - ref_logits[:, 1:].mean(-1, keepdim=True)
    expected = (0.5 * centred[0, 1]).norm() / centred.norm()
    assert out.branch == "logits" and out.layer is None and out.phase == "decode"
    assert out.max_rel_error == pytest.approx(float(expected), rel=1e-5)


def test_every_step_is_compared_even_after_a_greedy_token_differs() -> None:
    ref_logits = torch.zeros(1, 3, 3)
    ref_logits[0, :, 0] = 1.0
    run_logits = ref_logits.clone()
    run_logits[0, 0, 1] = 2.0                         # step 0 chooses another token; later steps still count
    ref = [torch.ones(L, 2, 1, T, H)] + [torch.ones(L, 2, 1, 1, H)] * 2
    out = compare_replayed([x.clone() for x in ref], ref, run_logits, ref_logits, torch.tensor([T]))
    assert out.first_mismatch_step == 0 and out.top1_agreement == pytest.approx(2 / 3)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_nan_or_inf_output_is_a_nan_error_that_says_where(bad: float) -> None:
    ref = outputs(0)
    run = [x.clone() for x in ref]
    run[2][0, 1, 1, 0, 2] = bad
    out = compare_replayed(run, ref, logits(), logits(), FULL)
    assert math.isnan(out.max_rel_error) and (out.phase, out.layer, out.branch) == ("decode", 0, "moe")


def test_a_run_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError, match="forwards"):
        compare_replayed(outputs(0)[:2], outputs(0), logits(), logits(), FULL)
