"""How close a run's logits are to the all-off reference decoded from the same prompts."""

from __future__ import annotations

import torch


def logit_agreement(logits: torch.Tensor, reference: torch.Tensor,
                    not_after: list[int | None] | None = None) -> dict[str, object]:
    """Compare greedy-decoding logits [B, steps, V] of a run with the reference's.

    Each row is compared up to and including the first step whose greedy token differs: from the next step on,
    the two runs decode different sequences, so their logits no longer answer the same question. One near-tie
    in a bf16 MoE model (a routing or greedy choice that rounding flips) then shows as `tokens_match` False
    with the diff of the step where it happened, instead of the unrelated logits of two diverged sequences.
    `not_after[row]`, when given, is the step at which rounding flipped one of that row's near-tied expert
    choices (perfbench/measure/routing_flips.py): the row is compared only before it, tokens included.

    Returns max_abs_logit_diff (over the compared steps, None when none was; NaN propagates), tokens_match (over
    the steps before a flip; None when there were none), and first_mismatch_step (the earliest step at which some
    row's token differs, or None).
    """
    logits, reference = logits.float().cpu(), reference.float().cpu()
    same = logits.argmax(-1) == reference.argmax(-1)                      # [B, steps]
    rows, steps = same.shape
    step_index = torch.arange(steps)[None, :]
    flip = torch.tensor([steps if s is None else s for s in (not_after or [None] * rows)])[:, None]
    before_flip = step_index < flip                                        # [B, steps]
    # a row's last compared step: its first mismatch, or the last step when every token matches
    last = torch.where(same.all(-1), steps - 1, (~same).int().argmax(-1))
    compared = (step_index <= last[:, None]) & before_flip
    diff = (logits - reference).abs().amax(-1)                             # [B, steps]
    mismatched = ~same.all(0)
    return {"max_abs_logit_diff": diff[compared].max().item() if compared.any() else None,
            "tokens_match": bool(same[before_flip].all()) if before_flip.any() else None,
            "first_mismatch_step": int(mismatched.int().argmax()) if mismatched.any() else None}
