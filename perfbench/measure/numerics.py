"""How close a replayed run is to the all-off reference: every layer, row and step compared, each layer on its own.

The run replays the reference's greedy tokens, expert choices and each layer's inputs (model/replay.py), so a
layer's branch outputs (its mixer's and its MoE block's) differ from the reference's only by that layer's own
kernels, and the logits only by the final norm and LM head. No near tie is excused and nothing is skipped.

The decisive figure is the largest relative error of one (phase, layer, branch): the RMS of the difference over
the RMS of the reference, pooled over every token of the phase (prefill; decode = every decode step). Pooling is
what tells a wrong kernel from rounding: a kernel off by a few percent is off at every token, while rounding
differences are a fraction of a percent in bf16 and vary in sign (docs/numerics.md has the calibration). The
largest absolute logit difference and the agreement of the greedy tokens are kept as information.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PHASES = ("prefill", "decode")
BRANCHES = ("mixer", "moe")  # the order of a layer tap's outputs (model/replay.py)
LOGITS = "logits"


@dataclass(frozen=True)
class Agreement:
    """A replayed run against the reference."""

    max_rel_error: float  # the largest (phase, layer, branch) error; NaN when an output was NaN or inf
    phase: str
    layer: int | None  # None for the logits
    branch: str  # "mixer", "moe" or "logits"
    max_rel_logit_error: float  # the logits' own pooled error (the larger phase)
    max_abs_logit_diff: float
    top1_agreement: float  # share of (row, step) whose argmax equals the reference's
    first_mismatch_step: int | None  # the earliest step at which some row's argmax differs
    compared: int  # rows x steps

    @property
    def where(self) -> str:
        layer = "" if self.layer is None else f"layer {self.layer} "
        return f"{self.phase} {layer}{self.branch}"


def pooled_relative_error(got: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor, dims: tuple[int, ...]
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums of the squared difference and of the squared reference over `dims`, counting masked-in elements only
    (the two halves of a pooled relative error; NaN or inf in `got` makes the difference infinite)."""
    got, ref = got.float().cpu(), ref.float().cpu()
    diff = torch.where(mask, got - ref, torch.zeros(()))
    diff = torch.where(torch.isfinite(diff), diff, torch.full((), float("inf")))
    return diff.pow(2).sum(dims), torch.where(mask, ref, torch.zeros(())).pow(2).sum(dims)


def _ratio(diff: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rel = (diff / scale.clamp_min(torch.finfo(torch.float32).tiny)).sqrt()
    return torch.where(torch.isfinite(rel), rel, torch.full((), float("nan")))


def compare_replayed(run_outputs: list[torch.Tensor], ref_outputs: list[torch.Tensor], run_logits: torch.Tensor,
                     ref_logits: torch.Tensor, seq_lens: torch.Tensor) -> Agreement:
    """`*_outputs`: per forward (prefill, then each decode step) the branch outputs [L, 2, B, T, H]; `*_logits`
    [B, S, V]. A prompt row counts its own tokens only (a ragged batch's padding is computed, not asked about)."""
    if len(run_outputs) != len(ref_outputs) or run_logits.shape != ref_logits.shape:
        raise ValueError(f"{len(run_outputs)} forwards and logits {tuple(run_logits.shape)} against a reference of "
                         f"{len(ref_outputs)} and {tuple(ref_logits.shape)}")
    lengths = seq_lens.cpu()
    candidates: list[tuple[float, str, int | None, str]] = []
    logit_errors = []
    for phase, forwards in ((PHASES[0], range(0, min(1, len(ref_outputs)))), (PHASES[1], range(1, len(ref_outputs)))):
        if not forwards:
            continue
        diff = scale = torch.zeros(())
        for f in forwards:
            ref = ref_outputs[f]
            tokens = ref.shape[3]
            valid = (torch.arange(tokens)[None, :] < lengths[:, None]) if f == 0 else \
                torch.ones(ref.shape[2], tokens, dtype=torch.bool)
            # a layer at a time: the fp32 temporaries are one layer's, not the whole forward's (a long prefill's
            # taps are gigabytes)
            parts = [pooled_relative_error(run_outputs[f][layer], ref[layer], valid[None, :, :, None], (1, 2, 3))
                     for layer in range(ref.shape[0])]
            diff = diff + torch.stack([d for d, _ in parts])
            scale = scale + torch.stack([s for _, s in parts])
        rel = _ratio(diff, scale)                                             # [L, 2]
        for (layer, branch), value in zip(torch.cartesian_prod(torch.arange(rel.shape[0]), torch.arange(2)).tolist(),
                                          rel.flatten().tolist()):
            candidates.append((value, phase, layer, BRANCHES[branch]))
        steps = slice(0, 1) if phase == PHASES[0] else slice(1, None)
        centred_got = run_logits[:, steps] - run_logits[:, steps].mean(-1, keepdim=True)
        centred_ref = ref_logits[:, steps] - ref_logits[:, steps].mean(-1, keepdim=True)
        d, s = pooled_relative_error(centred_got, centred_ref, torch.ones((), dtype=torch.bool), (0, 1, 2))
        logit_error = float(_ratio(d, s))
        logit_errors.append(logit_error)
        candidates.append((logit_error, phase, None, LOGITS))
    nan = [c for c in candidates if c[0] != c[0]]
    value, phase, layer, branch = nan[0] if nan else max(candidates, key=lambda c: c[0])
    got, ref = run_logits.float().cpu(), ref_logits.float().cpu()
    same = got.argmax(-1) == ref.argmax(-1)
    mismatched = ~same.all(0)
    return Agreement(
        max_rel_error=value, phase=phase, layer=layer, branch=branch,
        max_rel_logit_error=float("nan") if any(e != e for e in logit_errors) else max(logit_errors),
        max_abs_logit_diff=float((got - ref).abs().nan_to_num(float("inf")).max()),
        top1_agreement=float(same.float().mean()),
        first_mismatch_step=int(mismatched.int().argmax()) if mismatched.any() else None,
        compared=int(same.numel()))
