"""Weights: HF safetensors checkpoints (single file or sharded index) and seeded dummy weights at any size.

Checkpoint keys are normalised to HF's on-disk text-model names (`model.language_model.` prefix stripped;
fused `experts.gate_up_proj` / `experts.down_proj` expanded to per-expert views) and then copied into the
`Slot`s the model declares, so merged projections and sharded parameters need no rename table. safetensors
only: nothing is ever unpickled.

Sharding: `model_slots` passes the model's slots through model.parallel.shard_slots, which sets each slot's
`source` (this rank's block of the checkpoint tensor) and `full_shape` from the declared sharding plan; both
the checkpoint loader and dummy init read only those, so they agree at every world size.
"""

from __future__ import annotations

import json
import logging
import math
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import torch

from model.config import ConfigError, Qwen3_5MoeTextConfig
from model.layers.linear import Slot
from model.parallel import ProcessGroups, held_elsewhere, shard_slots

log = logging.getLogger(__name__)


class SlottedModel(Protocol):
    """What the loaders read of a model (Qwen3_5MoeForCausalLM): its weight slots, config and process groups.
    A protocol, so that model.modeling can import this module at its top without a cycle."""

    @property
    def config(self) -> Qwen3_5MoeTextConfig: ...

    @property
    def groups(self) -> ProcessGroups: ...

    def slots(self) -> dict[str, Slot]: ...

IGNORED_PREFIXES = ("mtp.", "model.visual.", "visual.", "model.vision_tower.")
_FUSED_EXPERTS = re.compile(r"^(?P<prefix>.*\.mlp\.experts\.)(?P<name>gate_up_proj|down_proj)$")


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model; the message names the file and the tensor."""


def checkpoint_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointError(f"{index}: not a safetensors index ({err})") from None
        files = sorted({folder / name for name in weight_map.values()})
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{index}: lists {missing[0].name}, which is not in {folder}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        if any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
            raise CheckpointError(f"{folder}: only pickle weights (*.bin/*.pt) found; perfbench loads "
                                  f"safetensors only")
        raise CheckpointError(f"{folder}: no *.safetensors weights (use dummy weights to run without them)")
    return files


def _normalise(key: str) -> str | None:
    if key.startswith("model.language_model."):
        key = "model." + key[len("model.language_model."):]
    if key.startswith(IGNORED_PREFIXES):
        return None
    return key


def checkpoint_tensors(folder: Path) -> Iterator[tuple[Path, str, torch.Tensor]]:
    """(file, normalised key, tensor) for every tensor the text model uses; fused experts yield per-expert
    views."""
    from safetensors import safe_open

    for path in checkpoint_files(folder):
        try:
            handle = safe_open(str(path), framework="pt")
        except Exception as err:  # noqa: BLE001 - safetensors raises its own error types
            raise CheckpointError(f"{path}: not a readable safetensors file ({err})") from None
        with handle as f:
            for raw_key in f.keys():  # noqa: SIM118 - safe_open is not a dict
                key = _normalise(raw_key)
                if key is None:
                    continue
                tensor = f.get_tensor(raw_key)
                fused = _FUSED_EXPERTS.match(key)
                if fused is None:
                    yield path, key, tensor
                    continue
                prefix = fused["prefix"]
                if tensor.dim() != 3:
                    raise CheckpointError(f"{path}: tensor {raw_key} has shape {list(tensor.shape)}, "
                                          f"expected 3 dims [experts, ...]")
                for e in range(tensor.shape[0]):
                    if fused["name"] == "down_proj":
                        yield path, f"{prefix}{e}.down_proj.weight", tensor[e]
                    else:
                        gate, up = tensor[e].chunk(2, dim=0)  # rows [0, I) gate, [I, 2I) up
                        yield path, f"{prefix}{e}.gate_proj.weight", gate
                        yield path, f"{prefix}{e}.up_proj.weight", up


def model_slots(model: SlottedModel) -> dict[str, Slot]:
    """The model's weight slots with this rank's shard set (unchanged at world_size 1)."""
    slots = model.slots()
    if model.groups.layout.world_size == 1:
        return slots
    return shard_slots(slots, model.config, model.groups.layout)


def _copy_into(slot: Slot, tensor: torch.Tensor, path: Path, key: str) -> None:
    expected = slot.full_shape or tuple(slot.shape)
    if tuple(tensor.shape) != tuple(expected):
        raise CheckpointError(f"{path}: tensor {key} has shape {list(tensor.shape)}, "
                              f"expected {list(expected)}")
    target = slot.param[slot.dest] if slot.dest else slot.param
    target.copy_((tensor[slot.source] if slot.source else tensor).to(target.dtype))


@torch.no_grad()
def load_checkpoint(model: SlottedModel, folder: Path) -> None:
    """Copy every tensor (this rank's block of it) into its slot; shape mismatches and missing tensors raise
    with file and tensor named."""
    slots = model_slots(model)
    config = model.config
    layout = model.groups.layout
    tied = bool(getattr(config, "tie_word_embeddings", False))
    filled: set[str] = set()
    unexpected: list[str] = []
    embed: tuple[Path, torch.Tensor] | None = None
    for path, key, tensor in checkpoint_tensors(folder):
        if tied and key == "model.embed_tokens.weight":
            embed = (path, tensor)
        slot = slots.get(key)
        if slot is None:
            # experts owned by other EP ranks are expected to be absent from this rank's slots
            if not held_elsewhere(key, config, layout):
                unexpected.append(key)
            continue
        _copy_into(slot, tensor, path, key)
        filled.add(key)
    if "lm_head.weight" not in filled and tied and embed is not None:
        # the head's own shard of the embedding matrix (embed_tp and lmhead_tp may split it differently)
        _copy_into(slots["lm_head.weight"], embed[1], embed[0], "model.embed_tokens.weight")
        filled.add("lm_head.weight")
    missing = sorted(set(slots) - filled)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{folder}: checkpoint is missing tensor {missing[0]}{more}")
    if unexpected:
        log.warning("%s: %d checkpoint tensors not used by the text model, e.g. %s", folder, len(unexpected),
                    unexpected[0])


def _init_value(key: str, shape: torch.Size, std: float, gen: torch.Generator) -> torch.Tensor:
    """HF's initial values (model_hf.md section 5): zero-centred norms 0, gated norm 1, dt_bias 1,
    A_log = log U(0.01, 16), everything else N(0, initializer_range)."""
    if key.endswith("layernorm.weight") or key.endswith(("q_norm.weight", "k_norm.weight")) \
            or key == "model.norm.weight":
        return torch.zeros(shape)
    if key.endswith(("linear_attn.norm.weight", "dt_bias")):
        return torch.ones(shape)
    if key.endswith("A_log"):
        return torch.empty(shape).uniform_(0.01, 16.0, generator=gen).log_()
    return torch.empty(shape).normal_(0.0, std, generator=gen)


@torch.no_grad()
def init_dummy(model: SlottedModel, seed: int = 0) -> None:
    """Seeded random weights at the model's size (no checkpoint needed).

    Each tensor draws from its own generator seeded by (seed, key), so its values do not depend on which other
    tensors a process holds: a tensor-parallel shard is exactly the slice of the single-device tensor.
    """
    std = model.config.initializer_range
    for key, slot in model_slots(model).items():
        target = slot.param[slot.dest] if slot.dest else slot.param
        if not math.prod(target.shape):
            continue
        gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
        full = _init_value(key, torch.Size(slot.full_shape or target.shape), std, gen)
        target.copy_((full[slot.source] if slot.source else full).to(target.dtype))


__all__ = ["CheckpointError", "ConfigError", "SlottedModel", "checkpoint_files", "init_dummy", "load_checkpoint",
           "model_slots"]
