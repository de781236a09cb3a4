"""What only a CUDA GPU can check: fla's chunked gated delta rule, the model's CUDA plan and CUDA-graph decode.

    python benchmarks/cuda_check.py [--preset qwen3.5-35b-a3b] [--layers 4] [--prompt 1024] [--steps 32]
                                    [--batches 1,8] [--reps 5] [--json FILE]

CI has no GPU; this script is what runs on one (the per-op tests in tests/model/ops also run their CUDA
implementations on CUDA tensors when a GPU is present). It prints, and exits 1 if a check fails:
1. kernels: fla `chunk_gated_delta_rule` (the chunk_gdr toggle on CUDA) against the token-recurrence reference
   on ragged bf16 rows with an initial state, and its time against the pure-torch chunked fallback
   ("cuda_torch") and the unfused recurrence at the preset's linear-attention dims;
2. model, bf16, the preset's full layer dims with `--layers` layers and dummy weights: prefill and decode time of
   three plans (everything off, every toggle but graph_mode, every toggle), each plan's toggles as resolved;
   graph_mode must run through CUDA graphs (inductor skips none) and its decode logits, fed the same tokens,
   must match the same plan in eager;
3. parity: the tiny preset in fp32 with every toggle against HF transformers eager on the same GPU, greedy tokens.
Times are medians over `--reps` alternating reps (device-synchronised wall clock).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _timing import generation_runner, interleaved, median_ms, table

from model import Qwen3_5MoeForCausalLM
from model.config import PRESETS, load_config
from model.ops.gdn import GDR_PREFILL, gdr_prefill_ref
from model.toggles import TOGGLE_NAMES

DEVICE = "cuda"
# bf16 operands through a chunked kernel against an fp32 recurrence: relative RMS error well under 1e-2 is
# rounding; a wrong decay, mask or state layout gives errors of order 1.
GDR_MAX_REL_RMS = 2e-2
# The same bf16 plan compiled by inductor (other fusions, other rounding) against eager, teacher-forced.
GRAPH_MAX_REL_RMS = 3e-2


def rel_rms(ref: torch.Tensor, out: torch.Tensor) -> float:
    r, o = ref.double(), out.double()
    return float((o - r).norm() / r.norm().clamp_min(1e-30))


def gdr_inputs(B: int, T: int, Hk: int, Hv: int, Dk: int, Dv: int, dtype: torch.dtype, seed: int
               ) -> dict[str, torch.Tensor]:
    """Inputs in the ranges and dtypes the model's layer feeds the op: unit-norm q/k, log decay g <= 0 and
    beta in (0, 1), all fp32, beside v in the model dtype."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    return {"q": F.normalize(randn(B, T, Hk, Dk), dim=-1),
            "k": F.normalize(randn(B, T, Hk, Dk), dim=-1),
            "v": randn(B, T, Hv, Dv).to(dtype),
            "g": -torch.exp(randn(Hv) * 0.5) * F.softplus(randn(B, T, Hv)),
            "beta": torch.sigmoid(randn(B, T, Hv))}


def check_gdr(cfg, reps: int, failures: list[str]) -> list[list[str]]:
    Hk, Hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    Dk, Dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    rows = []
    # correctness: ragged rows (one shorter than a chunk), T not a multiple of the chunk, an initial state
    B, T = 2, 300
    x = gdr_inputs(B, T, Hk, Hv, Dk, Dv, torch.bfloat16, seed=1)
    seq_lens = torch.tensor([T, 41])
    h0 = torch.randn(B, Hv, Dk, Dv, generator=torch.Generator().manual_seed(2)) * 0.1
    o_ref, s_ref = gdr_prefill_ref(**{n: t.cuda() for n, t in x.items()}, scale=Dk ** -0.5,
                                   initial_state=h0.cuda(), seq_lens=seq_lens.cuda())
    valid = (torch.arange(T)[None, :] < seq_lens[:, None]).cuda()
    for impl in ("cuda", "cuda_torch"):
        o, s = GDR_PREFILL[impl](**{n: t.cuda() for n, t in x.items()}, scale=Dk ** -0.5, initial_state=h0.cuda(),
                                 seq_lens=seq_lens.cuda())
        err_o, err_s = rel_rms(o_ref[valid], o[valid]), rel_rms(s_ref, s)
        finite = bool(torch.isfinite(o.float()).all())
        ok = finite and max(err_o, err_s) < GDR_MAX_REL_RMS
        if not ok:
            failures.append(f"gdr prefill {impl}: rel-RMS o {err_o:.2e}, state {err_s:.2e}, finite={finite}")
        rows.append([f"gdr prefill {impl} vs recurrence", f"B{B} T{T} ragged+h0", f"{err_o:.1e} / {err_s:.1e}",
                     "ok" if ok else "FAIL"])
    # speed at the preset's dims: one 4096-token row
    x = {n: t.cuda() for n, t in gdr_inputs(1, 4096, Hk, Hv, Dk, Dv, torch.bfloat16, seed=3).items()}
    candidates: dict[str, Callable[[], object]] = {
        impl: (lambda impl=impl: GDR_PREFILL[impl](**x, scale=Dk ** -0.5)) for impl in ("cuda", "cuda_torch", "ref")}
    samples = interleaved(candidates, reps=reps, warmup=1, device=DEVICE)
    base = median_ms(samples["ref"])
    for impl, s in samples.items():
        rows.append([f"gdr prefill {impl}", f"B1 T4096 Hk{Hk} Hv{Hv} D{Dk}", f"{median_ms(s):.2f} ms",
                     f"{base / median_ms(s):.1f}x vs ref"])
    return rows


PLANS = {
    "all off": "none",
    "all but graph_mode": {name: name != "graph_mode" for name in TOGGLE_NAMES},
    "all (graph_mode)": "all",
}


def check_model(preset: str, layers: int, prompt_len: int, steps: int, batches: list[int], reps: int,
                failures: list[str], plans_seen: dict[str, dict[str, bool]]) -> list[list[str]]:
    """Each plan's model is built once (dummy weights at full layer size take a while to draw) and kept."""
    vocab = load_config(preset, layers).vocab_size
    models = {}
    for label, opt in PLANS.items():
        models[label] = Qwen3_5MoeForCausalLM.from_pretrained(preset, dtype=torch.bfloat16, device=DEVICE,
                                                              optimizations=opt, num_layers=layers)
        plans_seen[label] = {n: d.on for n, d in models[label].plan.decisions.items()}
    rows = []
    for batch in batches:
        prompt = torch.randint(0, vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(batch)
                               ).to(DEVICE)
        runners = {label: generation_runner(model, prompt, steps) for label, model in models.items()}
        first = {}
        for label, run in runners.items():
            t0 = time.perf_counter()
            run()
            first[label] = time.perf_counter() - t0
        prefill: dict[str, list[float]] = {n: [] for n in runners}
        decode: dict[str, list[float]] = {n: [] for n in runners}
        tokens = {}
        for _ in range(reps):
            for label, run in runners.items():
                p, st, toks = run()
                prefill[label].append(p)
                decode[label].append(sorted(st)[len(st) // 2])
                tokens[label] = toks
        same = sum(a == b for a, b in zip(tokens["all (graph_mode)"], tokens["all but graph_mode"]))
        err = graph_vs_eager(models["all but graph_mode"], models["all (graph_mode)"], prompt, steps=8)
        if err > GRAPH_MAX_REL_RMS:
            failures.append(f"{preset} B{batch}: CUDA-graph decode logits differ from eager (rel-RMS {err:.1e})")
        skips = counters["inductor"]["cudagraph_skips"]
        if skips:
            failures.append(f"graph_mode ran without CUDA graphs: inductor skipped them {skips} times")
        base_p, base_d = median_ms(prefill["all off"]), median_ms(decode["all off"])
        for label in runners:
            p, d = median_ms(prefill[label]), median_ms(decode[label])
            graph = f"{same}/{steps + 1} tokens, logits rel-RMS {err:.1e}" if label == "all (graph_mode)" else "-"
            rows.append([f"B{batch}", label, f"{p:.2f}", f"{base_p / p:.2f}x", f"{d:.3f}", f"{base_d / d:.2f}x",
                         f"{first[label]:.1f}", graph])
    return rows


def graph_vs_eager(eager: Qwen3_5MoeForCausalLM, graph: Qwen3_5MoeForCausalLM, prompt: torch.Tensor,
                   steps: int) -> float:
    """Relative RMS error of the graph plan's decode logits against the eager plan's, both fed the eager
    plan's greedy tokens (in bf16 a free-running comparison diverges at the first near-tie)."""
    b, t = prompt.shape
    lens = torch.full((b,), t, dtype=torch.long, device=DEVICE)
    feed, outs = [], {}
    for name, model in (("eager", eager), ("graph", graph)):
        cache = model.new_cache(b, t + steps + 1)
        logits = model.prefill(prompt, lens, cache)
        outs[name] = []
        for i in range(steps):
            if name == "eager":
                feed.append(logits.argmax(-1))
            logits = model.decode_step(feed[i], cache)
            outs[name].append(logits)
    return rel_rms(torch.stack(outs["eager"]), torch.stack(outs["graph"]))


def check_hf_parity(steps: int, failures: list[str]) -> str:
    from transformers import Qwen3_5MoeForCausalLM as HFModel

    from tests.hf_reference import build_hf_model, save_hf_checkpoint

    cfg = PRESETS["tiny"]()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        save_hf_checkpoint(build_hf_model(cfg, seed=0), folder)
        hf = HFModel.from_pretrained(folder, dtype=torch.float32).to(DEVICE).eval()
        ours = Qwen3_5MoeForCausalLM.from_pretrained(str(folder), dtype=torch.float32, device=DEVICE,
                                                     optimizations="all")
    prompt = torch.randint(0, cfg.vocab_size, (1, 200), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with torch.inference_mode():
        hf_tokens = hf.generate(prompt, max_new_tokens=steps, do_sample=False)[0, 200:].tolist()
    our_tokens = generation_runner(ours, prompt, steps - 1)()[2]
    on = [n for n, d in ours.plan.decisions.items() if d.on]
    if hf_tokens != our_tokens:
        n = sum(a == b for a, b in zip(hf_tokens, our_tokens))
        failures.append(f"tiny fp32 vs HF eager on CUDA: {n}/{steps} greedy tokens equal")
        return f"tiny fp32, toggles on {on}: {n}/{steps} greedy tokens equal to HF eager: FAIL"
    return f"tiny fp32, toggles on {on}: all {steps} greedy tokens equal to HF eager"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen3.5-35b-a3b", choices=list(PRESETS))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write every table here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("cuda_check: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    import importlib.metadata as md

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "not installed"

    env = (f"{torch.cuda.get_device_name()} | torch {torch.__version__} (CUDA {torch.version.cuda}) | "
           f"fla-core {version('fla-core')} | triton {version('triton')} | transformers {version('transformers')}")
    print(env, flush=True)
    torch.manual_seed(0)
    failures: list[str] = []
    cfg = load_config(args.preset, args.layers)
    kernel_rows = check_gdr(cfg, args.reps, failures)
    print(table(kernel_rows, ["kernel", "shape", "rel-RMS o / state, or time", "verdict"]), flush=True)
    plans: dict[str, dict[str, bool]] = {}
    model_rows = check_model(args.preset, args.layers, args.prompt, args.steps,
                             [int(b) for b in args.batches.split(",")], args.reps, failures, plans)
    header = ["batch", "plan", "prefill ms", "vs off", "decode ms/step", "vs off", "first run s",
              "graph vs eager (same plan)"]
    print(f"\n{args.preset}, {args.layers} layers, bf16, prompt {args.prompt}, {args.steps} decode steps, "
          f"median of {args.reps} reps")
    print(table(model_rows, header))
    for label, on in plans.items():
        print(f"  {label}: on = {[n for n, v in on.items() if v]}")
    parity = check_hf_parity(16, failures)
    print("\n" + parity)
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "kernels": kernel_rows, "model": model_rows,
                                         "model_header": header, "plans": plans, "hf_parity": parity,
                                         "failures": failures}, indent=1))
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
