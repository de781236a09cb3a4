"""How verify compares a model with the all-off model: the run's replay numerics on one ragged batch.

Both models prefill the same prompts and then decode the all-off model's greedy tokens (teacher forcing); every
MoE layer of the model under test uses the experts the all-off model chose for that token (routing replay) and
every decoder layer is fed the all-off model's inputs to that layer (layer replay, model/replay.py), so each
layer's branch outputs differ from the reference's by that layer's own kernels only. The comparison and its
bound are a run's (perfbench/measure/numerics.py, `numerics_against_reference`): the largest pooled relative
error of one (phase, layer, branch) or of the logits, within REL_ERROR_TOLERANCE of the dtype. A kernel off by a
few percent is off at every token, so it leaves that bound however small the logits' spread; the greedy
agreement is kept as information, as a run keeps it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from model.modeling import Qwen3_5MoeForCausalLM
from model.replay import Capture, LayerTap, Replay
from model.routing_log import RoutedCall
from perfbench.measure.numerics import compare_replayed
from perfbench.results import REL_ERROR_TOLERANCE

PROMPTS = [[5, 17, 300, 999, 12, 40, 41], [7, 8], [1, 2, 3, 4]]  # ragged: padding and per-row lengths
NEW_TOKENS = 4
ROUTING_FILE = "reference_routing.safetensors"  # beside a parallel job's spec: the routing its ranks replay


@dataclass(frozen=True)
class Forced:
    """A teacher-forced pass: fp32 logits [B, N, V] on the CPU and, per forward, every layer's branch outputs
    [L, 2, B, T, H] (with the inputs each layer got, when they were recorded rather than replayed)."""

    logits: torch.Tensor
    outputs: list[torch.Tensor]
    inputs: list[torch.Tensor]


@torch.inference_mode()
def forced_pass(model: Qwen3_5MoeForCausalLM, tokens: list[list[int]], prompts: list[list[int]] = PROMPTS,
                routing: list[RoutedCall] | None = None, layer_inputs: list[torch.Tensor] | None = None) -> Forced:
    """Prefill `prompts`, then decode `tokens` (all but the last of each row), N = len(tokens[0]) forwards;
    each layer's inputs and branch outputs are recorded (model/replay.py), moved to the CPU forward by forward.
    The first decode step captures the graph under graph_mode. `routing`: the reference's routing log of this
    same teacher-forced pass, replayed at every MoE layer; `layer_inputs` (with `routing`): the reference's layer
    inputs per forward, fed to every layer."""
    n = len(tokens[0])
    ids, seq_lens = model.pad_prompts(prompts)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + n)
    forced = torch.tensor(tokens, device=ids.device)
    replay = None if routing is None else Replay.of(forced, routing, model.config.num_hidden_layers, ids.device,
                                                    layer_inputs=layer_inputs)
    capture = Capture()

    def tap(forward: int, width: int) -> LayerTap:
        # as the model's own generation loop: the prefill's on the host, a decode step's on the device
        where = "cpu" if forward == 0 else model.device
        if replay is not None and replay.layer_inputs is not None:
            made = replay.tap(forward, torch.empty(0, dtype=model.dtype, device=where))
        else:
            like = torch.empty(ids.shape[0], width, model.config.hidden_size, dtype=model.dtype, device=where)
            made = LayerTap.empty(model.config.num_hidden_layers, like)
        capture.taps.append(made)
        return made

    steps = [model.prefill(ids, seq_lens, cache, forced_ids=None if replay is None else replay.prefill_ids,
                           tap=tap(0, ids.shape[1]))]
    for i in range(n - 1):
        # contiguous, as generate's own tokens are: a strided column would make the graph recompile for them
        steps.append(model.decode_step(forced[:, i].contiguous(), cache,
                                       None if replay is None else replay.decode_ids[i], tap(i + 1, 1)))
        capture.to_host()
    return Forced(torch.stack(steps, dim=1).float().cpu(), [t.outputs.cpu() for t in capture.taps],
                  [t.inputs.cpu() for t in capture.taps])


def forced_logits(model: Qwen3_5MoeForCausalLM, tokens: list[list[int]], prompts: list[list[int]] = PROMPTS,
                  routing: list[RoutedCall] | None = None) -> torch.Tensor:
    """`forced_pass`'s logits alone."""
    return forced_pass(model, tokens, prompts, routing).logits


def reference_pass(model: Qwen3_5MoeForCausalLM, tokens: list[list[int]], prompts: list[list[int]] = PROMPTS
                   ) -> tuple[Forced, list[RoutedCall]]:
    """The all-off model's teacher-forced pass (logits, every layer's inputs and outputs) and the routing it chose
    on the way, to replay."""
    with model.routing_log.recording() as log:
        forced = forced_pass(model, tokens, prompts)
    return forced, list(log.calls)


@dataclass(frozen=True)
class Agreement:
    """A replayed pass against the reference, judged as a run's numerics are."""

    max_rel_error: float  # the largest (phase, layer, branch) or logits relative error; NaN for NaN or inf
    bound: float  # REL_ERROR_TOLERANCE of the dtype
    where: str  # "decode layer 1 mixer", "prefill logits"
    max_rel_logit_error: float
    max_abs_logit_diff: float
    top1_agreement: float  # information: the greedy choices that match the reference's

    @property
    def ok(self) -> bool:
        return self.max_rel_error <= self.bound  # False for NaN

    def line(self) -> str:
        return (f"max relative error {self.max_rel_error:.2e} at {self.where} (bound {self.bound:.1e}), logits "
                f"{self.max_rel_logit_error:.2e}, greedy agreement {self.top1_agreement:.0%}")

    def to_dict(self) -> dict[str, float | str | bool]:
        return {**asdict(self), "ok": self.ok}


def agreement(got: Forced, want: Forced, dtype: str, prompts: list[list[int]] = PROMPTS) -> Agreement:
    """`got` (replaying `want`'s tokens, experts and layer inputs) against the reference `want`, by the run's
    numerics (perfbench/measure/numerics.py) and the bound of `dtype`."""
    seq_lens = torch.tensor([len(p) for p in prompts])
    a = compare_replayed(got.outputs, want.outputs, got.logits, want.logits, seq_lens)
    return Agreement(a.max_rel_error, REL_ERROR_TOLERANCE[dtype], a.where, a.max_rel_logit_error,
                     a.max_abs_logit_diff, a.top1_agreement)
