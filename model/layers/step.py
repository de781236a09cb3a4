"""What every layer needs to know about the current forward step besides its hidden states."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.cache import Qwen3_5MoeCache
from model.replay import LayerTap


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
    # [L, N, K]: every MoE layer's expert ids for this step's N tokens, replayed from a reference instead of the
    # layer's own choice (model/replay.py); None in every ordinary forward
    forced_ids: torch.Tensor | None = None
    # records or replays every layer's inputs and hands back its branch outputs (model/replay.py); None normally
    tap: LayerTap | None = None
