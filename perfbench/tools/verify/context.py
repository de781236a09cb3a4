"""What every verify item shares: the options, the device and platform, the models under test, the all-off
reference (computed once per process), and how a model is built.

The models carry the dims the NPU ops document (GDN Dk = Dv = 128; head_dim 256, Qwen3.5's, which takes FIA v1
BSH; hidden 1024, the lower bound of MC2 dispatch/combine on Atlas A3), two layers (one GDN, one full
attention), bf16 (FIA has no fp32), dummy seeded weights:

- `tiny`: the tiny preset's other dims (4 heads, 16 experts top-4), in every run;
- `35b-slice` (not with --quick): Qwen3.5-35B-A3B at full width (hidden 2048, 16 heads, 256 experts top-8, the
  full vocabulary) cut to two layers, 2.7 B parameters (5.4 GB in bf16): one device holds it.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from model.backend import Capabilities, detect_capabilities
from model.config import Qwen3_5MoeTextConfig
from model.modeling import Qwen3_5MoeForCausalLM
from model.optimizations import TOGGLE_NAMES
from model.routing_log import RoutedCall
from perfbench.emulation.npu import label, tensor_device
from perfbench.errors import UserError
from perfbench.tools.verify.numerics import NEW_TOKENS, PROMPTS, Forced, reference_pass
from perfbench.tools.verify.summary import ITEM_NAMES

SERIES_KEY = {"A2": "910b", "A3": "910_93", "950": "950"}  # Capabilities.npu_platform -> --platform key
SERIES_NAME = {"A2": "Atlas A2", "A3": "Atlas A3", "950": "Ascend 950"}
DTYPE = torch.bfloat16


@dataclass(frozen=True)
class VerifyOptions:
    platform: str = "auto"
    devices: int = 1
    quick: bool = False
    items: tuple[str, ...] = ITEM_NAMES


@dataclass(frozen=True)
class ModelUnderTest:
    name: str
    config: Qwen3_5MoeTextConfig
    path: Path  # its config.json, for from_pretrained and the torchrun ranks


def _npu_dims(config: Qwen3_5MoeTextConfig, **dims: Any) -> Qwen3_5MoeTextConfig:
    return dataclasses.replace(config, head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128,
                               num_hidden_layers=2, full_attention_interval=2, layer_types=[], **dims)


def tiny_config() -> Qwen3_5MoeTextConfig:
    return _npu_dims(Qwen3_5MoeTextConfig.tiny(), hidden_size=1024)


def slice_35b_config() -> Qwen3_5MoeTextConfig:
    return _npu_dims(Qwen3_5MoeTextConfig.qwen3_5_35b_a3b())


@dataclass
class Reference:
    """The all-off model's greedy tokens and teacher-forced logits (on the same device, same weights)."""

    tokens: list[list[int]]
    forced: Forced  # its teacher-forced pass: logits, every layer's inputs (replayed by every model compared), outputs
    routing: list[RoutedCall]  # the experts it chose in its teacher-forced pass: replayed by every model compared

    @property
    def logits(self) -> torch.Tensor:
        return self.forced.logits


def all_on(*, graph: bool, without: tuple[str, ...] = ()) -> dict[str, bool]:
    return {t: t not in without and (graph or t != "graph_mode") for t in TOGGLE_NAMES}


@dataclass
class VerifyContext:
    options: VerifyOptions
    caps: Capabilities
    platform: str  # "910b" | "910_93" | "950"
    work_dir: Path  # scratch (raw traces, rank outputs), not bundled
    out_dir: Path  # the bundle folder (the profile item puts its trimmed traces there)
    models: list[ModelUnderTest] = field(default_factory=list)
    _references: dict[str, Reference | BaseException] = field(default_factory=dict)

    @classmethod
    def create(cls, options: VerifyOptions, work_dir: Path, out_dir: Path | None = None) -> VerifyContext:
        """Refuses (UserError) a machine without an NPU, a --platform the device is not, more --devices than it
        has. `out_dir` defaults to reports/verify-<platform>-<time>."""
        try:
            caps = detect_capabilities("npu")
        except (RuntimeError, ValueError) as err:
            raise UserError(f"no Ascend NPU here ({err}); rehearse with --emulate-npu 910b|910_93|950") from None
        detected = SERIES_KEY[caps.npu_platform]
        if options.platform not in ("auto", detected):
            raise UserError(f"--platform {options.platform}: this device is {caps.device_name}, platform "
                            f"{detected} ({SERIES_NAME[caps.npu_platform]})")
        if label() is None and options.devices > torch.npu.device_count():  # type: ignore[attr-defined]
            raise UserError(f"--devices {options.devices}: this machine has {torch.npu.device_count()} "  # type: ignore[attr-defined]
                            "NPU devices")
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        ctx = cls(options, caps, detected, work_dir, out_dir or Path("reports") / f"verify-{detected}-{stamp}")
        configs = [("tiny", tiny_config())] + ([] if options.quick else [("35b-slice", slice_35b_config())])
        for name, config in configs:
            path = work_dir / "models" / name / "config.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(config.to_hf_dict()))
            ctx.models.append(ModelUnderTest(name, config, path))
        return ctx

    @property
    def device(self) -> str:
        """Where tensors go: the NPU, or the CPU under the emulator."""
        return tensor_device("npu")

    @property
    def emulation(self) -> str | None:
        return label()

    @property
    def series(self) -> str:
        return SERIES_NAME[self.caps.npu_platform]

    def build(self, model: ModelUnderTest, toggles: dict[str, bool] | str, exe_mode: str = "ge_graph",
              ) -> Qwen3_5MoeForCausalLM:
        return Qwen3_5MoeForCausalLM.from_pretrained(model.path, dtype=DTYPE, device=self.device,
                                                      optimizations=toggles, dummy_weights=True, seed=0,
                                                      caps=self.caps, exe_mode=exe_mode)

    def reference(self, model: ModelUnderTest) -> Reference:
        """The all-off model's output, computed on first use; a failure is kept and raised to every caller."""
        if model.name not in self._references:
            try:
                self._references[model.name] = self._decode_reference(model)
            except Exception as err:  # noqa: BLE001 - every item that needs it reports it
                self._references[model.name] = err
        found = self._references[model.name]
        if isinstance(found, BaseException):
            raise found
        return found

    def _decode_reference(self, model: ModelUnderTest) -> Reference:
        reference = self.build(model, "none")
        tokens = reference.generate(PROMPTS, max_new_tokens=NEW_TOKENS).tokens
        forced, routing = reference_pass(reference, tokens)
        del reference
        release()
        return Reference(tokens, forced, routing)


def release() -> None:
    """Free dropped models now (callers `del` theirs first): a full-width slice holds gigabytes."""
    gc.collect()
    if hasattr(torch, "npu") and label() is None:
        torch.npu.empty_cache()

