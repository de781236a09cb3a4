"""The toggle registry and the effective plan.

Each toggle declares what it replaces, the phases it affects, the implementation per backend and its
requirements. `resolve_plan` turns requested toggles + capabilities + parallel layout into a `Plan`: every
toggle on, off, or inactive with a short reason. `model.ops.build_ops(plan)` then binds concrete callables;
layers receive those and never look at a toggle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from model.backend import Capabilities
from model.config import Qwen3_5MoeTextConfig
from model.parallel_config import ParallelConfig
from model.toggles import TOGGLE_NAMES, ToggleDecision

log = logging.getLogger(__name__)

# A requirement returns "" when met, else the reason in a short lowercase phrase.
Requirement = Callable[["PlanContext"], str]


@dataclass(frozen=True)
class PlanContext:
    caps: Capabilities
    parallel: ParallelConfig
    model: Qwen3_5MoeTextConfig | None = None
    exe_mode: str = "ge_graph"  # NPU graph flavour when graph_mode is on: ge_graph | npugraph_ex
    requested: Mapping[str, bool] = field(default_factory=dict)
    dtype: str = ""  # the model's dtype ("bfloat16", ...); "" when unknown (then no dtype rule applies)
    # decisions made so far: a requirement that depends on another toggle reads what it became, not what was
    # asked for (graph_mode is decided last)
    decided: Mapping[str, ToggleDecision] = field(default_factory=dict)

    def on(self, name: str) -> bool:
        decision = self.decided.get(name)
        return decision is not None and decision.on


@dataclass(frozen=True)
class ToggleSpec:
    name: str
    replaces: str
    phases: tuple[str, ...]
    impls: Mapping[str, str]  # device -> implementation description ("" = not implemented on that device)
    requires: tuple[Requirement, ...] = ()
    npu_ops: tuple[str, ...] = ()  # torch_npu ops the NPU path calls


def _needs_npu_ops(spec: ToggleSpec, ctx: PlanContext) -> str:
    if ctx.caps.device != "npu" or not spec.npu_ops:
        return ""
    missing = [op for op in spec.npu_ops if not ctx.caps.has_npu_op(op)]
    return f"torch_npu has no {missing[0]}" if missing else ""


def _attn_tp_gt_1(ctx: PlanContext) -> str:
    return "" if ctx.parallel.attn_tp_size > 1 else "needs attn_tp_size > 1"


def _mm_all_reduce_platform(ctx: PlanContext) -> str:
    # torch_npu documents npu_mm_all_reduce_base for Atlas A2 (1, 2, 4 or 8 ranks on an HCCS full mesh); the
    # recipe runs it on Ascend 950; neither covers A3 (docs/npu_rules.md).
    if ctx.caps.device != "npu":
        return f"needs an Atlas A2 or Ascend 950 npu (device is {ctx.caps.device})"
    if ctx.caps.npu_platform not in ("A2", "950"):
        return f"documented for Atlas A2 and used on Ascend 950 only (platform is {ctx.caps.npu_platform})"
    if ctx.parallel.attn_tp_size not in (2, 4, 8):
        return f"needs a TP group of 2, 4 or 8 ranks (attn_tp_size is {ctx.parallel.attn_tp_size})"
    return ""


def _pure_ep(ctx: PlanContext) -> str:
    if ctx.parallel.moe_ep_size <= 1:
        return "needs moe_ep_size > 1"
    return "" if ctx.parallel.moe_tp_size == 1 else "needs moe_tp_size == 1"


def _torchair_for_graph(ctx: PlanContext) -> str:
    if ctx.caps.device == "npu" and ctx.exe_mode == "ge_graph" and not ctx.caps.torchair:
        return "torchair not available"
    return ""


def _static_moe(ctx: PlanContext) -> str:
    # The per-expert loop visits only the experts that were hit: data-dependent shapes and a host sync, which
    # a static decode graph cannot capture (the recipe's graph mode also runs grouped matmul). It is the
    # decision that counts: a requested grouped_moe that went inactive leaves the loop in place.
    return "" if ctx.on("grouped_moe") else "needs grouped_moe on (the expert loop syncs with the host)"


def _fia_in_npu_graph(ctx: PlanContext) -> str:
    # torchair.ops' FIA takes the sequence lengths as tensors but runs only in GE graphs; torch.ops.npu's FIA
    # needs them as host lists, which an npugraph_ex capture cannot take (docs/npu_rules.md).
    if ctx.caps.device == "npu" and ctx.exe_mode == "npugraph_ex" and ctx.on("fused_attention"):
        return "npugraph_ex cannot capture fused attention's host sequence lengths; use exe_mode ge_graph"
    return ""


def _fia_dtype(ctx: PlanContext) -> str:
    # FIA takes fp16/bf16 (and int8) query/key/value only (npu_ops.md 2.4).
    if ctx.caps.device == "npu" and ctx.dtype and ctx.dtype not in ("bfloat16", "float16"):
        return f"npu_fused_infer_attention_score has no {ctx.dtype} (bfloat16 or float16 only)"
    return ""


def _mc2_platform(ctx: PlanContext) -> str:
    # dispatch_v2 / combine_v2 are documented for Atlas A2 and A3 only; on A3 the hidden size must lie in
    # [1024, 8192] (npu_ops.md 2.14).
    if ctx.caps.device != "npu":
        return ""
    if ctx.caps.npu_platform not in ("A2", "A3"):
        return f"MC2 dispatch/combine are documented for Atlas A2 and A3 only (platform is {ctx.caps.npu_platform})"
    hidden = ctx.model.hidden_size if ctx.model is not None else None
    if ctx.caps.npu_platform == "A3" and hidden is not None and not 1024 <= hidden <= 8192:
        return f"MC2 on Atlas A3 needs hidden_size in [1024, 8192] (model has {hidden})"
    return ""


def _static_ep_exchange(ctx: PlanContext) -> str:
    # Double routing syncs split sizes to the host and the static exchange compacts rows by a mask: both have
    # data-dependent shapes that no static decode graph can capture. On NPU the MC2 dispatch/combine ops are the
    # static exchange torchair captures; without them (950, or A3 below its hidden size) EP decode stays eager.
    if ctx.parallel.moe_ep_size <= 1:
        return ""
    if ctx.caps.device != "npu":
        return f"needs moe_ep_size == 1 on {ctx.caps.device} (EP exchanges have data-dependent shapes)"
    if not ctx.on("moe_dispatch_combine"):
        return "needs moe_dispatch_combine on with moe_ep_size > 1 (double routing syncs split sizes to the host)"
    return ""


def _inductor_cpu(ctx: PlanContext) -> str:
    # The CPU kernels of these toggles are generated C++ that inductor compiles at first use.
    if ctx.caps.device == "cpu" and not ctx.caps.inductor:
        return "needs a C++ compiler for inductor's CPU kernels (set CXX or install g++)"
    return ""


def _grouped_mm_dtype(ctx: PlanContext) -> str:
    # torch._grouped_mm's CUDA kernel (experts_cuda) takes bf16 operands only.
    if ctx.caps.device == "cuda" and ctx.dtype and ctx.dtype != "bfloat16":
        return f"grouped matmul on cuda needs bfloat16 (model dtype is {ctx.dtype})"
    return ""


def _chunk_gdr_platform(ctx: PlanContext) -> str:
    # The recipe keeps the torch path on 950 (npu_recipe.md 2.1).
    if ctx.caps.device == "npu" and ctx.caps.npu_platform == "950":
        return "npu_chunk_gated_delta_rule is not used on Ascend 950 (recipe)"
    return ""


def _chunk_gdr_dims(ctx: PlanContext) -> str:
    # The op documents Dk = Dv = 128 and, per rank, Nk <= 64, Nv <= 64 with Nv a multiple of Nk (npu_ops.md 2.6).
    if ctx.caps.device != "npu" or ctx.model is None:
        return ""
    m, tp = ctx.model, max(1, ctx.parallel.attn_tp_size)
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    nk, nv = m.linear_num_key_heads // tp, m.linear_num_value_heads // tp
    if dk != 128 or dv != 128:
        return f"npu_chunk_gated_delta_rule needs Dk = Dv = 128 (model has {dk}, {dv})"
    if nk > 64 or nv > 64 or nv % nk:
        return f"npu_chunk_gated_delta_rule needs Nk, Nv <= 64 per rank with Nv a multiple of Nk (got {nk}, {nv})"
    return ""


TOGGLES: dict[str, ToggleSpec] = {
    spec.name: spec
    for spec in (
        ToggleSpec("fused_rope", "rotate_half rotary on the rotary slice of q and k", ("prefill", "decode"),
                   {"npu": "torch_npu.npu_rotary_mul(rotary_mode='half')",
                    "cuda": "inductor-compiled rotary kernel", "cpu": "inductor-compiled rotary kernel"},
                   requires=(_inductor_cpu,), npu_ops=("npu_rotary_mul",)),
        ToggleSpec("fused_attention", "matmul + mask + softmax + matmul with repeat_kv", ("prefill", "decode"),
                   {"npu": "npu_fused_infer_attention_score", "cuda": "scaled_dot_product_attention (flash)",
                    "cpu": "scaled_dot_product_attention"},
                   requires=(_fia_dtype,), npu_ops=("npu_fused_infer_attention_score",)),
        ToggleSpec("fused_rmsnorm", "fp32 pow/mean/rsqrt/mul RMSNorm and a separate residual add",
                   ("prefill", "decode"),
                   {"npu": "torch_npu.npu_rms_norm / npu_add_rms_norm", "cuda": "F.rms_norm (ATen fused)",
                    "cpu": "inductor-compiled RMSNorm kernels (residual add fused)"},
                   requires=(_inductor_cpu,), npu_ops=("npu_rms_norm", "npu_add_rms_norm")),
        ToggleSpec("chunk_gdr", "token-by-token gated delta rule recurrence in prefill", ("prefill",),
                   {"npu": "torch_npu.npu_chunk_gated_delta_rule", "cuda": "fla chunk_gated_delta_rule",
                    "cpu": "chunked delta rule (WY form, triangular solve)"},
                   requires=(_chunk_gdr_platform, _chunk_gdr_dims), npu_ops=("npu_chunk_gated_delta_rule",)),
        ToggleSpec("mm_all_reduce", "o_proj/out_proj matmul followed by all_reduce", ("prefill",),
                   {"npu": "torch_npu.npu_mm_all_reduce_base", "cuda": "", "cpu": ""},
                   requires=(_attn_tp_gt_1, _mm_all_reduce_platform), npu_ops=("npu_mm_all_reduce_base",)),
        ToggleSpec("moe_dispatch_combine", "double-routing all_to_all (counts exchange, host sync) in EP decode",
                   ("decode",),
                   {"npu": "npu_moe_distribute_dispatch_v2 / combine_v2",
                    "cuda": "static-shape all_to_all dispatch/combine",
                    "cpu": "static-shape all_to_all dispatch/combine"},
                   requires=(_pure_ep, _mc2_platform),
                   npu_ops=("npu_moe_distribute_dispatch_v2", "npu_moe_distribute_combine_v2")),
        ToggleSpec("graph_mode", "eager decode step", ("decode",),
                   {"npu": "torchair (exe_mode)", "cuda": "torch.compile + CUDA graphs",
                    "cpu": "torch.compile (inductor, static shapes)"},
                   requires=(_static_moe, _static_ep_exchange, _torchair_for_graph, _fia_in_npu_graph,
                             _inductor_cpu)),
        ToggleSpec("merged_projections", "separate q/k/v, in_proj_qkv/z/b/a, gate/up, router/shared-gate GEMMs",
                   ("prefill", "decode"),
                   {"npu": "merged GEMMs", "cuda": "merged GEMMs", "cpu": "merged GEMMs"}),
        ToggleSpec("grouped_moe", "python loop over experts", ("prefill", "decode"),
                   {"npu": "npu_moe_init_routing_v2 + npu_grouped_matmul + npu_swiglu + finalize_routing",
                    "cuda": "sorted grouped matmul (prefill) / gathered-weight bmm (decode)",
                    "cpu": "sorted grouped matmul (prefill, eager decode) / fused gather-reduce (graph decode)"},
                   requires=(_grouped_mm_dtype,),
                   npu_ops=("npu_grouped_matmul", "npu_swiglu", "npu_moe_init_routing_v2",
                            "npu_moe_finalize_routing")),
    )
}

if tuple(TOGGLES) != TOGGLE_NAMES:  # model.toggles lists the names for torch-free readers
    raise RuntimeError(f"model.toggles.TOGGLE_NAMES {TOGGLE_NAMES} != the registry's {tuple(TOGGLES)}")


@dataclass(frozen=True)
class Plan:
    device: str
    decisions: dict[str, ToggleDecision]
    exe_mode: str = "ge_graph"
    attention_variant: str = ""  # NPU fused attention flavour picked for this model (see ops/attention.py)
    npu_platform: str = ""  # "A2", "A3" or "950": argument contracts of some NPU ops differ per platform
    # "cuda_torch": chunk_gdr on CUDA without fla, "cpu_eager": on CPU without a C++ compiler; both run the
    # plain-torch chunked kernel
    gdr_variant: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def on(self, name: str) -> bool:
        return self.decisions[name].on

    def key(self) -> tuple[tuple[str, str], ...]:
        """Identity of what actually runs: two requests with the same key measure the same thing."""
        return tuple((n, d.state if d.state == "on" else "off") for n, d in sorted(self.decisions.items()))

    def describe(self) -> str:
        width = max(map(len, self.decisions))
        lines = []
        for d in self.decisions.values():
            detail = d.impl if d.state == "on" else d.reason
            lines.append(f"{d.name:<{width}}  {d.state:<8}  {detail}")
        return "\n".join(lines)


def normalize_request(optimizations: str | Mapping[str, bool] | None) -> dict[str, bool]:
    """"none" | "all" | {toggle: bool} (missing toggles off) -> {toggle: bool} for every toggle."""
    if optimizations is None or optimizations == "none":
        return dict.fromkeys(TOGGLE_NAMES, False)
    if optimizations == "all":
        return dict.fromkeys(TOGGLE_NAMES, True)
    if isinstance(optimizations, str):
        raise ValueError(f"`optimizations` must be 'none', 'all' or a {{toggle: bool}} dict, got {optimizations!r}")
    unknown = sorted(set(optimizations) - set(TOGGLE_NAMES))
    if unknown:
        raise ValueError(f"unknown toggle `{unknown[0]}`; toggles are {', '.join(TOGGLE_NAMES)}")
    for name, value in optimizations.items():
        if not isinstance(value, bool):
            raise ValueError(f"toggle `{name}` must be true or false, got {value!r}")
    return {name: bool(optimizations.get(name, False)) for name in TOGGLE_NAMES}


def decide(spec: ToggleSpec, requested: bool, ctx: PlanContext) -> ToggleDecision:
    impl = spec.impls.get(ctx.caps.device, "")
    if not requested:
        return ToggleDecision(spec.name, False, "off", "not requested", impl)
    if not impl:
        return ToggleDecision(spec.name, True, "inactive", f"not implemented on {ctx.caps.device}", "")
    if ctx.caps.device == "npu" and not ctx.caps.torch_npu:
        return ToggleDecision(spec.name, True, "inactive", "torch_npu not available", "")
    for check in (*spec.requires, lambda c: _needs_npu_ops(spec, c)):
        reason = check(ctx)
        if reason:
            return ToggleDecision(spec.name, True, "inactive", reason, "")
    if spec.name == "graph_mode" and ctx.caps.device == "npu":
        impl = f"torchair {ctx.exe_mode}"
    return ToggleDecision(spec.name, True, "on", "", impl)


def npu_attention_variant(model: Qwen3_5MoeTextConfig | None, dtype: str = "") -> str:
    """FIA v2 TND + paged KV where the op documents the head dim and dtype, else FIA v1 BSH with a contiguous
    cache.

    NOTE: torch_npu 2.14.0 documents TND for Q_D = K_D = V_D = 128, or Q_D = K_D = 192, in bfloat16 only
    (npu_ops.md 1.3); Qwen3.5's head_dim 256 needs the BSH path the current recipe uses.
    """
    if model is not None and model.head_dim not in (128, 192):
        return f"fia_v1_bsh (head_dim {model.head_dim} rules TND out)"
    if dtype and dtype != "bfloat16":
        return f"fia_v1_bsh (TND is bfloat16 only; model is {dtype})"
    return "fia_v2_tnd_paged"


def resolve_plan(
    optimizations: str | Mapping[str, bool] | None,
    caps: Capabilities,
    parallel: ParallelConfig | None = None,
    model: Qwen3_5MoeTextConfig | None = None,
    exe_mode: str = "ge_graph",
    dtype: str = "",
) -> Plan:
    """`dtype` is the model dtype's name ("bfloat16"); NPU dtype rules apply only when it is given."""
    if exe_mode not in ("ge_graph", "npugraph_ex", "eager"):
        raise ValueError(f"`exe_mode` must be eager, ge_graph or npugraph_ex, got {exe_mode!r}")
    requested = normalize_request(optimizations)
    decided: dict[str, ToggleDecision] = {}
    ctx = PlanContext(caps=caps, parallel=parallel or ParallelConfig(), model=model,
                      exe_mode=exe_mode if exe_mode != "eager" else "ge_graph", requested=requested, dtype=dtype,
                      decided=decided)
    # graph_mode last: whether the decode step can be captured depends on what the other toggles became
    for name in sorted(TOGGLE_NAMES, key=lambda n: n == "graph_mode"):
        decided[name] = decide(TOGGLES[name], requested[name], ctx)
    decisions = {name: decided[name] for name in TOGGLE_NAMES}
    variant = ""
    if caps.device == "npu" and decisions["fused_attention"].on:
        variant = npu_attention_variant(model, dtype)
        decisions["fused_attention"] = ToggleDecision(
            "fused_attention", True, "on", "", f"{decisions['fused_attention'].impl} [{variant}]")
    gdr_variant = ""
    if caps.device == "cuda" and decisions["chunk_gdr"].on and not caps.fla:
        gdr_variant = "cuda_torch"
        decisions["chunk_gdr"] = ToggleDecision("chunk_gdr", True, "on", "",
                                                "chunked delta rule, plain torch (fla not installed)")
    if caps.device == "cpu" and decisions["chunk_gdr"].on and not caps.inductor:
        gdr_variant = "cpu_eager"
        decisions["chunk_gdr"] = ToggleDecision("chunk_gdr", True, "on", "",
                                                "chunked delta rule, eager (no C++ compiler for inductor)")
    plan = Plan(device=caps.device, decisions=decisions, exe_mode=ctx.exe_mode, attention_variant=variant,
                npu_platform=caps.npu_platform, gdr_variant=gdr_variant)
    for d in decisions.values():
        if d.requested:
            log.info("toggle %s: %s%s", d.name, d.state, f" ({d.reason})" if d.reason else f" [{d.impl}]")
    return plan
