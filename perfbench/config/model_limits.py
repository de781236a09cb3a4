"""Scenario checks that need the model: what the workload asks of it must be within what the model is.

`build_scenario` calls `check_model_limits` once the model's config can be read, so `perfbench run --dry-run`,
`perfbench estimate` and a real run all refuse the same scenarios, before anything is allocated:
- each prompt length plus output_len within the config's `max_position_embeddings` (RoPE and the KV cache are
  sized for that many positions; past it the model extrapolates, which is not what the recipe measures);
- a layer-count override within the checkpoint's or preset's `num_hidden_layers` (more layers would repeat the
  pattern: a model that does not exist);
- a batch of at most `MAX_BATCH_TOKENS` tokens, checked with or without a model, so absurd shapes (a batch of
  10**20) fail here in one line instead of as a MemoryError in the worker.
The memory estimate against this machine's free memory needs the device and the plans: perfbench/roofline/memory.py.
Torch-free (model.config only).
"""

from __future__ import annotations

from collections.abc import Sequence

from model.config import Qwen3_5MoeTextConfig

# 2**31 tokens in one batch: the KV cache alone would be terabytes for any Qwen3.5 config, and token positions
# and offsets past int32 are where kernels stop being trustworthy. A bound every real shape is far below.
MAX_BATCH_TOKENS = 2**31 - 1
WORKLOAD = "perfbench.workload"


def check_shapes(batch_sizes: Sequence[int], input_lens: Sequence[int], output_len: int) -> str | None:
    """Why no machine can run these shapes (one line naming the key), or None. Needs no model."""
    longest = max(input_lens) + output_len
    if longest > MAX_BATCH_TOKENS:  # one sequence alone: name the lengths, not a batch size
        return (f"{WORKLOAD}: longest input_len {max(input_lens)} + output_len {output_len} = {longest:.3g} "
                f"tokens in one sequence, more than the {MAX_BATCH_TOKENS} (2**31 - 1) any device can hold")
    for i, batch in enumerate(batch_sizes):
        if batch * longest > MAX_BATCH_TOKENS:
            return (f"{WORKLOAD}.batch_sizes[{i}]: {batch} sequences of up to {longest} tokens (longest input_len "
                    f"+ output_len) is {batch * longest:.3g} tokens in one batch, more than the "
                    f"{MAX_BATCH_TOKENS} (2**31 - 1) any device can hold; use smaller batches or lengths")
    return None


def check_model_limits(config: Qwen3_5MoeTextConfig, model: str, input_lens: Sequence[int], output_len: int,
                       num_layers: int | None, layers_key: str) -> str | None:
    """Why this workload exceeds the model (one line naming the key), or None.

    `config` is the model's own config (before a layer override); `layers_key` is where num_layers came from.
    """
    if num_layers is not None and num_layers > config.num_hidden_layers:
        return (f"{layers_key}: {num_layers} layers, but model {model} has {config.num_hidden_layers}; use at "
                f"most {config.num_hidden_layers}")
    limit = config.max_position_embeddings
    for i, length in enumerate(input_lens):
        if length + output_len > limit:
            return (f"{WORKLOAD}.input_lens[{i}]: {length} prompt tokens + output_len {output_len} = "
                    f"{length + output_len} positions, more than model {model}'s max_position_embeddings {limit}; "
                    f"keep input_len + output_len <= {limit}")
    return None
