"""The emulated ops compute their documented semantics: each checked against an independent torch
formulation (SDPA, F.rms_norm, explicit loops), not against the emulator's own code."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.npu_emulated
bf16 = torch.bfloat16


def test_rms_norm_matches_torch_rms_norm(platform: str) -> None:
    x, gamma = torch.randn(3, 5, 16), torch.rand(16) + 0.5
    y, rstd = torch.ops.npu.npu_rms_norm(x, gamma, 1e-6)
    torch.testing.assert_close(y, F.rms_norm(x, (16,), gamma, 1e-6))
    torch.testing.assert_close(rstd, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    y2, _, summed = torch.ops.npu.npu_add_rms_norm(x, x, gamma, 1e-6)
    torch.testing.assert_close(summed, 2 * x)
    torch.testing.assert_close(y2, F.rms_norm(2 * x, (16,), gamma, 1e-6))


def test_rotary_half(platform: str) -> None:
    x = torch.randn(2, 3, 4, 8)
    angle = torch.rand(2, 3, 1, 4).repeat(1, 1, 1, 2)
    out = torch.ops.npu.npu_rotary_mul(x, angle.cos(), angle.sin(), rotary_mode="half")
    # rotating the pair (x[i], x[i + D/2]) by angle[i]
    a, b = x[..., :4], x[..., 4:]
    th = angle[..., :4]
    expected = torch.cat((a * th.cos() - b * th.sin(), b * th.cos() + a * th.sin()), dim=-1)
    torch.testing.assert_close(out, expected)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """[S, N, D] one sequence, GQA through enable_gqa."""
    out = F.scaled_dot_product_attention(q.float().transpose(0, 1), k.float().transpose(0, 1),
                                         v.float().transpose(0, 1), is_causal=causal, scale=scale, enable_gqa=True)
    return out.transpose(0, 1)


def test_fia_v1_bsh_causal_with_lengths(platform: str) -> None:
    b, s, nq, nkv, d = 2, 6, 4, 2, 64
    q, k, v = (torch.randn(b, s, n * d, dtype=bf16) for n in (nq, nkv, nkv))
    lens = [6, 4]
    mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    out, _ = torch.ops.npu.npu_fused_infer_attention_score(
        q, k, v, num_heads=nq, num_key_value_heads=nkv, input_layout="BSH", scale=0.125, atten_mask=mask,
        sparse_mode=3, next_tokens=0, actual_seq_lengths=lens, actual_seq_lengths_kv=lens)
    for i, n in enumerate(lens):
        ref = _sdpa(q[i, :n].view(n, nq, d), k[i, :n].view(n, nkv, d), v[i, :n].view(n, nkv, d), 0.125, True)
        torch.testing.assert_close(out[i, :n].view(n, nq, d).float(), ref, atol=2e-2, rtol=2e-2)
    assert out[1, 4:].abs().sum() == 0


def test_fia_v2_tnd_paged_equals_unpaged(platform: str) -> None:
    nq, nkv, d, block = 4, 2, 128, 128
    kv_lens = [130, 7]
    k_cache = torch.randn(2, 256, nkv, d, dtype=bf16)
    v_cache = torch.randn(2, 256, nkv, d, dtype=bf16)
    q = torch.randn(2, nq, d, dtype=bf16)
    table = torch.arange(4, dtype=torch.int32).view(2, 2)
    paged, _ = torch.ops.npu.npu_fused_infer_attention_score_v2(
        q, k_cache.view(4, block, nkv * d), v_cache.view(4, block, nkv * d), num_query_heads=nq,
        num_key_value_heads=nkv, softmax_scale=d ** -0.5, input_layout="TND", actual_seq_qlen=[1, 2],
        actual_seq_kvlen=kv_lens, block_table=table, block_size=block)
    for i, n in enumerate(kv_lens):
        ref = _sdpa(q[i:i + 1], k_cache[i, :n], v_cache[i, :n], d ** -0.5, False)
        torch.testing.assert_close(paged[i:i + 1].float(), ref, atol=2e-2, rtol=2e-2)


def test_kv_cache_writes(platform: str) -> None:
    cache = torch.zeros(2, 6, 4)
    new = torch.arange(16.0).view(2, 2, 4)
    torch.ops.npu.scatter_update_(cache, torch.tensor([1, 3]), new, -2)
    assert torch.equal(cache[0, 1:3], new[0]) and torch.equal(cache[1, 3:5], new[1])
    assert cache[0, 0].abs().sum() == 0 and cache[1, :3].abs().sum() == 0
    flat = torch.zeros(6, 2, 4)
    torch.ops.npu.npu_scatter_nd_update_(flat, torch.tensor([[4], [0]]), new)
    assert torch.equal(flat[4], new[0]) and torch.equal(flat[0], new[1])


def test_grouped_matmul_per_group(platform: str) -> None:
    x, w = torch.randn(5, 8), torch.randn(3, 8, 4)
    counts = torch.tensor([2, 0, 3])
    (y,) = torch.ops.npu.npu_grouped_matmul([x], [w], group_list=counts, split_item=3, group_type=0,
                                            group_list_type=1)
    torch.testing.assert_close(y, torch.cat([x[:2] @ w[0], x[2:] @ w[2]]))


def test_gating_top_k_softmax_does_not_renormalise(platform: str) -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    weights, ids, _ = torch.ops.npu.npu_moe_gating_top_k_softmax(logits, None, k=2)
    probs = logits.softmax(-1)
    assert ids.tolist() == [[1, 2]]
    torch.testing.assert_close(weights, probs[:, [1, 2]])
