"""What every layer needs to know about the current forward step besides its hidden states."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.cache import Qwen3_5MoeCache


@dataclass
class Step:
    """prefill: right-padded prompts [B, T] with `seq_lens`; decode: one new token per sequence [B, 1].

    `start` [B] is the cache position of each sequence's first token in this step (zeros for prefill, the
    cached length for decode); `cos`/`sin` [B, T, R] are the rotary tables for this step's positions.
    """

    prefill: bool
    seq_lens: torch.Tensor
    start: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    cache: Qwen3_5MoeCache
