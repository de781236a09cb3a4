"""One iteration of the model's own generation loop, timed: the seeded workload, prefill and every decode step,
each forward bounded by device synchronization (the loop's step hook)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from model.backend import timed
from model.cache import Qwen3_5MoeCache
from model.modeling import Qwen3_5MoeForCausalLM
from model.replay import Capture, Replay
from perfbench.results import RunSpec


@dataclass
class Workload:
    prompts: list[list[int]]
    output_len: int

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)


def make_workload(spec: RunSpec, vocab_size: int) -> Workload:
    """Seeded random prompts; lengths drawn from a distribution (spec.prompt_lens), else ragged: spread evenly
    from input_len/4 to input_len (longest first), else all input_len."""
    gen = torch.Generator().manual_seed(spec.seed + 7)
    if spec.prompt_lens:  # drawn from the scenario's length distribution (config/lengths.py)
        lengths = list(spec.prompt_lens)
    elif spec.ragged and spec.batch_size > 1:
        lo = max(1, spec.input_len // 4)
        lengths = [round(spec.input_len - i * (spec.input_len - lo) / (spec.batch_size - 1))
                   for i in range(spec.batch_size)]
    else:
        lengths = [spec.input_len] * spec.batch_size
    prompts = [torch.randint(0, vocab_size, (n,), generator=gen).tolist() for n in lengths]
    return Workload(prompts, spec.output_len)


@dataclass
class Iteration:
    ttft_s: float
    step_s: list[float]
    tokens: torch.Tensor  # [B, output_len]
    logits: torch.Tensor | None  # [B, output_len, V] when kept

    @property
    def ttft_ms(self) -> float:
        return self.ttft_s * 1e3

    @property
    def tpot_ms(self) -> float | None:
        """The iteration's TPOT: the mean of its decode steps (None without decode steps)."""
        return sum(self.step_s) / len(self.step_s) * 1e3 if self.step_s else None


def run_iteration(model: Qwen3_5MoeForCausalLM, ids: torch.Tensor, seq_lens: torch.Tensor,
                  cache: Qwen3_5MoeCache, output_len: int, keep_logits: bool = False,
                  replay: Replay | None = None, capture: Capture | None = None) -> Iteration:
    """One prefill + (output_len - 1) decode steps of the model's own generation loop, each forward timed with
    device synchronization (the loop's step hook); `replay`: a reference's tokens and routing to replay
    (model/replay.py), for the numerics check; `capture`: filled with each forward's layer tap."""
    device = model.device.type
    seconds: dict[str, list[float]] = {"prefill": [], "decode": []}

    def timed_step(phase: str, step: int, forward: Callable[[], torch.Tensor]) -> torch.Tensor:
        logits, dt_s = timed(device, forward)
        seconds[phase].append(dt_s)
        return logits

    tokens, logits = model.generate_padded(ids, seq_lens, cache, output_len, run_step=timed_step,
                                           keep_logits=keep_logits, replay=replay,
                                           capture=capture)
    if tokens.shape[1] != output_len:
        raise RuntimeError(f"generated {tokens.shape[1]} tokens per prompt, expected {output_len}")
    return Iteration(seconds["prefill"][0], seconds["decode"], tokens, logits)
