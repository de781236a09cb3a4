"""Communication volume and time per decode step for TP and EP layouts on CPU (gloo), and the EP token split.

    python benchmarks/parallel_comm.py                      # world sizes 2 and 4, tiny preset
    python benchmarks/parallel_comm.py --world-sizes 2 --decode-steps 16 --batch 8

For each world size it launches torchrun once; every rank builds each layout (pure TP, pure EP with
Double-Routing, pure EP with moe_dispatch_combine, EP with attention TP), prefills the same batch and times
`decode_step`s. model/ops/comm.record_comm sees every collective: the table gives, per decode step and rank,
the collective calls, payload bytes (what the rank puts in; see CommEvent) and the wall time spent inside
blocking collectives (which includes waiting for the slowest rank: on 2 shared cores that skew dominates).
A counting wrapper around the plan's experts ops gives the routed (token, expert) pairs each rank computes
per decode step; "expert share" is pairs x (local intermediate / intermediate) relative to
world_size 1, so MoE TP (all pairs, 1/tp of each expert) and EP (1/ep of the pairs, whole experts) compare.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from model import Qwen3_5MoeForCausalLM  # noqa: E402
from model.ops import comm  # noqa: E402

EP_FUSED = {"moe_dispatch_combine": True, "merged_projections": True, "grouped_moe": True}
EP_PLAIN = {"merged_projections": True, "grouped_moe": True}


def layouts(world: int) -> dict[str, tuple[dict[str, int], dict[str, bool]]]:
    tp = dict.fromkeys(("attn_tp_size", "moe_tp_size", "embed_tp_size", "lmhead_tp_size", "shared_tp_size"),
                       world)
    ep = {"attn_tp_size": 1, "moe_tp_size": 1, "embed_tp_size": 1, "lmhead_tp_size": 1}
    ep_attn = {"attn_tp_size": world, "moe_tp_size": 1, "embed_tp_size": world, "lmhead_tp_size": world}
    return {
        f"TP{world}": ({"world_size": world, **tp}, EP_PLAIN),
        f"EP{world} double-routing": ({"world_size": world, **ep}, EP_PLAIN),
        f"EP{world} dispatch_combine": ({"world_size": world, **ep}, EP_FUSED),
        f"EP{world}+attnTP{world} dispatch": ({"world_size": world, **ep_attn}, EP_FUSED),
    }


@dataclasses.dataclass
class PairCounter:
    """Routed (token, expert) pairs the experts ops computed, per phase."""

    pairs: dict[str, int] = dataclasses.field(default_factory=lambda: {"prefill": 0, "decode": 0})

    def wrap(self, fn, phase: str):
        def counted(x, topk_ids, *args):
            self.pairs[phase] += topk_ids.numel()
            return fn(x, topk_ids, *args)
        return counted


def count_expert_pairs(model: Qwen3_5MoeForCausalLM) -> PairCounter:
    counter = PairCounter()
    for layer in model.layers:
        ops = layer.mlp.ops
        layer.mlp.ops = dataclasses.replace(ops, experts_prefill=counter.wrap(ops.experts_prefill, "prefill"),
                                            experts_decode=counter.wrap(ops.experts_decode, "decode"))
    return counter


def measure(model_name: str, num_layers: int, parallel: dict[str, int], toggles: dict[str, bool],
            batch: int, prompt_len: int, decode_steps: int) -> dict:
    """One layout on this rank: per decode step, comm events (bytes, seconds) and expert pairs."""
    import torch.distributed as dist

    model = Qwen3_5MoeForCausalLM.from_pretrained(model_name, num_layers=num_layers, dummy_weights=True,
                                                  optimizations=toggles, parallel_config=parallel)
    counter = count_expert_pairs(model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt_len), generator=gen)
    seq_lens = torch.full((batch,), prompt_len)
    cache = model.new_cache(batch, prompt_len + decode_steps + 1)
    tokens = model.prefill(ids, seq_lens, cache).argmax(-1)
    model.decode_step(tokens, cache)  # warm-up step (not recorded)
    counter.pairs["decode"] = 0
    steps = []
    for _ in range(decode_steps):
        if dist.is_initialized():
            dist.barrier()
        with comm.record_comm() as log:
            start = time.perf_counter()
            tokens = model.decode_step(tokens, cache).argmax(-1)
            seconds = time.perf_counter() - start
        steps.append({"seconds": seconds, "comm": {op: list(v) for op, v in log.totals().items()}})
    moe = model.layers[0].mlp
    return {"steps": steps, "decode_pairs_per_step": counter.pairs["decode"] / decode_steps,
            "prefill_pairs": counter.pairs["prefill"],
            "intermediate_fraction": moe.experts.intermediate / model.config.moe_intermediate_size,
            "plan": {n: d.state for n, d in model.plan.decisions.items() if d.requested}}


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    world = int(os.environ["WORLD_SIZE"])
    results = {}
    for name, (parallel, toggles) in layouts(world).items():
        results[name] = measure(args.model, args.num_layers, parallel, toggles, args.batch, args.prompt_len,
                                args.decode_steps)
    (args.out / f"rank{dist.get_rank()}.json").write_text(json.dumps(results))


def launch(world: int, args: argparse.Namespace, out: Path) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world),
           __file__, "--worker", "--out", str(out), "--model", args.model, "--num-layers", str(args.num_layers),
           "--batch", str(args.batch), "--prompt-len", str(args.prompt_len),
           "--decode-steps", str(args.decode_steps)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"torchrun (world_size {world}) failed:\n{proc.stderr[-4000:]}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} MiB"


def summarize(name: str, ranks: list[dict], baseline_pairs: float) -> list[str]:
    """Per-rank means over decode steps; step time is the slowest rank's median."""
    steps = [r[name]["steps"] for r in ranks]
    n_steps = len(steps[0])
    ops = sorted({op for rank in steps for s in rank for op in s["comm"]})
    step_ms = max(statistics.median(s["seconds"] for s in rank) for rank in steps) * 1e3
    per_rank_bytes = [sum(v[1] for s in rank for v in s["comm"].values()) / n_steps for rank in steps]
    per_rank_comm_ms = [sum(v[2] for s in rank for v in s["comm"].values()) / n_steps * 1e3 for rank in steps]
    calls = {op: sum(s["comm"].get(op, [0])[0] for rank in steps for s in rank) / (n_steps * len(steps))
             for op in ops}
    pairs = [r[name]["decode_pairs_per_step"] for r in ranks]
    share = [p * r[name]["intermediate_fraction"] / baseline_pairs for p, r in zip(pairs, ranks)]
    return [
        f"{name:<30} {step_ms:8.2f} {statistics.mean(per_rank_comm_ms):8.2f} "
        f"{fmt_bytes(statistics.mean(per_rank_bytes)):>10}  "
        f"{'/'.join(f'{p:g}' for p in pairs):>14} {max(share):6.2f}  "
        + ", ".join(f"{op} x{c:g}" for op, c in calls.items()),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--decode-steps", type=int, default=8)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from model.parallel import finish

        worker(args)  # the models, tensors and groups it made die with its frame
        finish(0)  # barrier, destroy the group, flush, os._exit: no interpreter shutdown beside gloo's threads
    torch.set_num_threads(1)
    single = measure(args.model, args.num_layers, {"world_size": 1}, EP_PLAIN, args.batch, args.prompt_len,
                     args.decode_steps)
    base_pairs = single["decode_pairs_per_step"]
    base_ms = statistics.median(s["seconds"] for s in single["steps"]) * 1e3
    print(f"model {args.model} ({args.num_layers} layers), batch {args.batch}, prompt {args.prompt_len}, "
          f"{args.decode_steps} timed decode steps, gloo on loopback, 1 thread per rank")
    print("per decode step: step ms (slowest rank, median) | comm ms and payload bytes per rank (mean) | "
          "routed pairs computed per rank | expert share vs world_size 1 (max rank) | collective calls per rank")
    print(f"{'layout':<30} {'step ms':>8} {'comm ms':>8} {'bytes':>10}  {'pairs/rank':>14} {'share':>6}  calls")
    print(f"{'world_size 1':<30} {base_ms:8.2f} {0.0:8.2f} {fmt_bytes(0):>10}  {base_pairs:>14g} {1.0:6.2f}  -")
    for world in args.world_sizes:
        with tempfile.TemporaryDirectory() as tmp:
            ranks = launch(world, args, Path(tmp))
        for name in layouts(world):
            print("\n".join(summarize(name, ranks, base_pairs)))


if __name__ == "__main__":
    main()
