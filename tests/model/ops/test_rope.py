"""fused_rope ops: every implementation against the reference (run first); cos/sin and the reference vs HF.

Tolerances (implementation vs reference):
  fp32: atol = rtol = 1e-5 (the compiled kernel may contract x*cos + r*sin into an FMA; observed <= 5e-7).
  bf16: atol = rtol = 1.6e-2 (two bf16 ulps; both round once from fp32, the NPU kernel's internal precision
        is undocumented).
The pass-through dims R..D must be copied bit for bit by every implementation.

NPU implementations run on an Ascend device when torch_npu has one; otherwise under the NPU emulator (ids
"npu_emulated", marker `npu_emulated`, conftest.py), which checks our call sites' arguments, layouts and op
composition against the emulated ops' documented semantics and rules, not the real kernels' numerics.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from _compare import assert_close, device_for, impl_param, strict_recompiles
from hypothesis import given, settings
from hypothesis import strategies as st

from model.ops import rope

TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2)}
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]
THETA = 1e7


# NPU implementations run on an Ascend device when there is one, else under the NPU emulator (conftest.py)
IMPLS = [impl_param(i) for i in ("cpu", "cuda", "npu")]


@pytest.fixture(autouse=True, scope="module")
def _compiled_kernels_never_fall_back() -> Iterator[None]:
    with strict_recompiles():
        yield


# (B, T, Nq, Nkv, D, R): decode (T=1, B=1/4), Qwen3.5 head_dim 256 with rotary 64, head_dim 64 with
# rotary 16, GQA 1/2/8, full rotary (R = D), an odd token count.
CASES = [
    (1, 1, 16, 2, 256, 64),
    (4, 1, 16, 2, 256, 64),
    (2, 9, 8, 1, 64, 16),
    (1, 33, 4, 4, 128, 128),
    (3, 5, 4, 2, 256, 64),
]


def _case_id(c: tuple[int, ...]) -> str:
    return "-".join(f"{k}{v}" for k, v in zip(("B", "T", "Nq", "Nkv", "D", "R"), c))


# fp32 on every case; bf16 on decode and on the small-head case (each new pattern costs the CPU path a compile).
CASE_DTYPES = [pytest.param(c, torch.float32, id=f"{_case_id(c)}-fp32") for c in CASES] + [
    pytest.param(CASES[i], torch.bfloat16, id=f"{_case_id(CASES[i])}-bf16") for i in (0, 2)]


def _inputs(case: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    b, t, nq, nkv, d, r = case
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, nq, d, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(b, t, nkv, d, generator=gen).to(device=device, dtype=dtype)
    # ragged decode-like offsets: every row starts somewhere else
    positions = torch.randint(0, 4000, (b, 1), generator=gen) + torch.arange(t)
    cos, sin = rope.rotary_cos_sin(positions.to(device), rope.rope_inv_freq(THETA, r), dtype)
    return q, k, cos, sin


@pytest.mark.parametrize(("case", "dtype"), CASE_DTYPES)
@pytest.mark.parametrize("impl", IMPLS)
def test_apply_rope_matches_ref(impl: str, case: tuple[int, ...], dtype: torch.dtype) -> None:
    device = device_for(impl)
    q, k, cos, sin = _inputs(case, dtype, device)
    before = [t.clone() for t in (q, k, cos, sin)]
    ref_q, ref_k = rope.apply_rope_ref(q, k, cos, sin)
    out_q, out_k = rope.APPLY_ROPE[impl](q, k, cos, sin)
    for i, (b, a) in enumerate(zip(before, (q, k, cos, sin))):
        assert torch.equal(b, a), f"{impl}: input {i} was modified"
    assert out_q.shape == q.shape and out_k.shape == k.shape
    assert out_q.dtype == dtype and out_k.dtype == dtype
    assert_close(f"apply_rope_{impl}.q", ref_q, out_q, *TOL[dtype])
    assert_close(f"apply_rope_{impl}.k", ref_k, out_k, *TOL[dtype])
    r = cos.shape[-1]
    assert torch.equal(out_q[..., r:], q[..., r:]) and torch.equal(out_k[..., r:], k[..., r:])


@settings(max_examples=15, deadline=None, derandomize=True)
@given(b=st.integers(1, 3), t=st.integers(2, 20), n_kv=st.sampled_from([2, 4]), ratio=st.sampled_from([1, 2, 8]),
       d=st.sampled_from([64, 128, 256]), frac=st.sampled_from([4, 2]))
def test_cpu_rope_random_shapes(b: int, t: int, n_kv: int, ratio: int, d: int, frac: int) -> None:
    """The compiled CPU kernel vs the reference over random batch, length, GQA and rotary fractions (fp32).

    Kept inside the compiled variants CASES already built (T > 1, Nkv > 1, R < D); those edge cases are
    covered there."""
    q, k, cos, sin = _inputs((b, t, n_kv * ratio, n_kv, d, d // frac), torch.float32, "cpu", seed=b * 100 + t)
    for name, a, c in zip("qk", rope.apply_rope_ref(q, k, cos, sin), rope.apply_rope_cpu(q, k, cos, sin)):
        assert_close(f"apply_rope_cpu.{name} (random)", a, c, *TOL[torch.float32])


def test_ref_rotates_pairs_i_and_i_plus_half() -> None:
    # One head, R=4 of D=6, angle theta on the first pair only: dims (0, 2) rotate, 1, 3 see angle 0.
    q = torch.tensor([[[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]]])
    angle = torch.tensor(0.5)
    cos = torch.tensor([[[angle.cos(), 1.0, angle.cos(), 1.0]]])
    sin = torch.tensor([[[angle.sin(), 0.0, angle.sin(), 0.0]]])
    out, _ = rope.apply_rope_ref(q, q, cos, sin)
    c, s = angle.cos().item(), angle.sin().item()
    expected = torch.tensor([1.0 * c - 3.0 * s, 2.0, 3.0 * c + 1.0 * s, 4.0, 5.0, 6.0])
    assert_close("rotate_half pairing", expected, out[0, 0, 0], 1e-6, 0.0)


def test_rotary_cos_sin_layout() -> None:
    inv_freq = rope.rope_inv_freq(THETA, 16)
    assert inv_freq.shape == (8,) and inv_freq.dtype == torch.float32
    positions = torch.tensor([[0, 1, 5], [7, 8, 9]])
    cos, sin = rope.rotary_cos_sin(positions, inv_freq, torch.bfloat16)
    assert cos.shape == (2, 3, 16) and cos.dtype == torch.bfloat16
    assert torch.equal(cos[..., :8], cos[..., 8:]) and torch.equal(sin[..., :8], sin[..., 8:])
    expected = (positions[..., None].float() * inv_freq).cos().to(torch.bfloat16)
    assert torch.equal(cos[..., :8], expected)


def test_table_covers_every_device() -> None:
    assert set(rope.APPLY_ROPE) == {"ref", "cpu", "cuda", "npu"}


# ---- HF parity: text-only MRoPE == plain partial RoPE -----------------------------------------------------


@pytest.fixture(scope="module")
def hf() -> object:
    return pytest.importorskip("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe")


@pytest.mark.parametrize("dtype", DTYPES)
def test_cos_sin_and_ref_equal_hf(hf: object, dtype: torch.dtype) -> None:
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig

    d, nq, nkv = 64, 4, 2
    config = Qwen3_5MoeTextConfig(hidden_size=64, num_attention_heads=nq, num_key_value_heads=nkv, head_dim=d,
                                  rope_parameters={"rope_type": "default", "rope_theta": THETA,
                                                   "partial_rotary_factor": 0.25, "mrope_section": [3, 3, 2]})
    rotary = hf.Qwen3_5MoeTextRotaryEmbedding(config)  # type: ignore[attr-defined]
    gen = torch.Generator().manual_seed(7)
    positions = torch.randint(0, 3000, (2, 1), generator=gen) + torch.arange(6)
    x = torch.zeros(1, dtype=dtype)
    hf_cos, hf_sin = rotary(x, positions)
    inv_freq = rope.rope_inv_freq(THETA, d // 4)
    assert torch.equal(inv_freq, rotary.inv_freq)
    cos, sin = rope.rotary_cos_sin(positions, inv_freq, dtype)
    assert_close("cos vs HF", hf_cos, cos, 0.0, 0.0)
    assert_close("sin vs HF", hf_sin, sin, 0.0, 0.0)

    q = torch.randn(2, 6, nq, d, generator=gen).to(dtype)
    k = torch.randn(2, 6, nkv, d, generator=gen).to(dtype)
    hf_q, hf_k = hf.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)  # type: ignore[attr-defined]
    out_q, out_k = rope.apply_rope_ref(q, k, cos, sin)
    # fp32: identical math. bf16: HF multiplies and adds in bf16 (3 roundings), the reference once.
    tol = (0.0, 0.0) if dtype == torch.float32 else TOL[dtype]
    assert_close("apply_rope_ref.q vs HF", hf_q, out_q, *tol)
    assert_close("apply_rope_ref.k vs HF", hf_k, out_k, *tol)


# ---- graph_mode: the compiled kernel inlines into an outer fullgraph compile -------------------------------


@pytest.mark.slow
def test_cpu_rope_inside_fullgraph_compile() -> None:
    q, k, cos, sin = _inputs((4, 1, 16, 2, 256, 64), torch.float32, "cpu", seed=3)
    compiled = torch.compile(rope.apply_rope_cpu, fullgraph=True, dynamic=False)
    ref_q, ref_k = rope.apply_rope_ref(q, k, cos, sin)
    out_q, out_k = compiled(q, k, cos, sin)
    assert_close("compiled apply_rope_cpu.q", ref_q, out_q, *TOL[torch.float32])
    assert_close("compiled apply_rope_cpu.k", ref_k, out_k, *TOL[torch.float32])
