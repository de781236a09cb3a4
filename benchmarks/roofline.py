"""This machine's limits and how close decode of the small preset gets to them.

    python benchmarks/roofline.py [--preset small] [--steps 32] [--reps 5]

Measures (1) memory read bandwidth: torch.sum over a 2 GiB fp32 buffer (far beyond the caches), best of reps;
(2) fp32 matmul throughput: a 2048^3 GEMM; (3) for decode of the preset at batch 1 with the best plan, the
weight bytes that must be read per token (attention/GDN projections of every layer, router + shared expert,
the top-k routed experts (k distinct per layer at batch 1) and lm_head; embedding is one row) and the
achieved bandwidth = bytes / step time, as a fraction of the measured limit.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model import Qwen3_5MoeForCausalLM  # noqa: E402
from perfbench.analysis import stats  # noqa: E402


def read_bandwidth(reps: int) -> float:
    buf = torch.ones(2 * 2**30 // 4, dtype=torch.float32)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    return buf.numel() * 4 / best


def matmul_flops(reps: int, n: int = 2048) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def bytes_per_token(model: Qwen3_5MoeForCausalLM) -> int:
    """Weights one batch-1 decode step must read: every non-expert weight (one row of the embedding), and
    k distinct routed experts per layer (top-k picks k different experts)."""
    k = model.config.num_experts_per_tok
    total = 0
    for name, p in model.named_parameters():
        size = p.numel() * p.element_size()
        if name.startswith("embed_tokens."):
            total += size // p.shape[0]
        elif ".mlp.experts." in name:
            total += size // p.shape[0] * k
        else:
            total += size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    bw = read_bandwidth(args.reps)
    flops = matmul_flops(args.reps)
    model = Qwen3_5MoeForCausalLM.from_pretrained(args.preset, optimizations="all")
    weights_gb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9
    prompt = torch.randint(0, model.config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
    cache = model.new_cache(1, 128 + args.steps + 1)
    step_times: list[float] = []
    for rep in range(args.reps + 1):  # rep 0 warms up (and compiles the decode graph)
        cache.reset()
        tok = model.prefill(prompt, torch.tensor([128]), cache).argmax(-1)
        for _ in range(args.steps):
            t0 = time.perf_counter()
            tok = model.decode_step(tok, cache).argmax(-1)
            if rep:
                step_times.append(time.perf_counter() - t0)
    step = stats.median(step_times)
    need = bytes_per_token(model)
    print(f"memory read bandwidth (sum over 2 GiB fp32, best of {args.reps}): {bw / 1e9:.1f} GB/s")
    print(f"fp32 matmul 2048^3 (best of {args.reps}): {flops / 1e9:.1f} GFLOP/s")
    print(f"{args.preset} preset: {weights_gb:.2f} GB of weights; plan: "
          f"{', '.join(n for n, d in model.plan.decisions.items() if d.on)}")
    print(f"decode batch 1: {need / 1e6:.1f} MB of weights per token, median step {step * 1e3:.2f} ms "
          f"over {len(step_times)} steps")
    print(f"achieved {need / step / 1e9:.1f} GB/s = {need / step / bw:.0%} of the measured read bandwidth")


if __name__ == "__main__":
    main()
