"""Each documented input rule of an emulated op raises a clear error naming the op and the rule; the
well-formed call next to it goes through."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from perfbench.emulation.npu.rules import NpuRuleError

pytestmark = pytest.mark.npu_emulated
bf16, f32, i32, i64 = torch.bfloat16, torch.float32, torch.int32, torch.int64
ALL = ("910b", "910_93", "950")


def _ops():  # torch.ops.npu, resolved after activation
    return torch.ops.npu


def _mask() -> torch.Tensor:
    return torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def _fia(dtype=bf16, contiguous_v=True, d=64) -> tuple:
    q = torch.randn(2, 5, 4 * d, dtype=dtype)
    k = torch.randn(2, 5, 2 * d, dtype=dtype)
    v = torch.randn(2, 5, 4 * d, dtype=dtype)[..., : 2 * d] if not contiguous_v else torch.randn(2, 5, 2 * d,
                                                                                                   dtype=dtype)
    return q, k, v


def _fia_v1(dtype=bf16, contiguous_v=True):
    q, k, v = _fia(dtype, contiguous_v)
    return _ops().npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BSH",
                                                  scale=0.125, atten_mask=_mask(), sparse_mode=3,
                                                  actual_seq_lengths=[5, 3], actual_seq_lengths_kv=[5, 3])


def _fia_v2(d: int = 128, dtype=bf16):
    q = torch.randn(8, 4, d, dtype=dtype)
    k = torch.randn(8, 2, d, dtype=dtype)
    return _ops().npu_fused_infer_attention_score_v2(q, k, k.clone(), num_query_heads=4, num_key_value_heads=2,
                                                     softmax_scale=0.1, input_layout="TND", sparse_mode=3,
                                                     atten_mask=_mask(), actual_seq_qlen=[5, 8],
                                                     actual_seq_kvlen=[5, 8])


def _gdr(dk: int = 128, nk: int = 2, nv: int = 4, lens=(3, 2)):
    t = 5
    return _ops().npu_chunk_gated_delta_rule(
        torch.randn(t, nk, dk, dtype=bf16), torch.randn(t, nk, dk, dtype=bf16), torch.randn(t, nv, 128, dtype=bf16),
        beta=torch.rand(t, nv, dtype=bf16), initial_state=torch.zeros(2, nv, 128, dk, dtype=bf16),
        actual_seq_lengths=torch.tensor(lens, dtype=i32), scale=dk ** -0.5, g=-torch.rand(t, nv))


def _gmm(counts=(2, 1, 1), rows: int = 4):
    w = torch.randn(len(counts), 16, 8)
    return _ops().npu_grouped_matmul([torch.randn(rows, 16)], [w], group_list=torch.tensor(counts, dtype=i64),
                                     split_item=3, group_type=0, group_list_type=1)


def _routing(num_type: int = 1, flag: bool = True):
    ids = torch.tensor([[0, 1], [2, 1]], dtype=i32)
    return _ops().npu_moe_init_routing_v2(torch.randn(2, 8), ids, active_num=4, expert_num=3,
                                          expert_tokens_num_type=num_type, expert_tokens_num_flag=flag,
                                          quant_mode=-1, active_expert_range=[0, 3])


# (platforms, rule call, good call, text the error must carry)
RULES: dict[str, tuple[tuple[str, ...], Callable[[], object], Callable[[], object], str]] = {
    "rms_norm gamma dtype": (ALL, lambda: _ops().npu_rms_norm(torch.randn(3, 8, dtype=bf16), torch.ones(8)),
                             lambda: _ops().npu_rms_norm(torch.randn(3, 8, dtype=bf16), torch.ones(8, dtype=bf16)),
                             "npu_rms_norm: gamma dtype must equal self dtype"),
    "add_rms_norm one dtype": (ALL, lambda: _ops().npu_add_rms_norm(torch.randn(3, 8, dtype=bf16),
                                                                    torch.randn(3, 8, dtype=bf16), torch.ones(8)),
                               lambda: _ops().npu_add_rms_norm(torch.randn(3, 8), torch.randn(3, 8), torch.ones(8)),
                               "npu_add_rms_norm: x1, x2 and gamma must share one dtype"),
    "rotary_mul odd D": (ALL, lambda: _ops().npu_rotary_mul(torch.randn(1, 2, 2, 7), torch.randn(1, 2, 1, 7),
                                                            torch.randn(1, 2, 1, 7)),
                         lambda: _ops().npu_rotary_mul(torch.randn(1, 2, 2, 8), torch.randn(1, 2, 1, 8),
                                                       torch.randn(1, 2, 1, 8)),
                         "npu_rotary_mul: head dim D must be even and < 896"),
    "rotary_mul cos dtype": (ALL, lambda: _ops().npu_rotary_mul(torch.randn(1, 2, 2, 8, dtype=bf16),
                                                                torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)),
                             lambda: None, "npu_rotary_mul: r1 dtype must equal self dtype"),
    "fia no fp32": (ALL, lambda: _fia_v1(dtype=f32), _fia_v1, "npu_fused_infer_attention_score: query dtype"),
    "fia value contiguous": (ALL, lambda: _fia_v1(contiguous_v=False), _fia_v1,
                             "npu_fused_infer_attention_score: value must be contiguous"),
    "fia mask 2048": (ALL, lambda: _ops().npu_fused_infer_attention_score(
        *_fia(), num_heads=4, num_key_value_heads=2, atten_mask=torch.ones(5, 5, dtype=torch.bool), sparse_mode=3),
        _fia_v1, "sparse_mode 3 takes a (2048, 2048) atten_mask"),
    "fia v2 TND head dim": (ALL, lambda: _fia_v2(d=64), _fia_v2, "TND head dims must be Q_D=K_D=V_D=128"),
    "fia v2 TND bf16 only": (ALL, lambda: _fia_v2(dtype=torch.float16), _fia_v2,
                             "TND layout supports bfloat16 only"),
    "chunk gdr Dk 128": (ALL, lambda: _gdr(dk=64), _gdr, "head dims must be Dk = Dv = 128"),
    "chunk gdr Nv multiple of Nk": (ALL, lambda: _gdr(nk=3, nv=4), _gdr, "Nv a multiple of Nk"),
    "chunk gdr heads <= 64": (ALL, lambda: _gdr(nk=2, nv=66), _gdr, "Nk <= 64, Nv <= 64"),
    "chunk gdr lengths sum": (ALL, lambda: _gdr(lens=(3, 1)), _gdr, "must sum to the token count 5"),
    "grouped_matmul list length 1": (ALL, lambda: _gmm(counts=(4,)), _gmm, "group_list length must not be 1"),
    "grouped_matmul rows": (ALL, lambda: _gmm(counts=(3, 1, 1)), _gmm, "group_list covers 5 rows but x has 4"),
    "init_routing counts type": (ALL, lambda: _routing(num_type=0), _routing,
                                 "expert_tokens_num_type must be 1 or 2"),
    "init_routing flag": (ALL, lambda: _routing(flag=False), _routing, "expert_tokens_num_flag must be True"),
    "gating k range": (ALL, lambda: _ops().npu_moe_gating_top_k_softmax(torch.randn(3, 4), None, k=5),
                       lambda: _ops().npu_moe_gating_top_k_softmax(torch.randn(3, 4), None, k=2),
                       "k must satisfy 0 < k <= min(x.shape[-1], 1024)"),
    "finalize scales dtype": (ALL, lambda: _ops().npu_moe_finalize_routing(
        torch.randn(4, 8, dtype=bf16), None, None, None, torch.rand(2, 2), torch.arange(4, dtype=i32), None,
        drop_pad_mode=2), lambda: None, "scales dtype must equal expanded_permuted_rows dtype"),
    "scatter_nd updates shape": (ALL, lambda: _ops().npu_scatter_nd_update_(
        torch.zeros(6, 2, 4), torch.tensor([[1], [3]]), torch.ones(2, 4)),
        lambda: _ops().npu_scatter_nd_update_(torch.zeros(6, 2, 4), torch.tensor([[1], [3]]), torch.ones(2, 2, 4)),
        "updates shape must be (2, 2, 4)"),
    "scatter_update indices dtype": (ALL, lambda: _ops().scatter_update_(
        torch.zeros(2, 6, 4), torch.tensor([0.0, 1.0]), torch.ones(2, 2, 4), -2),
        lambda: _ops().scatter_update_(torch.zeros(2, 6, 4), torch.tensor([0, 1]), torch.ones(2, 2, 4), -2),
        "indices dtype must be one of int32, int64"),
    "swiglu even dim": (ALL, lambda: _ops().npu_swiglu(torch.randn(3, 5)), lambda: _ops().npu_swiglu(torch.randn(3, 4)),
                        "npu_swiglu: x must have 1-8 dims and an even size"),
}


@pytest.mark.parametrize("platform", ALL, indirect=True)
@pytest.mark.parametrize("rule", list(RULES))
def test_rule_raises_naming_op_rule_and_platform(platform: str, rule: str) -> None:
    platforms, bad, good, text = RULES[rule]
    assert platform in platforms
    with pytest.raises(NpuRuleError, match=None) as err:
        bad()
    assert text in str(err.value)
    assert f"[emulated npu ({platform})]" in str(err.value)
    good()


def _dispatch(hidden: int = 1024, **overrides: object):
    args = dict(x=torch.randn(2, hidden, dtype=bf16), expert_ids=torch.tensor([[0, 1], [2, 3]], dtype=i32),
                group_ep="emulated_hccl:none", ep_world_size=2, ep_rank_id=0, moe_expert_num=4,
                x_active_mask=torch.tensor([True, True]), expert_scales=torch.rand(2, 2), quant_mode=0,
                global_bs=4)
    args.update(overrides)
    return _ops().npu_moe_distribute_dispatch_v2(**args)


def _combine(hidden: int = 1024, **overrides: object):
    args = dict(expand_x=torch.randn(8, hidden, dtype=bf16), expert_ids=torch.tensor([[0, 1], [2, 3]], dtype=i32),
                assist_info_for_combine=torch.zeros(8 * 128, dtype=i32), ep_send_counts=torch.zeros(4, dtype=i32),
                expert_scales=torch.rand(2, 2), group_ep="emulated_hccl:none", ep_world_size=2, ep_rank_id=0,
                moe_expert_num=4, expand_scales=torch.rand(8), global_bs=4)
    args.update(overrides)
    return _ops().npu_moe_distribute_combine_v2(**args)


# (platform, call, text of the platform rule it breaks); the same call elsewhere passes the rule and stops at the
# communicator lookup (no process group in this test), which shows the rule is the platform's
MC2_RULES = [
    ("910b", lambda: _dispatch(expert_scales=None), "Atlas A2 needs expert_scales (BS, K) float32"),
    ("910b", lambda: _dispatch(tp_world_size=1), "tp_world_size must be the default 0"),
    ("910b", lambda: _dispatch(shared_expert_num=0), "Atlas A2 does not support shared_expert_num"),
    ("910b", lambda: _combine(expand_scales=None), "Atlas A2 requires expand_scales"),
    ("910_93", lambda: _dispatch(hidden=256), "Atlas A3 needs hidden size H in [1024, 8192]"),
    ("910_93", lambda: _combine(hidden=256), "Atlas A3 needs hidden size H in [1024, 8192]"),
    ("950", lambda: _dispatch(), "documented for Atlas A2 and A3, not for 950"),
]


@pytest.mark.parametrize("case", range(len(MC2_RULES)))
def test_mc2_platform_rules(emulate, case: int) -> None:
    key, call, text = MC2_RULES[case]
    for other in ALL:
        emulate(other)
        with pytest.raises(NpuRuleError) as err:
            call()
        if other == key:
            assert text in str(err.value) and f"({key})" in str(err.value)
        elif key != "950" and other != "950":
            assert "names no live process group" in str(err.value) or "HCCL" in str(err.value), str(err.value)


def test_mm_all_reduce_rules(emulate) -> None:
    emulate("950")
    x1, x2 = torch.randn(2, 3, 8, dtype=bf16), torch.randn(4, 8, dtype=bf16).t()
    with pytest.raises(NpuRuleError, match="unknown HCCL communicator"):
        _ops().npu_mm_all_reduce_base(x1, x2, "hccl_world_group")
    from perfbench.emulation.npu import rules

    with pytest.raises(NpuRuleError, match="reduce_op must be 'sum'"):
        rules.mm_all_reduce(x1, x2, "max", 2)
    with pytest.raises(NpuRuleError, match="1, 2, 4 or 8 ranks"):
        rules.mm_all_reduce(x1, x2, "sum", 3)
    with pytest.raises(NpuRuleError, match="x1 must not be transposed"):
        rules.mm_all_reduce(x1.transpose(0, 1), x2, "sum", 2)
