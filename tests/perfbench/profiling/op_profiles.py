"""Synthetic profiled iterations for the op-level A/B tests: one layer of each type, a module per branch, as
events tables, with a per-epoch host speed common to both arms and a little noise per op and arm."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pandas as pd

from perfbench.profiling.events import events_from_columns
from perfbench.profiling.op_groups import group_times
from perfbench.results.op_ab_record import OpArm, OpPair

UNFUSED_NORM = {"aten::pow": 40.0, "aten::mean": 30.0, "aten::rsqrt": 20.0, "aten::mul": 30.0}
# (module, op) -> µs, for each layer type
LAYER: dict[tuple[str, str], float] = {
    **{("norm", op): us for op, us in UNFUSED_NORM.items()},
    ("moe", "aten::mm"): 600.0, ("moe", "aten::topk"): 50.0, ("moe", "aten::index_add_"): 100.0,
}
MIXERS = {"full_attention": {("attn", "aten::mm"): 300.0, ("attn", "aten::_scaled_dot_product_flash_attention"):
                             200.0},
          "linear_attention": {("gdn", "aten::mm"): 300.0, ("gdn", "model::chunk_gdr"): 250.0}}
OUTSIDE = {("embed", "aten::embedding"): 30.0, ("lm_head", "aten::mm"): 200.0}
Profile = dict[tuple[str | None, str, str], float]  # (layer_type, module, op) -> µs


def profile(changes: Mapping[tuple[str | None, str, str], float] | None = None,
            fused_norm: bool = False) -> Profile:
    """One iteration's µs per (layer type, module, op); `changes` scales entries (a factor per key),
    `fused_norm` replaces the four RMSNorm ops by one fused op of the same total time."""
    out: Profile = {}
    for layer_type, mixer in MIXERS.items():
        for (module, op), us in {**LAYER, **mixer}.items():
            if fused_norm and module == "norm":
                continue
            out[(layer_type, module, op)] = us
        if fused_norm:
            out[(layer_type, "norm", "model::fused_rmsnorm")] = sum(UNFUSED_NORM.values())
    for (module, op), us in OUTSIDE.items():
        out[(None, module, op)] = us
    for key, factor in (changes or {}).items():
        out[key] *= factor
    return out


def events(prof: Profile, speed: float, rng: random.Random, noise: float = 0.02) -> pd.DataFrame:
    """An events table of one decode iteration: every entry once, host side, timed at `speed` with noise."""
    rows = list(prof.items())
    return events_from_columns({
        "name": [op for (_, _, op), _ in rows], "category": ["compute"] * len(rows),
        "phase": ["decode"] * len(rows), "layer": [0 if lt else None for (lt, _, _), _ in rows],
        "layer_type": [lt for (lt, _, _), _ in rows], "module": [m for (_, m, _), _ in rows],
        "side": ["host"] * len(rows), "start_us": [float(i) for i in range(len(rows))],
        "dur_us": [us * speed * rng.lognormvariate(0.0, noise) for _, us in rows],
        "stream": ["1"] * len(rows)})


def op_pairs(base: Profile, head: Profile, epochs: int = 12, seed: int = 0, run_id: str = "r0") -> list[OpPair]:
    """`epochs` op epochs of one run: each arm's profile, grouped as the worker groups it."""
    rng = random.Random(seed)
    out = []
    for epoch in range(epochs):
        speed = rng.lognormvariate(0.0, 0.05)  # the host's speed this epoch, shared by both arms
        arms = {name: OpArm(groups=group_times(events(prof, speed, rng)), profiled_ms=11.0, plain_ms=10.0)
                for name, prof in (("base", base), ("head", head))}
        out.append(OpPair(run_id=run_id, epoch=epoch, base_first=epoch % 2 == 0, **arms))
    return out
