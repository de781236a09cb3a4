"""Our model vs HF transformers' Qwen3_5MoeForCausalLM with the SAME weights, side by side in one process.

    python benchmarks/vs_transformers.py [--preset tiny|small] [--dtypes float32,bfloat16] [--batches 1,4]
                                         [--prompt 512] [--steps 32] [--reps 9] [--no-hf-compile]

Candidates: HF eager, HF torch.compile (fp32 only unless --hf-compile-all), ours all-off, ours with the best
plan for this device (every toggle requested; graph_mode compiles the decode step). Each rep runs every
candidate once (A B C D A B C D ...): a 512-token prefill, then `steps` greedy decode steps; reported are the
median prefill time and the median per-step decode time over reps, and ratios to HF eager and HF compile
(prefill and decode) as the median of the per-rep ratios (each rep runs all candidates back to back); the
output names the CPU model. The greedy tokens of our best plan are checked against HF eager in fp32.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _timing import generation_runner, table

from model import Qwen3_5MoeForCausalLM
from model.config import PRESETS
from perfbench.analysis import stats
from perfbench.measure.environment import cpu_model
from tests.hf_reference import build_hf_model, save_hf_checkpoint

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def hf_runner(model, prompt: torch.Tensor, steps: int) -> Callable[[], tuple[float, list[float], list[int]]]:
    from transformers import DynamicCache

    @torch.inference_mode()
    def run() -> tuple[float, list[float], list[int]]:
        cache = DynamicCache(config=model.config)
        t0 = time.perf_counter()
        out = model(prompt, cache=cache, use_cache=True, logits_to_keep=1)
        prefill = time.perf_counter() - t0
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens, step_s = [tok[0, 0].item()], []
        for _ in range(steps):
            t0 = time.perf_counter()
            out = model(tok, cache=cache, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            step_s.append(time.perf_counter() - t0)
            tokens.append(tok[0, 0].item())
        return prefill, step_s, tokens
    return run


def bench_case(preset: str, dtype_name: str, batch: int, args: argparse.Namespace, folder: Path) -> list[list[str]]:
    dtype = DTYPES[dtype_name]
    from transformers import Qwen3_5MoeForCausalLM as HFModel

    hf = HFModel.from_pretrained(folder, dtype=dtype).eval()
    prompt = torch.randint(0, hf.config.vocab_size, (batch, args.prompt), generator=torch.Generator().manual_seed(3))
    runners: dict[str, Callable] = {"HF eager": hf_runner(hf, prompt, args.steps)}
    if args.hf_compile and (dtype_name == "float32" or args.hf_compile_all):
        hf_c = HFModel.from_pretrained(folder, dtype=dtype).eval()
        hf_c.forward = torch.compile(hf_c.forward)
        runners["HF compile"] = hf_runner(hf_c, prompt, args.steps)
    for name, opt in (("ours all-off", "none"), ("ours best", "all")):
        ours = Qwen3_5MoeForCausalLM.from_pretrained(str(folder), dtype=dtype, optimizations=opt)
        runners[name] = generation_runner(ours, prompt, args.steps)
    first: dict[str, float] = {}
    for name, run in runners.items():  # warm-up (and compile) each once
        t0 = time.perf_counter()
        run()
        first[name] = time.perf_counter() - t0
    prefill: dict[str, list[float]] = {n: [] for n in runners}
    decode: dict[str, list[float]] = {n: [] for n in runners}
    tokens: dict[str, list[int]] = {}
    for _ in range(args.reps):
        for name, run in runners.items():
            p, steps, toks = run()
            prefill[name].append(p)
            decode[name].append(stats.median(steps))
            tokens[name] = toks
    rows = []

    def paired(samples: dict[str, list[float]], name: str, base: str) -> float:
        # Median of the per-rep ratios: each rep runs every candidate back to back, so a slow spell of this
        # shared machine hits both sides of a ratio instead of whichever candidate it happened to overlap.
        return stats.median([a / b for a, b in zip(samples[name], samples[base], strict=True)])

    def vs_compile(samples: dict[str, list[float]], name: str) -> str:
        return f"{paired(samples, name, 'HF compile'):.2f}x" if "HF compile" in samples else "-"

    for name in runners:
        p = stats.median(prefill[name])
        d = stats.median(decode[name])
        same = "-" if name == "HF eager" else ("yes" if tokens[name] == tokens["HF eager"] else "no")
        rows.append([preset, dtype_name, batch, name, f"{p * 1e3:.1f}", f"{paired(prefill, name, 'HF eager'):.2f}x",
                     vs_compile(prefill, name), f"{d * 1e3:.2f}", f"{paired(decode, name, 'HF eager'):.2f}x",
                     vs_compile(decode, name), f"{first[name]:.1f}", same])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=[p for p in PRESETS if p != "qwen3.5-35b-a3b"])
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--no-hf-compile", dest="hf_compile", action="store_false")
    parser.add_argument("--hf-compile-all", action="store_true", help="also compile HF in bf16")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_hf_checkpoint(build_hf_model(PRESETS[args.preset](), seed=0), Path(tmp))
        for dtype_name in args.dtypes.split(","):
            for batch in map(int, args.batches.split(",")):
                rows += bench_case(args.preset, dtype_name, batch, args, folder)
                print(table(rows[-4:], HEADER), flush=True)
    print(f"\n{cpu_model()}; torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads; prompt {args.prompt}, "
          f"{args.steps} decode steps, median of {args.reps} alternating reps")
    print(table(rows, HEADER))


HEADER = ["preset", "dtype", "B", "candidate", "prefill ms", "vs HF eager", "vs HF compile", "decode ms/step",
          "vs HF eager", "vs HF compile", "1st run s", "tokens = HF eager"]

if __name__ == "__main__":
    main()
