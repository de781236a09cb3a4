"""This CPU's limits and how close the small preset's prefill and decode get to them.

    python benchmarks/roofline.py [--preset small] [--prompt 128] [--steps 32] [--reps 5] [--cached]

Peaks: fp32 GEMM FLOP/s (a 2048^3 torch.matmul) and streaming read bandwidth (torch.sum over 2 GiB), measured
by perfbench.roofline.peaks (fresh unless --cached, which reuses the per-machine cache `perfbench` runs use).
Work: model/cost.py's count of the same batch-1 prefill and mean decode step with the plan's effective toggles.
Reports (1) the decode step against its memory roofline (bytes the step must move / read bandwidth; at batch 1
almost all of it is the weights of every non-expert layer, K routed experts per layer and lm_head) and (2) the
prefill against the GEMM floor (its FLOPs / GEMM FLOP/s) and against the per-op roofline (max of compute and
memory time per op, summed). A run takes about a minute on the small preset; rep 0 warms up (and compiles the
decode graph under graph_mode).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model import Qwen3_5MoeForCausalLM
from model.cost import CostToggles, CostWorkload, model_cost
from model.optimizations import TOGGLE_NAMES
from model.parallel_config import ParallelConfig
from perfbench.analysis import stats
from perfbench.roofline.peaks import cpu_peaks
from perfbench.roofline.pricing import estimate_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--optimizations", default="all", help="'all', 'none' (the plan resolves what runs)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt length (batch 1)")
    parser.add_argument("--steps", type=int, default=32, help="decode steps timed per rep")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cached", action="store_true", help="reuse this machine's cached peaks")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    peaks = cpu_peaks(refresh=not args.cached, reps=args.reps)
    gemm, bandwidth = peaks.flops["float32"], peaks.require_memory()

    model = Qwen3_5MoeForCausalLM.from_pretrained(args.preset, optimizations=args.optimizations)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    lens = torch.tensor([args.prompt])
    cache = model.new_cache(1, args.prompt + args.steps + 1)
    prefill_times: list[float] = []
    step_times: list[float] = []
    for rep in range(args.reps + 1):
        cache.reset()
        t0 = time.perf_counter()
        tok = model.prefill(prompt, lens, cache).argmax(-1)
        if rep:
            prefill_times.append(time.perf_counter() - t0)
        for _ in range(args.steps):
            t0 = time.perf_counter()
            tok = model.decode_step(tok, cache).argmax(-1)
            if rep:
                step_times.append(time.perf_counter() - t0)
    prefill_s, step_s = stats.median(prefill_times), stats.median(step_times)

    on = {name: model.plan.on(name) for name in TOGGLE_NAMES}
    # output_len steps + 1 so the mean decode KV length is the timed steps' mean (prompt + steps / 2)
    cost = model_cost(model.config, ParallelConfig(), CostWorkload.uniform(1, args.prompt, args.steps + 1, 4),
                      CostToggles.from_states(on), "cpu")
    prefill_est, decode_est = estimate_model(cost, peaks, "float32")
    step_bytes, weight_bytes = cost.decode.total("bytes"), cost.decode.total("weight_bytes")
    prefill_flops = cost.prefill.total("flops")

    print(f"peaks ({'cached' if args.cached else 'measured now'}, {peaks.title}): fp32 GEMM "
          f"{gemm / 1e9:.1f} GFLOP/s, read bandwidth {bandwidth / 1e9:.1f} GB/s")
    print(f"{args.preset} preset, plan: {', '.join(n for n, v in on.items() if v) or 'none'}")
    print(f"decode batch 1: {step_bytes / 1e6:.1f} MB per step ({weight_bytes / 1e6:.1f} MB weights); memory "
          f"roofline {step_bytes / bandwidth * 1e3:.2f} ms, per-op roofline {decode_est.roofline_s * 1e3:.2f} ms; "
          f"measured median {step_s * 1e3:.2f} ms over {len(step_times)} steps = "
          f"{step_bytes / bandwidth / step_s:.0%} of the memory roofline ({step_bytes / step_s / 1e9:.1f} GB/s)")
    print(f"prefill batch 1 x {args.prompt}: {prefill_flops / 1e9:.2f} GFLOP; GEMM floor "
          f"{prefill_flops / gemm * 1e3:.2f} ms, per-op roofline {prefill_est.roofline_s * 1e3:.2f} ms; measured "
          f"median {prefill_s * 1e3:.2f} ms = {prefill_flops / gemm / prefill_s:.0%} of the GEMM floor "
          f"({prefill_flops / prefill_s / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
