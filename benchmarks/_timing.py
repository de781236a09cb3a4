"""Side-by-side timing for benchmarks: alternate the candidates (A B A B ...) in one process, report medians.

Alternating keeps slow drifts of a shared, noisy machine from favouring whichever candidate ran last.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

from model import Qwen3_5MoeForCausalLM
from model.backend import synchronize, timed
from perfbench.analysis import stats


def interleaved(candidates: dict[str, Callable[[], object]], reps: int = 7, warmup: int = 1,
                device: str = "cpu") -> dict[str, list[float]]:
    """Seconds per call of each candidate, `reps` samples each, taken in alternation after `warmup` calls."""
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(reps):
        for name, fn in candidates.items():
            samples[name].append(timed(device, fn)[1])
    return samples


def generation_runner(model: Qwen3_5MoeForCausalLM, prompt: torch.Tensor, steps: int
                      ) -> Callable[[], tuple[float, list[float], list[int]]]:
    """A callable that runs one greedy generation of our model on `prompt` ([B, T] on the model's device) into
    a cache allocated once and reset each call: (prefill seconds, seconds per decode step, row 0's tokens).
    Each interval ends with a device synchronisation (the token read syncs on CPU anyway)."""
    device = model.device.type
    b, t = prompt.shape
    lens = torch.full((b,), t, dtype=torch.long, device=prompt.device)
    cache = model.new_cache(b, t + steps + 1)

    def run() -> tuple[float, list[float], list[int]]:
        cache.reset()
        synchronize(device)
        t0 = time.perf_counter()
        logits = model.prefill(prompt, lens, cache)
        synchronize(device)
        prefill = time.perf_counter() - t0
        tok = logits.argmax(-1)
        tokens, step_s = [int(tok[0])], []
        for _ in range(steps):
            t0 = time.perf_counter()
            logits = model.decode_step(tok, cache)
            tok = logits.argmax(-1)
            synchronize(device)
            step_s.append(time.perf_counter() - t0)
            tokens.append(int(tok[0]))
        return prefill, step_s, tokens
    return run


def median_ms(values: list[float]) -> float:
    return stats.median(values) * 1e3


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(lines)
