"""Each toggle on vs off, side by side in one process (alternating, median of >= 5), on the tiny preset.

    python benchmarks/toggles.py [--reps 7] [--skip-graph]

Op-level rows time the op family the toggle swaps (same inputs, reference vs this device's fast path);
model-level rows time prefill (TTFT) or one decode step of the whole model with only that toggle flipped on
top of a base plan. Targets from the issue are checked and a toggle that is slower is reported as such.
"""

from __future__ import annotations

import argparse

import torch
from _timing import interleaved, median_ms, table

from model import Qwen3_5MoeForCausalLM
from model.config import Qwen3_5MoeTextConfig
from model.layers.gated_deltanet import l2_normalize
from model.ops import attention, gdn, norm, rope
from model.optimizations import TOGGLE_NAMES

CPU_TOGGLES = ("fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "merged_projections",
               "grouped_moe", "graph_mode")


def op_rows(reps: int) -> list[list[str]]:
    cfg = Qwen3_5MoeTextConfig.tiny()
    g = torch.Generator().manual_seed(0)
    rows = []

    def add(name: str, measure: str, ref, fast, target: float | None) -> None:
        s = interleaved({"off": ref, "on": fast}, reps=reps)
        off, on = median_ms(s["off"]), median_ms(s["on"])
        speedup = off / on
        verdict = ("faster" if speedup > 1 else "SLOWER") if target is None else \
            ("meets" if speedup >= target else "MISSES") + f" >= {target:g}x"
        rows.append([name, measure, f"{off:.3f}", f"{on:.3f}", f"{speedup:.2f}x", verdict])

    # chunk_gdr: 2048-token prefill of one GDN layer's core, tiny shapes
    t = 2048
    hk, hv, dk, dv = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, \
        cfg.linear_value_head_dim
    q = l2_normalize(torch.randn(1, t, hk, dk, generator=g))
    k = l2_normalize(torch.randn(1, t, hk, dk, generator=g))
    v = torch.randn(1, t, hv, dv, generator=g)
    gg = -torch.rand(1, t, hv, generator=g) * 0.5
    beta = torch.rand(1, t, hv, generator=g)
    lens = torch.tensor([t])
    add("chunk_gdr", f"op: gated delta rule prefill T={t}",
        lambda: gdn.GDR_PREFILL["ref"](q, k, v, gg, beta, dk ** -0.5, None, lens),
        lambda: gdn.GDR_PREFILL["cpu"](q, k, v, gg, beta, dk ** -0.5, None, lens), 10.0)

    # fused_attention: causal prefill attention at 2048 tokens
    nq, nkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    aq = torch.randn(1, t, nq, d, generator=g)
    ak = torch.randn(1, t, nkv, d, generator=g)
    av = torch.randn(1, t, nkv, d, generator=g)
    add("fused_attention", f"op: prefill attention T={t}",
        lambda: attention.ATTENTION_PREFILL["ref"](aq, ak, av, lens, d ** -0.5),
        lambda: attention.ATTENTION_PREFILL["cpu"](aq, ak, av, lens, d ** -0.5), 1.0)

    # fused_rmsnorm: op level, a prefill-sized and a decode-sized input
    gamma = 1 + 0.1 * torch.randn(cfg.hidden_size, generator=g)
    for rows_n in (2048, 1):
        x = torch.randn(rows_n, cfg.hidden_size, generator=g)
        r = torch.randn(rows_n, cfg.hidden_size, generator=g)
        add("fused_rmsnorm", f"op: rms_norm [{rows_n}, {cfg.hidden_size}]",
            lambda x=x: norm.RMS_NORM["ref"](x, gamma, 1e-6), lambda x=x: norm.RMS_NORM["cpu"](x, gamma, 1e-6),
            1.0 if rows_n > 1 else None)
        add("fused_rmsnorm", f"op: add_rms_norm [{rows_n}, {cfg.hidden_size}]",
            lambda x=x, r=r: norm.ADD_RMS_NORM["ref"](x, r, gamma, 1e-6),
            lambda x=x, r=r: norm.ADD_RMS_NORM["cpu"](x, r, gamma, 1e-6), None)

    # fused_rope: q and k of one attention layer, prefill and decode
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.rotary_dim, 2).float() / cfg.rotary_dim))
    for tt in (2048, 1):
        cos, sin = rope.rotary_cos_sin(torch.arange(tt)[None], inv, torch.float32)
        rq = torch.randn(1, tt, nq, d, generator=g)
        rk = torch.randn(1, tt, nkv, d, generator=g)
        add("fused_rope", f"op: apply_rope T={tt}",
            lambda rq=rq, rk=rk, c=cos, s=sin: rope.APPLY_ROPE["ref"](rq, rk, c, s),
            lambda rq=rq, rk=rk, c=cos, s=sin: rope.APPLY_ROPE["cpu"](rq, rk, c, s), None)
    return rows


def model_calls(toggles: dict[str, bool], prompt: torch.Tensor, lens: torch.Tensor):
    """(prefill, decode one step) closures over a fresh tiny model with these toggles."""
    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", optimizations=toggles)
    cache = model.new_cache(1, prompt.shape[1] + 64)
    token = torch.zeros(1, dtype=torch.long)

    def prefill() -> None:
        cache.reset()
        model.prefill(prompt, lens, cache)

    def decode() -> None:
        model.decode_step(token, cache)
    return prefill, decode


def model_rows(reps: int, skip_graph: bool) -> list[list[str]]:
    """Whole-model TTFT (512-token prompt) and decode step, one toggle flipped on top of the base plan."""
    rows = []
    prompt = torch.randint(0, 4096, (1, 512), generator=torch.Generator().manual_seed(1))
    lens = torch.tensor([512])
    best = {name: name in CPU_TOGGLES for name in TOGGLE_NAMES}
    for toggle in CPU_TOGGLES:
        if toggle == "graph_mode" and skip_graph:
            continue
        # graph_mode is measured on top of the best eager plan; the others on top of all-off
        base = {**best, "graph_mode": False} if toggle == "graph_mode" else dict.fromkeys(TOGGLE_NAMES, False)
        calls = {state: model_calls({**base, toggle: state == "on"}, prompt, lens) for state in ("off", "on")}
        for prefill, decode in calls.values():
            prefill()
            decode()  # the first decode call compiles under graph_mode
        ttft = interleaved({s: c[0] for s, c in calls.items()}, reps=reps)
        steps = interleaved({s: c[1] for s, c in calls.items()}, reps=max(reps, 20))
        for label, samples in (("model: TTFT 512 tokens", ttft), ("model: decode step (B=1, ~520 cached)", steps)):
            off, on = median_ms(samples["off"]), median_ms(samples["on"])
            target = 2.5 if toggle == "graph_mode" and label.startswith("model: decode") else None
            speedup = off / on
            verdict = ("faster" if speedup > 1 else "SLOWER") if target is None else \
                ("meets" if speedup >= target else "MISSES") + f" >= {target:g}x"
            rows.append([toggle, label, f"{off:.3f}", f"{on:.3f}", f"{speedup:.2f}x", verdict])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--skip-graph", action="store_true", help="skip graph_mode (its compile takes ~1 min)")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    rows = op_rows(args.reps) + model_rows(args.reps, args.skip_graph)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, tiny preset, fp32, median of "
          f">= {args.reps} alternating samples")
    print(table(rows, ["toggle", "measurement", "off ms", "on ms", "speedup", "verdict"]))


if __name__ == "__main__":
    main()
