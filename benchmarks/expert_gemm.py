"""The two forms of the prefill experts' gate/up grouped GEMM on CPU, side by side in one process.

    python benchmarks/expert_gemm.py [--presets tiny,small,qwen3.5-35b-a3b] [--tokens 1,16,64,128,512,2048]
                                     [--reps 7] [--dtype float32]

For each preset's expert shapes (E experts, K per token, hidden H, intermediate I) and token count N, runs the
whole sorted grouped-matmul experts function (`moe._experts_sorted_grouped_mm`) with the gate/up GEMM as
x W^T (tokens left) and as W x^T (weights left), on random routing (each token's K experts drawn uniformly),
alternating the two. Prints the mean rows per expert segment (N*K/E), the median time of each form and the
ratio weights-left / tokens-left; `moe.WEIGHT_LEFT_ROWS` is the range of mean row counts in which
`experts_grouped_cpu` takes the weights-left form. Large presets use one layer's experts (E x 3 x H x I
weights: about 3 GB in fp32 for qwen3.5-35b-a3b).
"""

from __future__ import annotations

import argparse

import torch
from _timing import interleaved, median_ms, table

from model.config import PRESETS
from model.ops import moe
from perfbench.run.environment import cpu_model

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

    def form(weights_left: bool):
        return lambda: moe._experts_sorted_grouped_mm(x, ids, weights, gate_up, down, weights_left=weights_left)

    forms = {"tokens left": form(False), "weights left": form(True)}
    samples = interleaved(forms, reps=reps)
    t_tok, t_w = median_ms(samples["tokens left"]), median_ms(samples["weights left"])
    return [preset, str(tokens), f"{tokens * K / E:.1f}", f"{t_tok:.2f}", f"{t_w:.2f}", f"{t_w / t_tok:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,small,qwen3.5-35b-a3b")
    parser.add_argument("--tokens", default="1,16,64,128,512,2048")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
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


HEADER = ["preset", "tokens", "rows/expert", "tokens-left ms", "weights-left ms", "weights/tokens"]

if __name__ == "__main__":
    main()
