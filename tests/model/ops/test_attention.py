"""fused_attention ops: implementations vs references (run first), decode vs prefill, KV writes, compiled decode.

Tolerances (implementation vs reference):
  fp32: atol = rtol = 2e-5 (SDPA's online softmax reorders the sums; observed max-abs ~3e-7 on O(1) values).
  bf16: atol = rtol = 2e-2 (SDPA rounds q/k/v products and the output in bf16 steps the fp32 reference does not).
Only rows at valid positions (t < seq_lens[b]) are compared in prefill; padded rows must be finite.

NPU implementations run on an Ascend device when torch_npu has one; otherwise under the NPU emulator (ids
"npu_emulated", marker `npu_emulated`, conftest.py), which checks our call sites' arguments, layouts and op
composition against the emulated ops' documented semantics and rules, not the real kernels' numerics.
"""

from __future__ import annotations

import pytest
import torch
from _compare import assert_close, device_for, impl_param
from hypothesis import given, settings
from hypothesis import strategies as st

from model.ops import attention as attn

TOL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (2e-2, 2e-2)}
DTYPES = [torch.float32, torch.bfloat16]
IMPLS = ["cpu", "cuda", "npu", "npu_tnd"]


def _supported(impl: str, dtype: torch.dtype, d: int) -> bool:
    """torch_npu 2.14.0's FIA has no fp32, and its TND layout takes bf16 with head dim 128 or 192 only (the plan
    never picks the NPU paths outside these: model/optimizations.py)."""
    if impl.startswith("npu") and dtype == torch.float32:
        return False
    return impl != "npu_tnd" or (dtype == torch.bfloat16 and d in (128, 192))


def _dtype_id(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)


# ---- prefill ----------------------------------------------------------------------------------------------

# (B, T, Nq, Nkv, D, seq_lens): one token, ragged batches with a 1-token prompt, GQA 1 / 2 / 4 / 8, D 64 / 128
# / 256 (ragged D 128: the TND path's head dim).
PREFILL_CASES = [
    (1, 1, 4, 4, 64, (1,)),
    (3, 9, 8, 1, 64, (9, 1, 5)),
    (2, 17, 4, 2, 256, (17, 12)),
    (2, 6, 16, 2, 256, (6, 3)),
    (1, 40, 2, 2, 128, (40,)),
    (3, 20, 8, 2, 128, (20, 1, 11)),
]


def _prefill_id(c: tuple) -> str:
    return "-".join(f"{k}{v}" for k, v in zip(("B", "T", "Nq", "Nkv", "D"), c)) + "-L" + "_".join(map(str, c[5]))


def _prefill_inputs(case: tuple, dtype: torch.dtype, device: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    b, t, nq, nkv, d, lens = case
    gen = torch.Generator().manual_seed(seed)
    q = _randn(gen, b, t, nq, d, dtype=dtype, device=device)
    k = _randn(gen, b, t, nkv, d, dtype=dtype, device=device)
    v = _randn(gen, b, t, nkv, d, dtype=dtype, device=device)
    return q, k, v, torch.tensor(lens, device=device)


def _valid_rows(seq_lens: torch.Tensor, t: int) -> torch.Tensor:
    return torch.arange(t, device=seq_lens.device) < seq_lens[:, None]


# NPU implementations run on an Ascend device when there is one, else under the NPU emulator (conftest.py).
PREFILL_PARAMS = [impl_param(impl, case, dtype, id=f"{_prefill_id(case)}-{_dtype_id(dtype)}")
                  for impl in IMPLS for case in PREFILL_CASES for dtype in DTYPES if _supported(impl, dtype, case[4])]


@pytest.mark.parametrize(("impl", "case", "dtype"), PREFILL_PARAMS)
def test_attention_prefill_matches_ref(impl: str, case: tuple, dtype: torch.dtype) -> None:
    device = device_for(impl)
    q, k, v, seq_lens = _prefill_inputs(case, dtype, device)
    before = [x.clone() for x in (q, k, v)]
    scale = case[4] ** -0.5
    ref = attn.attention_prefill_ref(q, k, v, seq_lens, scale)
    out = attn.ATTENTION_PREFILL[impl](q, k, v, seq_lens, scale)
    assert all(torch.equal(b, a) for b, a in zip(before, (q, k, v))), f"{impl} modified its inputs"
    assert out.shape == q.shape and out.dtype == dtype
    assert torch.isfinite(out.float()).all(), f"{impl}: non-finite values (padded rows must stay finite)"
    valid = _valid_rows(seq_lens, q.shape[1])
    assert_close(f"attention_prefill_{impl}", ref[valid], out[valid], *TOL[dtype])


@settings(max_examples=20, deadline=None, derandomize=True)
@given(b=st.integers(1, 3), t=st.integers(1, 40), n_kv=st.sampled_from([1, 2]), ratio=st.sampled_from([1, 2, 8]),
       d=st.sampled_from([16, 64, 256]), data=st.data())
def test_sdpa_paths_random_shapes(b: int, t: int, n_kv: int, ratio: int, d: int, data: st.DataObject) -> None:
    """CPU prefill and decode vs the references over random ragged shapes (fp32)."""
    lens = data.draw(st.lists(st.integers(1, t), min_size=b, max_size=b), label="seq_lens")
    case = (b, t, n_kv * ratio, n_kv, d, tuple(lens))
    q, k, v, seq_lens = _prefill_inputs(case, torch.float32, "cpu", seed=t)
    ref = attn.attention_prefill_ref(q, k, v, seq_lens, d**-0.5)
    out = attn.attention_prefill_cpu(q, k, v, seq_lens, d**-0.5)
    valid = _valid_rows(seq_lens, t)
    assert torch.isfinite(out).all()
    assert_close("attention_prefill_cpu (random)", ref[valid], out[valid], *TOL[torch.float32])
    q1, k_cache, v_cache, kv_lens = _decode_inputs((b, t, n_kv * ratio, n_kv, d, tuple(lens)), torch.float32,
                                                   "cpu", seed=t)
    ref = attn.attention_decode_ref(q1, k_cache, v_cache, kv_lens, d**-0.5)
    out = attn.attention_decode_cpu(q1, k_cache, v_cache, kv_lens, d**-0.5)
    assert_close("attention_decode_cpu (random)", ref, out, *TOL[torch.float32])


def test_prefill_ref_is_causal_and_ignores_padding() -> None:
    q, k, v, seq_lens = _prefill_inputs((2, 6, 4, 2, 64, (6, 3)), torch.float32, "cpu")
    out = attn.attention_prefill_ref(q, k, v, seq_lens, 0.125)
    # changing the future of row 0 and the padding of row 1 leaves row 0's first 4 tokens and row 1's 3 alone
    k2, v2 = k.clone(), v.clone()
    k2[0, 4:], v2[0, 4:], k2[1, 3:], v2[1, 3:] = 9.0, 9.0, 9.0, 9.0
    out2 = attn.attention_prefill_ref(q, k2, v2, seq_lens, 0.125)
    assert torch.equal(out[0, :4], out2[0, :4]) and torch.equal(out[1, :3], out2[1, :3])
    # GQA: query head h reads kv head h // 2; one query head alone over one kv head gives the same row
    single = attn.attention_prefill_ref(q[:, :, 3:4], k[:, :, 1:2], v[:, :, 1:2], seq_lens, 0.125)
    assert_close("GQA head mapping", out[:, :, 3:4], single, 1e-6, 1e-6)


# ---- decode -----------------------------------------------------------------------------------------------

# (B, S, Nq, Nkv, D, kv_lens): one-entry cache, a full cache, a 1-token row, GQA 1 / 2 / 8, D 64 / 128 / 256.
DECODE_CASES = [
    (1, 1, 4, 4, 64, (1,)),
    (3, 40, 8, 1, 64, (40, 1, 17)),
    (2, 64, 16, 2, 256, (5, 64)),
    (4, 16, 4, 4, 128, (16, 8, 1, 3)),
    (2, 256, 4, 2, 128, (130, 256)),
]


def _decode_id(c: tuple) -> str:
    return "-".join(f"{k}{v}" for k, v in zip(("B", "S", "Nq", "Nkv", "D"), c)) + "-L" + "_".join(map(str, c[5]))


def _decode_inputs(case: tuple, dtype: torch.dtype, device: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    b, s, nq, nkv, d, lens = case
    gen = torch.Generator().manual_seed(seed)
    q = _randn(gen, b, 1, nq, d, dtype=dtype, device=device)
    # stale cache entries beyond kv_lens are large, so a missing mask cannot pass unnoticed
    k_cache = 50.0 * _randn(gen, b, s, nkv, d, dtype=dtype, device=device)
    v_cache = 50.0 * _randn(gen, b, s, nkv, d, dtype=dtype, device=device)
    kv_lens = torch.tensor(lens, device=device)
    valid = _valid_rows(kv_lens, s)[..., None, None]
    k_cache = torch.where(valid, k_cache / 50.0, k_cache)
    v_cache = torch.where(valid, v_cache / 50.0, v_cache)
    return q, k_cache, v_cache, kv_lens


# The paged TND path reads whole 128-token blocks, so its cache length must be a multiple of the block.
DECODE_PARAMS = [impl_param(impl, case, dtype, id=f"{_decode_id(case)}-{_dtype_id(dtype)}")
                 for impl in IMPLS for case in DECODE_CASES for dtype in DTYPES
                 if _supported(impl, dtype, case[4]) and (impl != "npu_tnd" or case[1] % attn.NPU_BLOCK_SIZE == 0)]


@pytest.mark.parametrize(("impl", "case", "dtype"), DECODE_PARAMS)
def test_attention_decode_matches_ref(impl: str, case: tuple, dtype: torch.dtype) -> None:
    device = device_for(impl)
    q, k_cache, v_cache, kv_lens = _decode_inputs(case, dtype, device)
    before = [x.clone() for x in (q, k_cache, v_cache, kv_lens)]
    scale = case[4] ** -0.5
    ref = attn.attention_decode_ref(q, k_cache, v_cache, kv_lens, scale)
    out = attn.ATTENTION_DECODE[impl](q, k_cache, v_cache, kv_lens, scale)
    assert all(torch.equal(b, a) for b, a in zip(before, (q, k_cache, v_cache, kv_lens)))
    assert out.shape == q.shape and out.dtype == dtype
    assert_close(f"attention_decode_{impl}", ref, out, *TOL[dtype])


def test_tnd_decode_rejects_unpaged_cache_length() -> None:
    with pytest.raises(ValueError, match="multiple of 128"):
        attn._check_paged(200)


@pytest.mark.parametrize("impl", [impl_param(i) for i in ("ref", "cpu", "cuda", "npu", "npu_tnd")])
def test_decode_step_equals_last_prefill_row(impl: str) -> None:
    """The last valid row of a causal prefill equals one decode step over the cache that prefill wrote."""
    device = device_for(impl)
    dtype = torch.bfloat16 if impl.startswith("npu") else torch.float32  # FIA has no fp32
    b, t, nq, nkv, d, lens = 3, 7, 8, 2, 128, (7, 1, 4)
    q, k, v, seq_lens = _prefill_inputs((b, t, nq, nkv, d, lens), dtype, device, seed=11)
    s = 128  # a multiple of the paged block, longer than the prompt
    k_cache = torch.full((b, s, nkv, d), 7.0, dtype=dtype, device=device)  # stale content must be masked
    v_cache = torch.full((b, s, nkv, d), 7.0, dtype=dtype, device=device)
    scale = d**-0.5
    prefill = attn.ATTENTION_PREFILL[impl](q, k, v, seq_lens, scale)
    attn.WRITE_KV[impl](k_cache, v_cache, k, v, torch.zeros_like(seq_lens))
    rows = torch.arange(b, device=device)
    last_q = q[rows, seq_lens - 1][:, None]  # [B, 1, Nq, D]
    decode = attn.ATTENTION_DECODE[impl](last_q, k_cache, v_cache, seq_lens, scale)
    assert_close(f"{impl}: decode vs last prefill row", prefill[rows, seq_lens - 1][:, None], decode, *TOL[dtype])


# ---- KV writes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [1, 3], ids=["T1", "T3"])
@pytest.mark.parametrize("impl", [impl_param(i) for i in ("ref", "cpu", "cuda", "npu", "npu_tnd")])
def test_write_kv(impl: str, t: int) -> None:
    device = device_for(impl)
    b, s, nkv, d = 3, 128, 2, 16
    gen = torch.Generator().manual_seed(5)
    k_cache = _randn(gen, b, s, nkv, d, dtype=torch.float32, device=device)
    v_cache = _randn(gen, b, s, nkv, d, dtype=torch.float32, device=device)
    k = _randn(gen, b, t, nkv, d, dtype=torch.float32, device=device)
    v = _randn(gen, b, t, nkv, d, dtype=torch.float32, device=device)
    positions = torch.tensor([0, 5, s - t], device=device)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    for i, p in enumerate(positions.tolist()):
        expected_k[i, p:p + t] = k[i]
        expected_v[i, p:p + t] = v[i]
    attn.WRITE_KV[impl](k_cache, v_cache, k, v, positions)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_tables_cover_every_device() -> None:
    for table in (attn.ATTENTION_PREFILL, attn.ATTENTION_DECODE, attn.WRITE_KV):
        assert set(table) == {"ref", "cpu", "cuda", "npu", "npu_tnd"}


# ---- graph_mode: write + decode in one static-shape fullgraph compile --------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["ref", "cpu"])
def test_write_kv_and_decode_under_fullgraph_compile(impl: str) -> None:
    b, s, nq, nkv, d = 2, 32, 4, 2, 64
    gen = torch.Generator().manual_seed(9)
    k_cache = torch.randn(b, s, nkv, d, generator=gen)
    v_cache = torch.randn(b, s, nkv, d, generator=gen)
    q = torch.randn(b, 1, nq, d, generator=gen)
    k_new = torch.randn(b, 1, nkv, d, generator=gen)
    v_new = torch.randn(b, 1, nkv, d, generator=gen)
    kv_len = torch.tensor([3, 20])  # before the step
    write, decode = attn.WRITE_KV[impl], attn.ATTENTION_DECODE[impl]

    def step(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, kv_len: torch.Tensor) -> torch.Tensor:
        write(k_cache, v_cache, k_new, v_new, kv_len)
        return decode(q, k_cache, v_cache, kv_len + 1, d**-0.5)

    eager_caches = (k_cache.clone(), v_cache.clone())
    expected = step(q, k_new, v_new, *eager_caches, kv_len)
    compiled = torch.compile(step, fullgraph=True, dynamic=False)
    out = compiled(q, k_new, v_new, k_cache, v_cache, kv_len)
    assert torch.equal(k_cache, eager_caches[0]) and torch.equal(v_cache, eager_caches[1])
    assert_close(f"compiled {impl} decode", expected, out, *TOL[torch.float32])
    # lengths are tensor data, not shapes: a second step with other lengths must not recompile
    with torch.compiler.set_stance("fail_on_recompile"):
        out2 = compiled(q, k_new, v_new, k_cache, v_cache, kv_len + 1)
    expected2 = step(q, k_new, v_new, *eager_caches, kv_len + 1)
    assert_close(f"compiled {impl} decode, step 2", expected2, out2, *TOL[torch.float32])
