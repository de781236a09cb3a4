"""Op categories: which part of a Qwen3.5-MoE layer an op or kernel belongs to.

Names come from three worlds: aten ops in CPU traces (`aten::addmm`), CUDA kernel names
(`ampere_bf16_s16816gemm`, `ncclDevKernel_AllReduce`, fla's `chunk_gated_delta_rule_fwd_kernel_h`) and Ascend
op Types / kernel names (`MatMulV3`, `aclnnRmsNorm_RmsNormAiCore_RmsNorm`, `hcom_allReduce__586_0_1`).
"""

from __future__ import annotations

import re
from functools import lru_cache

CATEGORIES = (
    "attention", "gdn", "moe-routing", "moe-experts", "norm", "rope", "matmul", "communication", "other",
)

# NOTE: hcom_* / HCCL are Ascend collectives (profiler_formats.md 3.2); MoeDistributeDispatch/Combine
# and MatmulAllReduce (MC2) fuse a collective into the op, so their time cannot be split and counts as
# communication; kernel_aivec is the LCCL collective kernel (msprof-analyze's rule).
_COMMUNICATION = re.compile(
    r"^(hcom_|hccl|nccl|gloo:|c10d::|mpi:|record_param_comms)|ncclkernel|nccldevkernel|moedistribute(dispatch|combine)"
    r"|moe_distribute_(dispatch|combine)|matmulallreduce|mm_all_reduce|allgathermatmul|matmulreducescatter"
    r"|^kernel_aivec$|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
)
# GDN before attention: fla's chunk kernels contain "scaled_dot"/"attn"-like fragments.
_GDN = re.compile(
    r"gated_?delta|delta_?rule|chunk_fwd_kernel|chunk_scaled_dot_kkt|solve_tril|recompute_w_u|fused_recurrent"
    r"|causal_conv1d|gdn"
)
_ATTENTION = re.compile(
    r"attention|flash|fmha|scaled_dot_product|sdpa|pagedattn|paged_attn|fused_infer_attention")
_NORM = re.compile(r"rms_?norm|layer_?norm|group_?norm|^triton_.*rsqrt")
_ROPE = re.compile(r"rotary|(^|[_:.\s])rope")
_MOE_ROUTING = re.compile(
    r"moe_?gating|moe_?init_?routing|moe_?finalize_?routing|moe_?re_?routing|moe_?token_?(un)?permute"
    r"|moe_align|topk_softmax|count_and_sort_expert|moe_?compute_?expert_?tokens"
)
_MOE_EXPERTS = re.compile(r"grouped_?matmul|grouped_?mm|fused_moe|moe_?mlp|groupgemm|grouped_?gemm")
_MATMUL = re.compile(
    r"matmul|gemm|cutlass|cublas|xmma|wgmma|^aten::(linear|addmm|mm|bmm|baddbmm|addbmm|_scaled_mm|dot|einsum)$"
    r"|^triton_tem_fused_.*mm|^(mm|bmm|addmm)$|^cijk_"
)
# Inside module=attn these are the eager attention core (q@k^T, softmax, @v) and the KV cache write.
_ATTENTION_CORE = re.compile(
    r"^aten::(bmm|baddbmm|softmax|_softmax|_safe_softmax|masked_fill_?|index_copy_?|index_put_?|scatter_?)$"
    r"|softmax|scatter_?nd_?update|scatter_?pa_?kv_?cache|reshape_?and_?cache"
)
# Inside module=moe (no finer annotation) these pick the experts for each token.
_MOE_CORE_ROUTING = re.compile(r"topk|top_k|softmax|sigmoid|argsort|^aten::sort$|^sort|histc|bincount")

_NA = {"", "n/a", "na", "none", "nan"}


def _base_category(text: str) -> str:
    for category, pattern in (
        ("communication", _COMMUNICATION), ("gdn", _GDN), ("attention", _ATTENTION), ("norm", _NORM),
        ("rope", _ROPE), ("moe-routing", _MOE_ROUTING), ("moe-experts", _MOE_EXPERTS), ("matmul", _MATMUL),
    ):
        if pattern.search(text):
            return category
    return "other"


@lru_cache(maxsize=65536)
def categorize(name: str, op_type: str | None = None, module: str | None = None) -> str:
    """The category of one op: one of `CATEGORIES`.

    Args:
        name: op or kernel name (aten op, CUDA kernel, Ascend kernel `Name`).
        op_type: Ascend `Type` (CANN op type) when known; "N/A" (Level0) counts as unknown.
        module: the innermost annotated module (`pb|...|module=...`), if any.

    Precedence, first match wins:
      1. Communication by name or type (hcom_*, HCCL, nccl*, gloo:, c10d::, MoeDistributeDispatch/Combine, MC2
         fused matmul+collective ops). A collective stays communication in every module.
      2. The module refines what the op alone cannot tell:
         - router: everything is moe-routing;
         - experts: routing ops stay moe-routing, everything else (matmuls, swiglu, ...) is moe-experts;
         - moe (the block, when not annotated finer): routing ops and topk/softmax/sigmoid/sort are
           moe-routing, everything else (expert and shared-expert matmuls, activations, gathers) is
           moe-experts; annotate `router` to move the gate matmul to moe-routing;
         - gdn: matmuls (projections) stay matmul, every other op is gdn;
         - attn: ops that rule 3 calls attention/rope/norm keep that; the eager attention core (bmm, softmax,
           masked_fill) and KV-cache writes are attention; plain matmuls (projections) stay matmul;
         - norm (and any module named *norm, e.g. final_norm): everything is norm; rope: everything is rope;
         - other modules (shared_expert, lm_head, embed, ...) add nothing.
      3. The op itself: the Ascend `Type` when known, else the name, checked in this order: gdn, attention,
         norm, rope, moe-routing, moe-experts (GroupedMatmul: grouped GEMMs here only run experts), matmul;
         anything else is other.
    """
    lowered = name.lower()
    op_type_l = op_type.strip().lower() if isinstance(op_type, str) else ""
    if op_type_l in _NA:
        op_type_l = ""
    if _COMMUNICATION.search(lowered) or (op_type_l and _COMMUNICATION.search(op_type_l)):
        return "communication"
    base = _base_category(op_type_l) if op_type_l else "other"
    if base == "other":
        base = _base_category(lowered)
    module = module.lower() if isinstance(module, str) else ""
    if module == "router":
        return "moe-routing"
    if module == "experts":
        return "moe-routing" if base == "moe-routing" else "moe-experts"
    if module == "moe":
        if base == "moe-routing" or _MOE_CORE_ROUTING.search(lowered) or _MOE_CORE_ROUTING.search(op_type_l):
            return "moe-routing"
        return "moe-experts"
    if module == "gdn":
        return "matmul" if base == "matmul" else "gdn"
    if module == "attn":
        if base in ("attention", "rope", "norm"):
            return base
        if _ATTENTION_CORE.search(lowered) or (op_type_l and _ATTENTION_CORE.search(op_type_l)):
            return "attention"
        return base
    if module.endswith("norm"):  # norm, final_norm, q_norm, ...
        return "norm"
    if module == "rope":
        return "rope"
    return base
