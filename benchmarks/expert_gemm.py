"""The two forms of the prefill experts' gate/up grouped GEMM on CPU, side by side in one process.

    python benchmarks/expert_gemm.py [--presets tiny,small,qwen3.5-35b-a3b] [--tokens 1,16,64,128,512,2048]
                                     [--reps 7] [--dtype float32] [--prefill-presets tiny,small] [--prompt 512]

For each preset's expert shapes (E experts, K per token, hidden H, intermediate I) and token count N, runs the
whole sorted grouped-matmul experts function (`moe._experts_sorted_grouped_mm`) with the gate/up GEMM as
x W^T (tokens left) and as W x^T (weights left), on random routing (each token's K experts drawn uniformly),
alternating the two. Prints the mean rows per expert segment (N*K/E), the median time of each form and the
ratio weights-left / tokens-left; `moe.WEIGHT_LEFT_ROWS` is the range of mean row counts in which
`experts_grouped_cpu` takes the weights-left form. Large presets use one layer's experts (E x 3 x H x I
weights: about 3 GB in fp32 for qwen3.5-35b-a3b).

Then, for each of `--prefill-presets` (random weights, every toggle requested), the whole model's batch-1 prefill
of `--prompt` tokens with the experts op as the plan binds it and with the tokens-left form forced, alternating;
prints both medians and the median of the paired per-rep ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

import torch
from _timing import interleaved, median_ms, table

from model import Qwen3_5MoeForCausalLM
from model.config import PRESETS
from model.layers.moe import Qwen3_5MoeSparseMoeBlock
from model.ops import OpSet, moe
from perfbench.analysis import stats
from perfbench.measure.environment import cpu_model

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def case(preset: str, tokens: int, dtype: torch.dtype, reps: int) -> list[str]:
    cfg = PRESETS[preset]()
    E, K, H, I = cfg.num_experts, cfg.num_experts_per_tok, cfg.hidden_size, cfg.moe_intermediate_size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, H, generator=g).to(dtype)
    ids = torch.rand(tokens, E, generator=g).argsort(dim=-1)[:, :K]
    weights = torch.rand(tokens, K, generator=g).to(dtype)
    gate_up = [(torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).to(dtype)]
    down = (torch.randn(E, H, I, generator=g) * I ** -0.5).to(dtype)

    def form(weights_left: bool) -> Callable[[], object]:
        return lambda: moe._experts_sorted_grouped_mm(x, ids, weights, gate_up, down, weights_left=weights_left)

    forms = {"tokens left": form(False), "weights left": form(True)}
    samples = interleaved(forms, reps=reps)
    t_tok, t_w = median_ms(samples["tokens left"]), median_ms(samples["weights left"])
    return [preset, str(tokens), f"{tokens * K / E:.1f}", f"{t_tok:.2f}", f"{t_w:.2f}", f"{t_w / t_tok:.2f}"]


def prefill_case(preset: str, prompt_len: int, dtype: torch.dtype, reps: int) -> list[str]:
    model = Qwen3_5MoeForCausalLM.from_pretrained(preset, dtype=dtype, optimizations="all")
    blocks = [m for m in model.modules() if isinstance(m, Qwen3_5MoeSparseMoeBlock)]
    bound = blocks[0].ops
    tokens_left = dataclasses.replace(bound, experts_prefill=lambda *a: moe._experts_sorted_grouped_mm(*a))
    ids = torch.randint(0, model.config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    lens = torch.tensor([prompt_len])
    cache = model.new_cache(1, prompt_len)

    def prefill_with(ops: OpSet) -> Callable[[], None]:
        def run() -> None:
            for block in blocks:
                block.ops = ops
            cache.reset()
            model.prefill(ids, lens, cache)
        return run

    samples = interleaved({"tokens left": prefill_with(tokens_left), "as bound": prefill_with(bound)}, reps=reps)
    for block in blocks:
        block.ops = bound
    ratio = stats.median([a / b for a, b in zip(samples["as bound"], samples["tokens left"], strict=True)])
    rows = prompt_len * model.config.num_experts_per_tok / model.config.num_experts
    return [preset, str(prompt_len), f"{rows:.1f}", f"{median_ms(samples['tokens left']):.1f}",
            f"{median_ms(samples['as bound']):.1f}", f"{ratio:.3f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,small,qwen3.5-35b-a3b")
    parser.add_argument("--tokens", default="1,16,64,128,512,2048")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
    parser.add_argument("--prefill-presets", default="tiny,small", help="'' to skip the whole-model prefill")
    parser.add_argument("--prompt", type=int, default=512)
    args = parser.parse_args()
    rows = []
    for preset in args.presets.split(","):
        for tokens in map(int, args.tokens.split(",")):
            rows.append(case(preset, tokens, DTYPES[args.dtype], args.reps))
            print(table(rows[-1:], HEADER), flush=True)
    print(f"\n{cpu_model()}; torch {torch.__version__}, {torch.get_num_threads()} threads, {args.dtype}; "
          f"median of {args.reps} alternating reps; weights-left used at {moe.WEIGHT_LEFT_ROWS[0]}-"
          f"{moe.WEIGHT_LEFT_ROWS[1]} rows per expert")
    print(table(rows, HEADER))
    prefill_rows = [prefill_case(p, args.prompt, DTYPES[args.dtype], args.reps)
                    for p in filter(None, args.prefill_presets.split(","))]
    if prefill_rows:
        print("\nwhole-model prefill, batch 1, every toggle requested; ratio = median of paired per-rep ratios")
        print(table(prefill_rows, PREFILL_HEADER))


PREFILL_HEADER = ["preset", "prompt", "rows/expert", "tokens-left ms", "as bound ms", "bound/tokens-left"]
HEADER = ["preset", "tokens", "rows/expert", "tokens-left ms", "weights-left ms", "weights/tokens"]

if __name__ == "__main__":
    main()
