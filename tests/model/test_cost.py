"""model/cost.py against counts worked out by hand for a config small enough to do on paper.

The config: hidden H=8, 2 layers (GDN, then full attention), 2 query heads of D=4, 1 KV head, rotary dim 2,
GDN 2 key / 2 value heads of 2, conv 4 taps, 4 experts top-2 of intermediate 2, shared expert 4, vocab 16.
Workload: 2 prompts of 3 tokens (prefill N = 6 rows), 5 output tokens (decode N = 2 rows, mean KV length
3 + 5/2 = 5.5), bf16 (e = 2 bytes).
"""

from __future__ import annotations

import pytest

from model.config import Qwen3_5MoeTextConfig
from model.cost import CostToggles, CostWorkload, OpCost, expected_distinct_experts, model_cost
from model.parallel_config import ParallelConfig


def micro() -> Qwen3_5MoeTextConfig:
    return Qwen3_5MoeTextConfig(
        vocab_size=16, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        head_dim=4, partial_rotary_factor=0.5, mrope_section=[1, 0, 0], linear_conv_kernel_dim=4,
        linear_key_head_dim=2, linear_value_head_dim=2, linear_num_key_heads=2, linear_num_value_heads=2,
        moe_intermediate_size=2, shared_expert_intermediate_size=4, num_experts_per_tok=2, num_experts=4,
        full_attention_interval=2)


WORKLOAD = CostWorkload.uniform(batch=2, prompt_len=3, output_len=5, dtype_bytes=2)


def op(ops: tuple[OpCost, ...], name: str, layer_type: str | None = None) -> OpCost:
    found = [o for o in ops if o.op == name and (layer_type is None or o.layer_type == layer_type)]
    if layer_type is None and len(found) > 1:  # MoE and norms run in both layers: take the attention layer's
        found = [o for o in found if o.layer_type == "full_attention"]
    assert len(found) == 1, f"{name}: {len(found)} ops"
    return found[0]


def cost(parallel: ParallelConfig | None = None, **toggles: bool):
    return model_cost(micro(), parallel or ParallelConfig(), WORKLOAD, CostToggles(**toggles))


def test_layer_pattern_of_the_micro_config() -> None:
    assert micro().layer_types == ["linear_attention", "full_attention"]


# ---- world size 1 ------------------------------------------------------------------------------------
def test_attention_projections_separate_and_merged() -> None:
    # q 2 heads x 2D = 16 rows, k 4, v 4 -> 24 output features
    separate = op(cost().prefill.ops, "q/k/v proj")
    assert separate.flops == 2 * 6 * 8 * 24 == 2304
    assert separate.weight_bytes == 8 * 24 * 2 == 384
    # three GEMMs each read the [6, 8] input; outputs [6, 24]
    assert separate.act_bytes == (3 * 6 * 8 + 6 * 24) * 2 == 576
    assert separate.launches == 3
    merged = op(cost(merged_projections=True).prefill.ops, "q/k/v proj")
    assert merged.flops == 2304 and merged.weight_bytes == 384
    assert merged.act_bytes == (6 * 8 + 6 * 24) * 2 == 384
    assert merged.launches == 1


def test_attention_core_prefill_is_causal_per_prompt() -> None:
    core = op(cost().prefill.ops, "attention core")
    # each prompt of 3: 1 + 2 + 3 = 6 query-key pairs; 2 prompts: 12; q.k and p.v, 2 FLOPs per MAC, 2 heads x 4
    assert core.flops == 2 * 2 * 2 * 4 * 12 == 384
    # read q (6 x 8), k (6 x 4), v (6 x 4), write out (6 x 8)
    assert core.act_bytes == (48 + 24 + 24 + 48) * 2 == 288


def test_attention_decode_reads_the_kv_cache() -> None:
    core = op(cost().decode.ops, "attention core")
    kv = 5.5 + 5.5  # both sequences at the mean decode KV length
    assert core.flops == 2 * 2 * 2 * 4 * kv == 352
    assert core.state_bytes == 2 * 1 * 4 * kv * 2 == 176  # K and V, 1 head of 4, bf16
    write = op(cost().decode.ops, "kv cache write")
    assert write.state_bytes == 2 * 2 * 1 * 4 * 2 == 32  # 2 new tokens, K and V


def test_rope_and_qk_norm() -> None:
    ops = cost().prefill.ops
    rope = op(ops, "rope")
    # 6 tokens x (2 q + 1 k heads) x rotary dim 2 = 36 elements, 3 FLOPs each
    assert rope.flops == 3 * 36 == 108
    assert rope.act_bytes == (2 * 36 + 2 * 6 * 2) * 2 == 192  # read+write the slice, read cos and sin
    norm = op(ops, "q/k norm")
    assert norm.flops == 4 * 6 * 3 * 4 == 288


def test_gdn_recurrence_decode_and_prefill() -> None:
    # state per sequence: 2 value heads x 2 x 2 fp32 = 32 bytes; batch 2 -> 64
    step = op(cost().decode.ops, "gated delta rule (recurrent step)")
    assert step.flops == 7 * 2 * 2 * 2 * 2 == 112
    assert step.state_bytes == 2 * 64 == 128
    token = op(cost().prefill.ops, "gated delta rule (token recurrence)")
    assert token.flops == 7 * 6 * 2 * 2 * 2 == 336
    assert token.state_bytes == 3 * 2 * 64 == 384  # state read and written at each of the 3 positions
    chunked = op(cost(chunk_gdr=True).prefill.ops, "gated delta rule (chunked)")
    # 6 real tokens x 2 heads x (6 * 2 * 2 + 2 * 64 * (2 + 2)); one chunk per prompt of 3
    assert chunked.flops == 6 * 2 * (24 + 512) == 6432
    assert chunked.state_bytes == 2 * 2 * 2 * 2 * 4 * 2 == 128


def test_gdn_conv_state() -> None:
    conv_channels = 2 * 2 + 2 * 2 + 2 * 2  # [Q | K | V] = 12
    assert conv_channels == 12
    prefill = op(cost().prefill.ops, "causal conv1d + silu")
    assert prefill.flops == 2 * 4 * 6 * 12 + 6 * 12 == 648
    assert prefill.state_bytes == 2 * 12 * 3 * 2 == 144  # writes the last 3 inputs of each prompt
    decode = op(cost().decode.ops, "causal conv1d + silu")
    assert decode.state_bytes == 2 * 144  # reads the window and writes it shifted


def test_routed_experts_read_the_experts_that_are_hit() -> None:
    # 6 tokens drawing 2 of 4 experts: each expert missed with probability (1 - 2/4)^6
    assert expected_distinct_experts(4, 2, 6) == pytest.approx(4 * (1 - 0.5**6))
    prefill = op(cost().prefill.ops, "routed experts")
    assert prefill.flops == 6 * 12 * 8 * 2 == 1152  # 12 pairs, gate+up (2 x 2HI) and down (2HI)
    assert prefill.weight_bytes == pytest.approx(3.9375 * 3 * 8 * 2 * 2)  # 378
    assert prefill.act_bytes == 12 * (8 + 4 + 2 + 8) * 2 == 528
    decode = op(cost().decode.ops, "routed experts")
    assert decode.weight_bytes == pytest.approx(4 * (1 - 0.5**2) * 96) == 288  # 3 experts expected


def test_grouped_moe_changes_launches_not_bytes() -> None:
    loop = op(cost().decode.ops, "routed experts")
    grouped = op(cost(grouped_moe=True).decode.ops, "routed experts")
    assert grouped.weight_bytes == loop.weight_bytes
    assert grouped.launches == 3 + 2  # gate, up, down grouped GEMMs + init/finalize routing
    assert loop.launches == 3 * (3 + 3) + 1  # per hit expert: 3 GEMMs, gather, act, index_add; + unique


def test_gathered_decode_experts_read_one_expert_per_pair() -> None:
    # decode: 2 tokens x top-2 = 4 (token, k) pairs; one expert slab is 3 x 8 x 2 x 2 bytes = 96
    npu = op(model_cost(micro(), ParallelConfig(), WORKLOAD, CostToggles(grouped_moe=True), "npu").decode.ops,
             "routed experts")
    assert npu.weight_bytes == pytest.approx(3 * 96)  # grouped matmul: the 3 expected distinct experts
    cuda = op(model_cost(micro(), ParallelConfig(), WORKLOAD, CostToggles(grouped_moe=True), "cuda").decode.ops,
              "routed experts")
    assert cuda.weight_bytes == 4 * 96
    assert cuda.act_bytes == 4 * (8 + 4 + 2 + 8) * 2 + 2 * 4 * 96  # + the gathered copy written and read
    cpu_graph = op(model_cost(micro(), ParallelConfig(), WORKLOAD, CostToggles(grouped_moe=True, graph_mode=True),
                              "cpu").decode.ops, "routed experts")
    assert cpu_graph.weight_bytes == 4 * 96 and cpu_graph.act_bytes == 4 * 22 * 2  # read in place, no copy
    cpu_eager = op(model_cost(micro(), ParallelConfig(), WORKLOAD, CostToggles(grouped_moe=True), "cpu").decode.ops,
                   "routed experts")
    assert cpu_eager.weight_bytes == pytest.approx(3 * 96)  # sorted grouped matmul
    prefill = op(model_cost(micro(), ParallelConfig(), WORKLOAD, CostToggles(grouped_moe=True), "cuda").prefill.ops,
                 "routed experts")
    assert prefill.weight_bytes == pytest.approx(3.9375 * 96)


def test_add_rms_norm_fused_and_unfused() -> None:
    ops = cost().prefill.ops
    unfused = op(ops, "post-attention norm", "full_attention")
    assert unfused.flops == 4 * 48 + 48 == 240
    assert unfused.act_bytes == (3 * 48 + 2 * 48) * 2 == 480
    fused = op(cost(fused_rmsnorm=True).prefill.ops, "post-attention norm", "full_attention")
    assert fused.act_bytes == 4 * 48 * 2 == 384
    first = op(ops, "input norm", "linear_attention")  # layer 0 has no residual to add
    assert first.act_bytes == 2 * 48 * 2 and first.flops == 4 * 48


def test_lm_head_and_embedding() -> None:
    ops = cost().prefill.ops
    head = op(ops, "lm_head")  # only the last token of each prompt
    assert head.flops == 2 * 2 * 8 * 16 == 512
    assert head.weight_bytes == 8 * 16 * 2 == 256
    embed = op(ops, "embedding")
    assert embed.weight_bytes == 6 * 8 * 2 == 96  # one row per token


def test_no_collectives_at_world_size_1() -> None:
    for phase in (cost().prefill, cost().decode):
        assert phase.total("comm_bytes") == 0


# ---- tensor parallel: attn_tp = moe_tp = embed_tp = lmhead_tp = 2 --------------------------------------
TP2 = ParallelConfig(world_size=2, attn_tp_size=2, moe_tp_size=2, embed_tp_size=2, lmhead_tp_size=2)


def test_tp_projections_and_all_reduce() -> None:
    ops = cost(TP2).prefill.ops
    qkv = op(ops, "q/k/v proj")  # 1 query head (8 rows), the 1 KV head replicated (4 + 4)
    assert qkv.flops == 2 * 6 * 8 * 16 == 1536
    o_proj = op(ops, "o_proj")
    assert o_proj.flops == 2 * 6 * 4 * 8 == 384
    reduce = op(ops, "o_proj all_reduce")
    assert reduce.comm == {"all_reduce": 6 * 8 * 2}  # [6, 8] bf16 = 96 bytes
    assert reduce.wire == {"all_reduce": 2 * (2 - 1) / 2 * 96}
    moe = op(ops, "moe all_reduce")
    assert moe.comm == {"all_reduce": 96}
    assert op(ops, "embedding all_reduce").comm == {"all_reduce": 96}


def test_tp_experts_and_lm_head() -> None:
    ops = cost(TP2).prefill.ops
    experts = op(ops, "routed experts")  # every expert with intermediate 2 / 2 = 1
    assert experts.flops == 6 * 12 * 8 * 1 == 576
    assert experts.weight_bytes == pytest.approx(3.9375 * 3 * 8 * 1 * 2)
    head = op(ops, "lm_head")  # 8 of 16 vocabulary rows
    assert head.flops == 2 * 2 * 8 * 8 == 256
    gather = op(ops, "lm_head all_gather")
    assert gather.comm == {"all_gather": 2 * 8 * 2} and gather.wire == {"all_gather": 32}


def test_mm_all_reduce_fuses_and_overlaps_in_prefill_only() -> None:
    prefill = cost(TP2, mm_all_reduce=True).prefill.ops
    o_proj = op(prefill, "o_proj")
    assert o_proj.overlap and o_proj.comm == {"all_reduce": 96}
    assert not [o for o in prefill if o.op == "o_proj all_reduce"]
    decode = cost(TP2, mm_all_reduce=True).decode.ops
    assert op(decode, "o_proj all_reduce").comm == {"all_reduce": 2 * 8 * 2}


# ---- expert parallel: moe_ep = 2 ----------------------------------------------------------------------
EP2 = ParallelConfig(world_size=2, attn_tp_size=1, moe_tp_size=1)


def test_ep_experts_split_pairs_and_experts() -> None:
    ops = cost(EP2).prefill.ops
    experts = op(ops, "routed experts")
    # 12 pairs over 2 ranks: 6 each; this rank's 2 experts each missed with probability 0.5^6
    assert experts.flops == 6 * 6 * 8 * 2 == 576
    assert experts.weight_bytes == pytest.approx(2 * (1 - 0.5**6) * 96)
    gates = op(ops, "router + shared-expert gate")  # routes its block of ceil(6 / 2) = 3 tokens
    assert gates.flops == 2 * 3 * 8 * (4 + 1) == 240


def test_ep_double_routing_bytes() -> None:
    ops = cost(EP2).prefill.ops
    exchange = op(ops, "double-routing all_to_all")
    # 3 tokens x 2 pairs, half to the other rank: 3 rows of 8 bf16 out and back, + 4 int64 counts x 1/2
    assert exchange.comm == {"all_to_all": 2 * 3 * 8 * 2 + 4 * 8 / 2} == {"all_to_all": 112}
    gather = op(ops, "moe gather tokens")
    assert gather.comm == {"all_gather": 3 * 8 * 2}


def test_ep_dispatch_combine_bytes() -> None:
    # decode: 2 tokens, 1 per rank, 2 pairs, 1 to the other rank
    mc2 = op(cost(EP2, moe_dispatch_combine=True).decode.ops, "dispatch/combine (MC2)")
    # payload as comm.py records it: both pairs of the rank's token, out and back; on the wire only the one
    # bound for the other rank
    assert mc2.comm == {"dispatch_combine": 2 * 1 * 2 * 8 * 2}
    assert mc2.wire == {"dispatch_combine": 2 * 1 * 8 * 2}
    static = model_cost(micro(), EP2, WORKLOAD, CostToggles(moe_dispatch_combine=True), "cpu")
    padded = op(static.decode.ops, "dispatch/combine (static)")
    # capacity 1 token x min(2, 2) rows per peer, each 8 bf16 + one int64 id; out and back
    assert padded.comm == {"all_to_all": 2 * 1 * 2 * (8 * 2 + 8)}
    # prefill keeps double routing
    assert op(cost(EP2, moe_dispatch_combine=True).prefill.ops, "double-routing all_to_all")


def test_ragged_workload_lengths_and_padding() -> None:
    ragged = CostWorkload.ragged(batch=3, prompt_len=8, output_len=2)
    assert ragged.prompt_lens == (8, 5, 2)  # 8 down to 8 // 4 = 2, evenly
    c = model_cost(micro(), ParallelConfig(), ragged, CostToggles())
    core = op(c.prefill.ops, "attention core")
    assert core.flops == 2 * 2 * 2 * 4 * (36 + 15 + 3)  # causal pairs 8*9/2 + 5*6/2 + 2*3/2
    qkv = op(c.prefill.ops, "q/k/v proj")
    assert qkv.flops == 2 * (3 * 8) * 8 * 24  # the padded [3, 8] batch


def test_full_size_configs_cost_in_milliseconds() -> None:
    from model.config import load_config

    config = load_config("qwen3.5-397b-a17b")
    tp16 = ParallelConfig(world_size=16, attn_tp_size=16, moe_tp_size=16, embed_tp_size=16, lmhead_tp_size=16)
    c = model_cost(config, tp16, CostWorkload.uniform(1, 1024, 128), CostToggles())
    assert len(c.decode.ops) > 60 * 10


def test_weights_read_by_a_batch_1_decode_step_match_the_built_model() -> None:
    """At batch 1 a decode step reads every non-expert weight, one embedding row and exactly K experts per
    layer (one token picks K distinct experts): counted from the parameters of the model itself."""
    import torch

    from model import Qwen3_5MoeForCausalLM

    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", dtype=torch.float32, optimizations="none")
    k = model.config.num_experts_per_tok
    expected = 0
    for name, p in model.named_parameters():
        size = p.numel() * p.element_size()
        if name.startswith("embed_tokens."):
            expected += size // p.shape[0]
        elif ".mlp.experts." in name:
            expected += size // p.shape[0] * k
        else:
            expected += size
    c = model_cost(model.config, ParallelConfig(), CostWorkload.uniform(1, 4, 2, dtype_bytes=4), CostToggles())
    assert c.decode.total("weight_bytes") == pytest.approx(expected)
    from model.cost import total_weight_bytes

    held = sum(p.numel() * p.element_size() for p in model.parameters())
    assert total_weight_bytes(model.config, ParallelConfig(), 4) == held
