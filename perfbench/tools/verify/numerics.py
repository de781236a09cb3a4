"""How verify compares a model with the all-off model: teacher-forced logits on one ragged batch.

Both models prefill the same prompts and then decode the all-off model's greedy tokens (teacher forcing), and every
MoE layer of the model under test uses the experts the all-off model chose for that token (routing replay,
model/replay.py), so they answer the same question at every step even where a near tie flips a greedy token or
an expert choice (exact ties are common in bf16 with hundreds of experts). The logits agree when

- their largest difference is within `LOGIT_TOL_STD` standard deviations of the reference logits (bf16 paths
  round at different points; with dummy weights the NPU GDN decode's bf16 state, rounded every step by design,
  reaches about half a standard deviation: docs/verify.md, "Tolerances");
- the greedy choice agrees at `TOKEN_AGREEMENT` of the positions, and at every position whose reference top-2
  margin exceeds twice the tolerance (no rounding can flip those).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from model.modeling import Qwen3_5MoeForCausalLM
from model.replay import Replay
from model.routing_log import RoutedCall

PROMPTS = [[5, 17, 300, 999, 12, 40, 41], [7, 8], [1, 2, 3, 4]]  # ragged: padding and per-row lengths
NEW_TOKENS = 4
LOGIT_TOL_STD = 1.0
ROUTING_FILE = "reference_routing.safetensors"  # beside a parallel job's spec: the routing its ranks replay
TOKEN_AGREEMENT = 0.75


@torch.inference_mode()
def forced_logits(model: Qwen3_5MoeForCausalLM, tokens: list[list[int]], prompts: list[list[int]] = PROMPTS,
                  routing: list[RoutedCall] | None = None) -> torch.Tensor:
    """Prefill `prompts`, then decode `tokens` (all but the last of each row): fp32 logits [B, N, V] on the
    CPU, N = len(tokens[0]). The first decode step captures the graph under graph_mode. `routing`: the reference's
    routing log of this same teacher-forced pass, replayed at every MoE layer (None: the model routes itself)."""
    n = len(tokens[0])
    ids, seq_lens = model.pad_prompts(prompts)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + n)
    forced = torch.tensor(tokens, device=ids.device)
    replay = None if routing is None else Replay.of(forced, routing, model.config.num_hidden_layers, ids.device)
    steps = [model.prefill(ids, seq_lens, cache, forced_ids=None if replay is None else replay.prefill_ids)]
    for i in range(n - 1):
        # contiguous, as generate's own tokens are: a strided column would make the graph recompile for them
        steps.append(model.decode_step(forced[:, i].contiguous(), cache,
                                       None if replay is None else replay.decode_ids[i]))
    return torch.stack(steps, dim=1).float().cpu()


def reference_pass(model: Qwen3_5MoeForCausalLM, tokens: list[list[int]], prompts: list[list[int]] = PROMPTS
                   ) -> tuple[torch.Tensor, list[RoutedCall]]:
    """The all-off model's teacher-forced logits and the routing it chose on the way, to replay."""
    with model.routing_log.recording() as log:
        logits = forced_logits(model, tokens, prompts)
    return logits, list(log.calls)


@dataclass(frozen=True)
class Agreement:
    max_abs_diff: float
    tolerance: float
    token_agreement: float
    decisive_positions: int
    decisive_match: bool

    @property
    def ok(self) -> bool:
        return (self.max_abs_diff <= self.tolerance and self.token_agreement >= TOKEN_AGREEMENT
                and self.decisive_match)

    def line(self) -> str:
        return (f"max |logit diff| {self.max_abs_diff:.3f} (tolerance {self.tolerance:.3f}), greedy agreement "
                f"{self.token_agreement:.0%}, {self.decisive_positions} decisive positions "
                f"{'match' if self.decisive_match else 'DIFFER'}")

    def to_dict(self) -> dict[str, float | int | bool]:
        return {**asdict(self), "ok": self.ok}


def agreement(got: torch.Tensor, want: torch.Tensor) -> Agreement:
    """`got` against the reference `want` (both [B, N, V], teacher-forced on the same tokens)."""
    tol = LOGIT_TOL_STD * want.std().item()
    top2 = want.topk(2, dim=-1).values
    decisive = (top2[..., 0] - top2[..., 1]) > 2 * tol
    same = got.argmax(-1) == want.argmax(-1)
    diff = (got - want).abs().max().item()
    return Agreement(diff if diff == diff else float("inf"), tol, same.float().mean().item(), int(decisive.sum()),
                     bool(same[decisive].all()))
