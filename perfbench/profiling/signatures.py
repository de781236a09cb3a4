"""What each toggle's on and off implementations look like in a trace, per device.

A signature is a few expectations on the events table: ops matching a pattern must (or must not) appear
inside the annotated modules that the toggle changes, or appear at most/at least so many times per decode
step. CPU traces have only host ops (aten names, inductor's compiled-graph calls); CUDA and NPU expectations
are on device kernels (NPU kernel names as in kernel_details.csv / trace_view.json, npu_ops.md), except CUDA
graph launches, which are host runtime calls.

The data lives here and not next to the toggle registry in model/optimizations.py: it describes profiler
output (perfbench's domain), and model/ must stay free of it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Inductor's compiled graphs, as torch.profiler names them on the host.
COMPILED_GRAPH = r"^## Call CompiledFxGraph|^Torch-Compiled Region"
# ATen ops run eagerly from Python (a compiled graph's own extern calls are aten ops too, so graph mode bounds
# their number per decode step instead of forbidding them).
ATEN_OP = r"^aten::"


@dataclass(frozen=True)
class Expectation:
    """Ops whose name matches `pattern` (regex, case-insensitive) among the events of `modules` (any module when
    empty) and `phase` (any when None), on `side` (None: device when the trace has device rows, else host).

    The count must be >= `at_least` and <= `at_most` where given: over the whole trace, per decode step
    (`per="step"`, mean over the steps of `phase`), or per annotated layer call (`per="layer"`: every
    (rank, layer, module) group on its own). `what` names the ops in a mismatch line: "graph_mode on, but 2470
    eager aten ops per decode step".
    """

    what: str
    pattern: str
    modules: tuple[str, ...] = ()
    phase: str | None = None
    side: str | None = None
    at_least: float | None = None
    at_most: float | None = None
    per: str | None = None  # None | "step" | "layer"


def present(what: str, pattern: str, *modules: str, phase: str | None = None) -> Expectation:
    return Expectation(what, pattern, tuple(modules), phase, at_least=1)


def absent(what: str, pattern: str, *modules: str, phase: str | None = None) -> Expectation:
    return Expectation(what, pattern, tuple(modules), phase, at_most=0)


@dataclass(frozen=True)
class Signature:
    """Expectations that hold when the toggle is on, and when it is off (or inactive: the unfused path)."""

    on: tuple[Expectation, ...]
    off: tuple[Expectation, ...]


_SDPA_CPU = r"scaled_dot_product"
_SOFTMAX = r"softmax"
_ROTATE_HALF = r"^aten::neg$"
_EAGER_RMSNORM = r"^aten::(?:rsqrt|pow)$"
_TRIANGULAR_SOLVE = r"linalg_solve_triangular"
_GROUPED_MM_CPU = r"^aten::_grouped_mm$"
_EXPERT_LOOP_CPU = r"^aten::nonzero$"
# A layer's projections with merged_projections off: q, k, v (+ gate), o in attention; qkv, z, b, a, out in
# GDN; with it on, one merged GEMM replaces each group.
_LINEAR = r"^aten::linear$"

# NPU ops: the kernel names of a device trace, or the npu::npu_* host ops of an emulated one (host only)
_NPU_FIA = r"FusedInferAttentionScore|IncreFlashAttention|PromptFlashAttention|npu_fused_infer_attention_score"
_NPU_SOFTMAX = r"SoftmaxV2|^Softmax"
# the unfused path's softmax: the kernel on hardware, the aten op in an emulated (host-only) trace. Only for the
# off side: an emulated FIA kernel's own softmax runs as nested aten ops, which the on side must not count
_NPU_SOFTMAX_UNFUSED = _NPU_SOFTMAX + r"|^aten::_softmax$"
_NPU_GMM = r"GroupedMatmul|npu_grouped_matmul"
_NPU_RMSNORM = r"RmsNorm|npu_(?:add_)?rms_norm"
_NPU_ROPE = r"RotaryMul|RotaryPositionEmbedding|npu_rotary_mul"
# MC2 dispatch/combine: kernels MoeDistributeDispatchV2 / CombineV2 on hardware, npu::npu_moe_distribute_*_v2 host
# ops under the emulator; matmul + all_reduce in one op: MatmulAllReduce / npu::npu_mm_all_reduce_base
_NPU_MC2 = r"moe_?distribute_?(?:dispatch|combine)"
_NPU_MM_ALL_REDUCE = r"matmul_?all_?reduce|mm_all_reduce"
# EP exchange on CPU: the static dispatch addresses each pair's row from a one-hot of its destination rank;
# Double-Routing counts the pairs per expert (bincount) for the count exchange and its host-side split sizes
_STATIC_DISPATCH_CPU = r"^aten::one_hot$"
_COUNT_EXCHANGE_CPU = r"^aten::bincount$"
_CUDA_FLASH = r"flash|fmha|scaled_dot_product|efficient_attention|cutlass.*attention"
# CUDA kernel names as an H200 trace shows them (tests/fixtures/cuda_traces): inductor names its fused rotary
# kernel after the ops it fuses (triton_poi_fused_..._neg_...), eager rotate_half runs ATen's neg kernel;
# F.rms_norm is ATen's vectorized_layer_norm_kernel in its RMS form; fla's chunked delta rule and ATen's
# grouped GEMM (CUTLASS GroupProblemShape, prepare_grouped_gemm_data) are named for what they do.
_CUDA_INDUCTOR_ROPE = r"^triton_.*neg"
_CUDA_EAGER_NEG = r"neg_kernel"
_CUDA_RMSNORM = r"layer_norm_kernel"
_CUDA_FLA_GDR = r"chunk_gated_delta_rule|chunk_fwd_kernel_o|recompute_w_u_fwd"
_CUDA_GROUPED_GEMM = r"GroupProblemShape|grouped_gemm"
_CUDA_GRAPH_LAUNCH = r"cudaGraphLaunch"

_CHUNK_GDR_CPU = Signature(
    on=(present("chunked (triangular solve) delta rule ops in prefill GDN scopes", _TRIANGULAR_SOLVE, "gdn",
                phase="prefill"),),
    off=(absent("chunked (triangular solve) delta rule ops in prefill GDN scopes", _TRIANGULAR_SOLVE, "gdn",
                phase="prefill"),))

# device -> signature; a plan variant with its own kernels (Plan.gdr_variant) has its own key: CPU without a C++
# compiler ("cpu_eager") runs the same chunked torch ops eagerly, so the triangular solve shows all the same.
SIGNATURES: dict[str, dict[str, Signature]] = {
    "fused_attention": {
        "cpu": Signature(
            on=(present("fused attention ops in attention scopes", _SDPA_CPU, "attn"),
                absent("separate softmax ops in attention scopes", _SOFTMAX, "attn")),
            off=(present("softmax ops in attention scopes", _SOFTMAX, "attn"),
                 absent("fused attention ops in attention scopes", _SDPA_CPU, "attn"))),
        "cuda": Signature(
            on=(present("fused attention kernels in attention scopes", _CUDA_FLASH, "attn"),
                absent("separate softmax kernels in attention scopes", _SOFTMAX, "attn")),
            off=(present("softmax kernels in attention scopes", _SOFTMAX, "attn"),)),
        "npu": Signature(
            on=(present("fused attention kernels in attention scopes", _NPU_FIA, "attn"),
                absent("separate softmax kernels in attention scopes", _NPU_SOFTMAX, "attn")),
            off=(present("softmax kernels in attention scopes", _NPU_SOFTMAX_UNFUSED, "attn"),
                 absent("fused attention kernels in attention scopes", _NPU_FIA, "attn"))),
    },
    "fused_rmsnorm": {
        "cpu": Signature(
            on=(present("compiled RMSNorm graphs in norm scopes", COMPILED_GRAPH, "norm"),
                absent("eager pow/rsqrt ops in norm scopes", _EAGER_RMSNORM, "norm")),
            off=(present("eager pow/rsqrt ops in norm scopes", _EAGER_RMSNORM, "norm"),)),
        "cuda": Signature(
            on=(present("fused RMSNorm kernels in norm scopes", _CUDA_RMSNORM, "norm"),),
            off=(absent("fused RMSNorm kernels in norm scopes", _CUDA_RMSNORM, "norm"),)),
        "npu": Signature(
            on=(present("RmsNorm kernels in norm scopes", _NPU_RMSNORM, "norm"),),
            off=(absent("RmsNorm kernels in norm scopes", _NPU_RMSNORM, "norm"),)),
    },
    "fused_rope": {
        "cpu": Signature(
            on=(absent("rotate_half neg ops in attention scopes", _ROTATE_HALF, "attn"),),
            off=(present("rotate_half neg ops in attention scopes", _ROTATE_HALF, "attn"),)),
        "cuda": Signature(
            on=(present("inductor rotary kernels in attention scopes", _CUDA_INDUCTOR_ROPE, "attn"),
                absent("eager neg kernels in attention scopes", _CUDA_EAGER_NEG, "attn")),
            off=(present("eager neg kernels in attention scopes", _CUDA_EAGER_NEG, "attn"),)),
        "npu": Signature(
            on=(present("rotary kernels in attention scopes", _NPU_ROPE, "attn"),),
            off=(absent("rotary kernels in attention scopes", _NPU_ROPE, "attn"),)),
    },
    "chunk_gdr": {
        "cpu": _CHUNK_GDR_CPU,
        "cpu_eager": _CHUNK_GDR_CPU,
        # the plan's fla variant; without fla (variant "cuda_torch") chunk_gdr runs chunked torch ops whose
        # CUDA kernels no trace has shown yet, so that variant has no signature
        "cuda": Signature(
            on=(present("fla chunked delta-rule kernels in prefill GDN scopes", _CUDA_FLA_GDR, "gdn",
                        phase="prefill"),),
            off=(absent("fla chunked delta-rule kernels in prefill GDN scopes", _CUDA_FLA_GDR, "gdn",
                        phase="prefill"),)),
    },
    "grouped_moe": {
        "cpu": Signature(
            on=(present("grouped-matmul ops in prefill MoE scopes", _GROUPED_MM_CPU, "moe", phase="prefill"),),
            off=(absent("grouped-matmul ops in MoE scopes", _GROUPED_MM_CPU, "moe"),
                 present("per-expert selection (nonzero) ops in MoE scopes", _EXPERT_LOOP_CPU, "moe"))),
        "cuda": Signature(
            on=(present("grouped-GEMM kernels in prefill MoE scopes", _CUDA_GROUPED_GEMM, "moe", phase="prefill"),),
            off=(absent("grouped-GEMM kernels in MoE scopes", _CUDA_GROUPED_GEMM, "moe"),)),
        "npu": Signature(
            on=(present("grouped-matmul kernels in MoE scopes", _NPU_GMM, "moe"),),
            off=(absent("grouped-matmul kernels in MoE scopes", _NPU_GMM, "moe"),)),
    },
    # Both are active only with more than one rank (model/optimizations.py): a single-rank "off" trace has no
    # exchange at all, so "off" can only require the fused path's absence. Phase, not module, bounds them:
    # the NPU ops also show inside a torchair graph, whose traces carry no module scopes.
    "mm_all_reduce": {
        "npu": Signature(
            on=(present("fused matmul+all_reduce ops in prefill", _NPU_MM_ALL_REDUCE, phase="prefill"),),
            off=(absent("fused matmul+all_reduce ops", _NPU_MM_ALL_REDUCE),)),
    },
    "moe_dispatch_combine": {
        "cpu": Signature(
            on=(present("static-shape dispatch (one_hot) ops in decode", _STATIC_DISPATCH_CPU, phase="decode"),
                absent("Double-Routing count (bincount) ops in decode", _COUNT_EXCHANGE_CPU, phase="decode")),
            off=(absent("static-shape dispatch (one_hot) ops", _STATIC_DISPATCH_CPU),)),
        "npu": Signature(
            on=(present("MC2 dispatch/combine ops in decode", _NPU_MC2, phase="decode"),),
            off=(absent("MC2 dispatch/combine ops", _NPU_MC2),)),
    },
    "merged_projections": {
        "cpu": Signature(
            on=(Expectation("linear ops in a prefill attention/GDN layer", _LINEAR, ("attn", "gdn"),
                            "prefill", at_most=3, per="layer"),),
            off=(Expectation("linear ops in a prefill attention/GDN layer", _LINEAR, ("attn", "gdn"),
                             "prefill", at_least=4, per="layer"),)),
        # the same host ops; a CUDA trace has device rows, so the host side is named
        "cuda": Signature(
            on=(Expectation("linear ops in a prefill attention/GDN layer", _LINEAR, ("attn", "gdn"),
                            "prefill", side="host", at_most=3, per="layer"),),
            off=(Expectation("linear ops in a prefill attention/GDN layer", _LINEAR, ("attn", "gdn"),
                             "prefill", side="host", at_least=4, per="layer"),)),
    },
    "graph_mode": {
        "cpu": Signature(
            on=(Expectation("compiled-graph replays", COMPILED_GRAPH, phase="decode", side="host", at_least=1,
                            per="step"),
                Expectation("eager aten ops", ATEN_OP, phase="decode", side="host", at_most=200, per="step")),
            off=(Expectation("eager aten ops", ATEN_OP, phase="decode", side="host", at_least=200,
                             per="step"),)),
        "cuda": Signature(
            on=(Expectation("CUDA graph launches", _CUDA_GRAPH_LAUNCH, phase="decode", side="host", at_least=1,
                            per="step"),),
            off=(Expectation("CUDA graph launches", _CUDA_GRAPH_LAUNCH, phase="decode", side="host", at_most=0,
                             per="step"),)),
    },
}

