from __future__ import annotations

import pytest

from perfbench.profiling.categories import CATEGORIES, categorize


@pytest.mark.parametrize("name, op_type, expected", [
    # aten ops (CPU traces)
    ("aten::mm", None, "matmul"),
    ("aten::addmm", None, "matmul"),
    ("aten::bmm", None, "matmul"),
    ("aten::linear", None, "matmul"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", None, "attention"),
    ("aten::scaled_dot_product_attention", None, "attention"),
    ("aten::rms_norm", None, "norm"),
    ("aten::topk", None, "other"),
    ("aten::add", None, "other"),
    ("gloo:all_reduce", None, "communication"),
    ("c10d::allreduce_", None, "communication"),
    # CUDA / ROCm kernels
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", None, "communication"),
    ("flash_fwd_splitkv_kernel", None, "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", None, "attention"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", None, "matmul"),
    ("cutlass_80_tensorop_s1688gemm", None, "matmul"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32", None, "matmul"),
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", None, "gdn"),
    ("fused_recurrent_gated_delta_rule_fwd_kernel", None, "gdn"),
    ("chunk_scaled_dot_kkt_fwd_kernel", None, "gdn"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", None, "norm"),
    ("fused_moe_kernel", None, "moe-experts"),
    ("moe_align_block_size_kernel", None, "moe-routing"),
    ("topk_softmax_kernel", None, "moe-routing"),
    ("void at::native::vectorized_elementwise_kernel<4, FillFunctor>", None, "other"),
    # Ascend op types and kernel names
    ("aclnnFusedInferAttentionScoreV3_FusedInferAttentionScore", "FusedInferAttentionScore", "attention"),
    ("aclnnFlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", "attention"),
    ("aclnnChunkGatedDeltaRule_ChunkGatedDeltaRule", "ChunkGatedDeltaRule", "gdn"),
    ("aclnnRecurrentGatedDeltaRule_RecurrentGatedDeltaRule", "RecurrentGatedDeltaRule", "gdn"),
    ("aclnnRmsNorm_RmsNormAiCore_RmsNorm", "RmsNorm", "norm"),
    ("aclnnAddRmsNorm_AddRmsNorm", "AddRmsNorm", "norm"),
    ("aclnnRotaryPositionEmbedding_RotaryPositionEmbedding", "RotaryPositionEmbedding", "rope"),
    ("RotaryMul", "RotaryMul", "rope"),
    ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "matmul"),
    ("aclnnGroupedMatmulV4_GroupedMatmul", "GroupedMatmul", "moe-experts"),
    ("aclnnMoeGatingTopKSoftmax_MoeGatingTopKSoftmax", "MoeGatingTopKSoftmax", "moe-routing"),
    ("aclnnMoeInitRoutingV2_MoeInitRoutingV2", "MoeInitRoutingV2", "moe-routing"),
    ("aclnnMoeFinalizeRoutingV2_MoeFinalizeRoutingV2", "MoeFinalizeRoutingV2", "moe-routing"),
    ("aclnnMoeReRouting_MoeReRouting", "MoeReRouting", "moe-routing"),
    ("aclnnMoeDistributeDispatchV2_MoeDistributeDispatchV2", "MoeDistributeDispatchV2", "communication"),
    ("aclnnMoeDistributeCombineV2_MoeDistributeCombineV2", "MoeDistributeCombineV2", "communication"),
    ("hcom_allReduce__586_0_1", "hcom_allReduce_", "communication"),
    ("HcclAllreduce", None, "communication"),
    ("aclnnMatmulAllReduce_MatmulAllReduce", "MatmulAllReduce", "communication"),
    # Level0: Type N/A, the name decides
    ("aclnnRmsNorm_RmsNormAiCore_RmsNorm", "N/A", "norm"),
    ("trans_TransData_0", "N/A", "other"),
    ("aten::dropout", None, "other"),  # "rope" inside a word is not rope
])
def test_categorize_without_module(name, op_type, expected):
    assert categorize(name, op_type) == expected


@pytest.mark.parametrize("name, op_type, module, expected", [
    ("aten::mm", None, "experts", "moe-experts"),
    ("aten::silu", None, "experts", "moe-experts"),
    ("aclnnGroupedMatmul", "GroupedMatmul", "experts", "moe-experts"),
    ("aclnnMoeInitRoutingV2", "MoeInitRoutingV2", "experts", "moe-routing"),
    ("aten::mm", None, "router", "moe-routing"),
    ("aten::add", None, "router", "moe-routing"),
    ("aten::topk", None, "moe", "moe-routing"),
    ("aten::softmax", None, "moe", "moe-routing"),
    ("aten::mm", None, "moe", "moe-experts"),
    ("aten::index_add_", None, "moe", "moe-experts"),
    ("aclnnMoeInitRoutingV2", "MoeInitRoutingV2", "moe", "moe-routing"),
    ("aten::sigmoid", None, "gdn", "gdn"),
    ("aten::conv1d", None, "gdn", "gdn"),
    ("aten::mm", None, "gdn", "matmul"),
    ("aten::rms_norm", None, "gdn", "gdn"),  # GDN's gated norm is part of the GDN block
    ("aten::bmm", None, "attn", "attention"),
    ("aten::_softmax", None, "attn", "attention"),
    ("aten::index_copy_", None, "attn", "attention"),
    ("aten::addmm", None, "attn", "matmul"),
    ("aten::rms_norm", None, "attn", "norm"),
    ("aclnnRotaryPositionEmbedding", "RotaryPositionEmbedding", "attn", "rope"),
    ("aten::cat", None, "attn", "other"),
    ("aten::pow", None, "norm", "norm"),
    ("aten::mean", None, "final_norm", "norm"),
    ("aten::mul", None, "rope", "rope"),
    ("aten::mm", None, "lm_head", "matmul"),
    ("aten::embedding", None, "embed", "other"),
    # a collective stays communication whatever the module
    ("hcom_allReduce__1_0_1", None, "experts", "communication"),
    ("gloo:all_reduce", None, "router", "communication"),
    ("aclnnMoeDistributeDispatchV2", None, "moe", "communication"),
])
def test_module_refines_the_category(name, op_type, module, expected):
    assert categorize(name, op_type, module) == expected


def test_every_result_is_a_known_category():
    names = ["aten::mm", "x", "", "hcom_x", "flash", "aten::topk"]
    modules = [None, "attn", "gdn", "moe", "router", "experts", "shared_expert", "norm", "lm_head", "embed"]
    assert {categorize(n, None, m) for n in names for m in modules} <= set(CATEGORIES)
