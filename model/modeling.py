"""Qwen3_5MoeForCausalLM: build from a config + plan, prefill a ragged batch, decode steps, greedy generate.

Under torchrun, `from_pretrained(..., parallel_config={...})` joins the default process group, builds the
groups of model/parallel.py and loads only this rank's shard. Every rank runs the same `generate` on the same
prompts and returns the same tokens and logits (the LM head gathers the vocabulary; see model/parallel.py for
why activations are identical on every rank). A rank's script ends with `model.parallel.finish(rc)` (barrier,
group destroyed, results flushed, os._exit), not by returning into interpreter shutdown, where gloo can abort.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from model import weights
from model.backend import Capabilities, detect_capabilities
from model.cache import Qwen3_5MoeCache
from model.config import PRESETS, Qwen3_5MoeTextConfig, load_config
from model.expert_counts import ExpertCounts
from model.layers.decoder import Qwen3_5MoeDecoderLayer
from model.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from model.layers.linear import Slot
from model.layers.norm import Qwen3_5MoeRMSNorm
from model.layers.step import Step
from model.ops import OpSet, build_ops
from model.ops.rope import rope_inv_freq, rotary_cos_sin
from model.optimizations import Plan, resolve_plan
from model.parallel import LocalSizes, ProcessGroups, build_process_groups, init_distributed, rank_device
from model.parallel_config import ParallelConfig
from model.replay import Capture, LayerTap, Replay
from model.routing_log import RoutingLog
from model.tracing import Scopes

log = logging.getLogger(__name__)


@dataclass
class GenerateOutput:
    tokens: list[list[int]]  # the new tokens of each prompt
    logits: torch.Tensor  # [B, max_new_tokens, V] fp32: the logits that chose each new token


# Wraps each forward of generation: (phase "prefill" | "decode", decode step index, the forward) -> its logits.
StepRunner = Callable[[str, int, Callable[[], torch.Tensor]], torch.Tensor]


def _call_forward(phase: str, step: int, forward: Callable[[], torch.Tensor]) -> torch.Tensor:
    return forward()


class Qwen3_5MoeForCausalLM(nn.Module):
    inv_freq: torch.Tensor  # a buffer (declared: nn.Module types attributes it holds as Tensor | Module)

    def __init__(self, config: Qwen3_5MoeTextConfig, plan: Plan, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", compile_cache_dir: Path | None = None,
                 groups: ProcessGroups | None = None) -> None:
        """`groups`: this rank's process groups (model.parallel.build_process_groups); None = one device."""
        super().__init__()
        self.config = config
        self.plan = plan
        self.dtype = dtype
        self.device = torch.device(device)
        self.groups = groups or ProcessGroups()
        self.sizes = LocalSizes.of(config, self.groups.layout)
        self.ops: OpSet = build_ops(plan)
        self.scopes = Scopes()
        self.expert_counts = ExpertCounts(config.num_experts)  # routing counts, off unless a harness records
        self.routing_log = RoutingLog()  # each token's experts and margin, off unless a harness records
        h = config.hidden_size
        self.embed_tokens = VocabParallelEmbedding(self.sizes.embed_vocab, h, dtype, device,
                                                   self.sizes.embed_vocab_start, self.groups.embed_tp)
        self.layers = nn.ModuleList(
            Qwen3_5MoeDecoderLayer(config, i, self.ops, self.scopes, dtype, device, self.groups,
                                   self.expert_counts, self.routing_log)
            for i in range(config.num_hidden_layers))
        self.norm = Qwen3_5MoeRMSNorm(h, config.rms_norm_eps, self.ops.rms_norm, self.ops.add_rms_norm, dtype,
                                      device)
        self.lm_head = ParallelLMHead(self.sizes.lmhead_vocab, h, dtype, device, self.groups.lmhead_tp)
        inv_freq = rope_inv_freq(config.rope_theta, config.rotary_dim).to(device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.compile_cache_dir = compile_cache_dir
        self._decode_graph: Any = None

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        path_or_preset: str | Path,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
        optimizations: str | Mapping[str, bool] | None = "none",
        parallel_config: Mapping[str, int] | ParallelConfig | None = None,
        num_layers: int | None = None,
        dummy_weights: bool | None = None,
        seed: int = 0,
        exe_mode: str = "ge_graph",
        caps: Capabilities | None = None,
        compile_cache_dir: Path | None = None,
    ) -> Qwen3_5MoeForCausalLM:
        """A preset name (dummy random weights) or an HF checkpoint folder (safetensors unless dummy_weights).

        `optimizations`: "none", "all" (each toggle requested, inactive where unsupported) or {toggle: bool}.
        `parallel_config`: the recipe's section ({world_size, attn_tp_size, moe_tp_size, embed_tp_size,
        lmhead_tp_size, shared_tp_size}). With world_size > 1 the process must be one of world_size ranks
        started by torchrun: it joins the default process group (initialising it from the torchrun environment
        with the device's backend when needed), builds the parallel groups (collective: every rank calls
        from_pretrained with the same arguments) and loads or draws only its own shard.
        """
        config = load_config(path_or_preset, num_layers)
        parallel = parallel_config if isinstance(parallel_config, ParallelConfig) else \
            ParallelConfig.from_dict(dict(parallel_config or {}))
        parallel.validate(config)
        caps = caps or detect_capabilities(device)
        layout = init_distributed(parallel, caps.device)
        groups = build_process_groups(layout, caps.device)
        plan = resolve_plan(optimizations, caps, parallel, config, exe_mode=exe_mode,
                            dtype=str(dtype).removeprefix("torch."))
        model = cls(config, plan, dtype=dtype, device=rank_device(caps.device if device == "auto" else device,
                                                                  layout),
                    compile_cache_dir=compile_cache_dir, groups=groups)
        if dummy_weights is None:
            dummy_weights = str(path_or_preset) in PRESETS
        if dummy_weights:
            weights.init_dummy(model, seed)
        else:
            weights.load_checkpoint(model, Path(path_or_preset))
        model.finalize()
        return model.eval()

    def finalize(self) -> None:
        for module in self.modules():
            if isinstance(module, Qwen3_5MoeRMSNorm):
                module.finalize()

    def slots(self) -> dict[str, Slot]:
        out = {**self.embed_tokens.slots("model.embed_tokens."), **self.lm_head.slots("lm_head."),
               **self.norm.slots("model.norm.")}
        for i, layer in enumerate(self.layers):
            out.update(cast(Qwen3_5MoeDecoderLayer, layer).slots(f"model.layers.{i}."))
        return out

    # ---- forward -------------------------------------------------------------------------------
    def new_cache(self, batch: int, max_len: int) -> Qwen3_5MoeCache:
        """State for `batch` sequences of up to `max_len` tokens, with this rank's head counts (the KV length is
        rounded up to the granularity the bound attention op reads)."""
        s = self.sizes
        multiple = self.ops.kv_cache_multiple
        max_len = -(-max_len // multiple) * multiple
        return Qwen3_5MoeCache.allocate(self.config, batch, max_len, self.dtype, self.device,
                                        num_kv_heads=s.num_kv_heads, num_v_heads=s.linear_v_heads,
                                        conv_dim=s.linear_conv_dim)

    def _layers(self, hidden: torch.Tensor, step: Step) -> torch.Tensor:
        residual = None
        for i, layer in enumerate(self.layers):
            if step.tap is not None:
                hidden, residual = step.tap.enter(i, hidden, residual)
            hidden, residual = layer(hidden, residual, step)
        assert residual is not None, "a model has at least one layer (the config checks it)"
        with self.scopes(module="final_norm"):
            hidden, _ = self.norm.add_forward(hidden, residual)
        return hidden

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, seq_lens: torch.Tensor, cache: Qwen3_5MoeCache,
                all_logits: bool = False, forced_ids: torch.Tensor | None = None,
                tap: LayerTap | None = None) -> torch.Tensor:
        """input_ids [B, T] right-padded, seq_lens [B]. Returns fp32 logits of each prompt's last token [B, V]
        (or of every position [B, T, V] with all_logits). Fills the cache; cache.kv_lens = seq_lens.
        `forced_ids` [L, B*T, K]: expert ids to replay instead of the routers' choices; `tap`: records or replays
        each layer's inputs and hands back its branch outputs (model/replay.py)."""
        b, t = input_ids.shape
        positions = torch.arange(t, device=input_ids.device).expand(b, t)
        cos, sin = rotary_cos_sin(positions, self.inv_freq, self.dtype)
        step = Step(prefill=True, seq_lens=seq_lens, start=torch.zeros_like(seq_lens), cos=cos, sin=sin,
                    cache=cache, forced_ids=forced_ids, tap=tap)
        with self.scopes(module="embed"):
            hidden = self.embed_tokens(input_ids)
        hidden = self._layers(hidden, step)
        if not all_logits:
            hidden = hidden[torch.arange(b, device=hidden.device), seq_lens - 1]
        cache.kv_lens.copy_(seq_lens)
        with self.scopes(module="lm_head"):
            return self.lm_head(hidden).float()

    def _decode_step(self, tokens: torch.Tensor, cache: Qwen3_5MoeCache,
                     forced_ids: torch.Tensor | None = None, tap: LayerTap | None = None) -> torch.Tensor:
        start = cache.kv_lens
        cos, sin = rotary_cos_sin(start[:, None], self.inv_freq, self.dtype)
        step = Step(prefill=False, seq_lens=torch.ones_like(start), start=start, cos=cos, sin=sin,
                    cache=cache, forced_ids=forced_ids, tap=tap)
        with self.scopes(module="embed"):
            hidden = self.embed_tokens(tokens[:, None])
        hidden = self._layers(hidden, step)
        cache.kv_lens.add_(1)
        with self.scopes(module="lm_head"):
            return self.lm_head(hidden[:, 0]).float()

    @torch.inference_mode()
    def decode_step(self, tokens: torch.Tensor, cache: Qwen3_5MoeCache,
                    forced_ids: torch.Tensor | None = None, tap: LayerTap | None = None) -> torch.Tensor:
        """One new token per sequence (tokens [B]); returns fp32 logits [B, V]. Compiled when graph_mode is on
        (the first call compiles). `forced_ids` [L, B, K] and `tap` (a replay's expert ids and layer tap,
        model/replay.py) are graph inputs: a replayed step runs its own compiled graph, built on its first call,
        and ordinary steps keep theirs."""
        if self._decode_graph is None:
            self._decode_graph = self.ops.compile_decode(self._decode_step, self.compile_cache_dir)
        if forced_ids is None and tap is None:
            return self._decode_graph(tokens, cache)
        return self._decode_graph(tokens, cache, forced_ids, tap)

    def _tap(self, forward: int, capture: Capture | None, replay: Replay | None, batch: int, tokens: int
             ) -> LayerTap | None:
        """Forward `forward`'s layer tap: the replay's inputs when it has them, else recording buffers; appended
        to `capture`. None when nothing is captured. The prefill's (eager) is on the host, streamed a layer at a
        time; a decode step's (a graph input) on the device, moved to the host after the step (model/replay.py)."""
        if capture is None:
            return None
        where = "cpu" if forward == 0 else self.device
        if replay is not None and replay.layer_inputs is not None:
            tap = replay.tap(forward, torch.empty(0, dtype=self.dtype, device=where))
        else:
            like = torch.empty(batch, tokens, self.config.hidden_size, dtype=self.dtype, device=where)
            tap = LayerTap.empty(self.config.num_hidden_layers, like)
        capture.taps.append(tap)
        return tap

    def reset_graph(self) -> None:
        """Forget the compiled decode step (the next call compiles again, e.g. to time a warm-cache
        compile)."""
        self._decode_graph = None
        torch._dynamo.reset()

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, seq_lens: torch.Tensor | None = None) -> torch.Tensor:
        """No-cache forward over whole sequences: fp32 logits [B, T, V]."""
        b, t = input_ids.shape
        if seq_lens is None:
            seq_lens = torch.full((b,), t, dtype=torch.long, device=input_ids.device)
        return self.prefill(input_ids, seq_lens, self.new_cache(b, t), all_logits=True)

    # ---- generation ----------------------------------------------------------------------------
    def pad_prompts(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty token lists")
        vocab = self.config.vocab_size
        for i, p in enumerate(prompts):
            bad = [tok for tok in p if not 0 <= int(tok) < vocab]
            if bad:
                raise ValueError(f"prompts[{i}] has token id {bad[0]} outside the vocabulary [0, {vocab})")
        seq_lens = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=self.device)
        ids = torch.zeros(len(prompts), int(seq_lens.max()), dtype=torch.long, device=self.device)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
        return ids, seq_lens

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 16,
                 run_step: StepRunner | None = None) -> GenerateOutput:
        """Greedy decoding of a ragged batch: exactly max_new_tokens new tokens per prompt (no EOS stop)."""
        ids, seq_lens = self.pad_prompts(prompts)
        cache = self.new_cache(ids.shape[0], ids.shape[1] + max(max_new_tokens, 1))
        tokens, logits = self.generate_padded(ids, seq_lens, cache, max_new_tokens, run_step)
        return GenerateOutput(tokens=tokens.tolist(), logits=logits)  # type: ignore[arg-type]

    def generate_padded(self, ids: torch.Tensor, seq_lens: torch.Tensor, cache: Qwen3_5MoeCache,
                        max_new_tokens: int, run_step: StepRunner | None = None,
                        keep_logits: bool = True, replay: Replay | None = None, capture: Capture | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The generation loop on padded prompts and a (reset) cache: prefill, then max_new_tokens - 1 greedy
        decode steps. Each forward goes through `run_step(phase, step, forward)` (default: just call it), the
        hook a harness uses to time steps. Returns tokens [B, max_new_tokens] and, with `keep_logits`, the
        logits that chose them [B, max_new_tokens, V].

        With `replay` (model/replay.py) every decode step is fed the replay's token instead of the
        model's own choice, every MoE layer uses the replay's experts and, when the replay has them, every layer is
        fed the replay's inputs; the returned tokens are still the model's own argmax at each step. With `capture`
        each forward's layer tap (inputs and branch outputs) is appended to it."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        run = run_step or _call_forward
        cache.reset()
        with self.scopes.step(phase="prefill"):
            tap = self._tap(0, capture, replay, ids.shape[0], ids.shape[1])
            logits = run("prefill", 0, lambda: self.prefill(
                ids, seq_lens, cache, forced_ids=None if replay is None else replay.prefill_ids, tap=tap))
        tokens = [logits.argmax(-1)]
        kept = [logits] if keep_logits else []
        for i in range(max_new_tokens - 1):
            fed = tokens[-1] if replay is None else replay.tokens[:, i]
            forced = None if replay is None else replay.decode_ids[i]
            tap = self._tap(i + 1, capture, replay, ids.shape[0], 1)
            with self.scopes.step(phase="decode", step=i):
                logits = run("decode", i, functools.partial(self.decode_step, fed, cache, forced, tap))
            if capture is not None:  # the step's tap to the host (outside the timed step)
                capture.to_host(replay.layer_inputs[i + 1] if replay is not None and replay.layer_inputs else None)
            tokens.append(logits.argmax(-1))
            if keep_logits:
                kept.append(logits)
        return torch.stack(tokens, dim=1), torch.stack(kept, dim=1) if keep_logits else None
