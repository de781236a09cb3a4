"""Gated delta rule: the chunked, decode and device paths against the token-recurrence reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_close, device_for, impl_param
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from model.ops import gdn
from model.ops.gdn import (
    GDR_DECODE,
    GDR_PREFILL,
    _gdr_decode_bnvd,
    _gdr_prefill_tnd,
    chunk_gated_delta_rule_ref,
    gdr_decode_ref,
    gdr_prefill_chunked,
    gdr_prefill_cpu,
    gdr_prefill_ref,
    recurrent_gated_delta_rule_ref,
)

# (atol, rtol). fp32: the chunked form reorders sums and goes through a triangular solve, ~1e-6 observed.
# bf16 inputs: both sides compute in fp32 from the same bf16 values, so only the final bf16 rounding of o
# differs (1 ulp = 2^-8 relative). bf16 via the NPU wrappers: q/k/v/beta and the state are rounded to bf16
# on the way in and the state again on the way out (a few ulps of the state's magnitude).
TOL = {torch.float32: (2e-5, 1e-4), torch.bfloat16: (1e-2, 1e-2)}
TOL_NPU_BF16 = (3e-2, 3e-2)


def make_inputs(B: int, T: int, Hk: int, Hv: int, Dk: int, Dv: int, dtype: torch.dtype = torch.float32,
                seed: int = 0) -> dict[str, torch.Tensor]:
    """Inputs in the ranges the model produces: L2-normalised q/k, g = -exp(A) * softplus(a) <= 0 (some below
    -1, as Qwen3.5 can produce), beta = sigmoid(b)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    q = F.normalize(randn(B, T, Hk, Dk), dim=-1).to(dtype)
    k = F.normalize(randn(B, T, Hk, Dk), dim=-1).to(dtype)
    v = randn(B, T, Hv, Dv).to(dtype)
    g = -torch.exp(randn(Hv) * 0.5) * F.softplus(randn(B, T, Hv))
    beta = torch.sigmoid(randn(B, T, Hv)).to(dtype)
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta}


def case_id(B: int, T: int, Hk: int, Hv: int, Dk: int, Dv: int) -> str:
    return f"B{B}-T{T}-Hk{Hk}-Hv{Hv}-Dk{Dk}-Dv{Dv}"


# (B, T, Hk, Hv, Dk, Dv, seq_lens or None): T = 1, exactly one chunk, T not a multiple of 64,
# GQA ratios 1/2/4, ragged rows including a length-1 row.
PREFILL_CASES = [
    (1, 1, 2, 2, 16, 16, None),
    (1, 64, 2, 4, 16, 16, None),
    (2, 130, 4, 8, 32, 16, None),
    (3, 70, 1, 4, 16, 32, [70, 1, 33]),
    (2, 129, 2, 2, 32, 32, [129, 64]),
    (4, 150, 2, 8, 16, 16, [7, 150, 1, 128]),
]
PREFILL_IDS = [case_id(*c[:6]) + ("-ragged" if c[6] else "") for c in PREFILL_CASES]


def valid_mask(B: int, T: int, seq_lens: torch.Tensor | None) -> torch.Tensor:
    if seq_lens is None:
        return torch.ones(B, T, dtype=torch.bool)
    return torch.arange(T)[None, :] < seq_lens[:, None]


def check_prefill(name: str, ref: tuple, out: tuple, mask: torch.Tensor, tol: tuple[float, float]) -> None:
    """Outputs compared at valid positions (padded ones are unspecified but must be finite), final state whole."""
    (o_ref, s_ref), (o, s) = ref, out
    assert o.dtype == o_ref.dtype and s.dtype == torch.float32
    assert torch.isfinite(o.float()).all(), f"{name}: non-finite output at a padded position"
    assert_close(f"{name} o", o_ref[mask], o[mask], *tol)
    assert_close(f"{name} final_state", s_ref, s, *tol)


@pytest.mark.parametrize("impl", [gdr_prefill_cpu, gdr_prefill_chunked], ids=lambda f: f.__name__)
@pytest.mark.parametrize("with_state", [False, True], ids=["h0None", "h0"])
@pytest.mark.parametrize("case", PREFILL_CASES, ids=PREFILL_IDS)
def test_prefill_cpu_matches_recurrence(case: tuple, with_state: bool, impl) -> None:
    """The compiled-terms CPU path and the eager chunked path (CUDA without fla) against the recurrence."""
    B, T, Hk, Hv, Dk, Dv, lens = case
    x = make_inputs(B, T, Hk, Hv, Dk, Dv)
    seq_lens = None if lens is None else torch.tensor(lens)
    h0 = torch.randn(B, Hv, Dk, Dv, generator=torch.Generator().manual_seed(1)) if with_state else None
    ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, initial_state=h0, seq_lens=seq_lens)
    out = impl(**x, scale=Dk ** -0.5, initial_state=h0, seq_lens=seq_lens)
    check_prefill(impl.__name__, ref, out, valid_mask(B, T, seq_lens), TOL[torch.float32])
    if h0 is not None:
        assert torch.equal(h0, torch.randn(B, Hv, Dk, Dv, generator=torch.Generator().manual_seed(1))), \
            "initial_state must not be modified"


@pytest.mark.parametrize("case", PREFILL_CASES[2:4], ids=PREFILL_IDS[2:4])
def test_prefill_cpu_bf16(case: tuple) -> None:
    B, T, Hk, Hv, Dk, Dv, lens = case
    x = make_inputs(B, T, Hk, Hv, Dk, Dv, dtype=torch.bfloat16)
    seq_lens = None if lens is None else torch.tensor(lens)
    ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, seq_lens=seq_lens)
    out = gdr_prefill_cpu(**x, scale=Dk ** -0.5, seq_lens=seq_lens)
    check_prefill("gdr_prefill_cpu bf16", ref, out, valid_mask(B, T, seq_lens), TOL[torch.bfloat16])


@settings(max_examples=12, deadline=None, derandomize=True)
@given(B=st.integers(1, 3), T=st.integers(1, 150), Hk=st.sampled_from([1, 2]), r=st.sampled_from([1, 2, 4]),
       Dk=st.sampled_from([8, 16]), Dv=st.sampled_from([8, 24]), data=st.data())
def test_prefill_cpu_random_shapes(B: int, T: int, Hk: int, r: int, Dk: int, Dv: int, data: st.DataObject) -> None:
    lens = data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B), label="seq_lens")
    seq_lens = torch.tensor(lens)
    x = make_inputs(B, T, Hk, Hk * r, Dk, Dv, seed=T)
    h0 = torch.randn(B, Hk * r, Dk, Dv)
    ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, initial_state=h0, seq_lens=seq_lens)
    out = gdr_prefill_cpu(**x, scale=Dk ** -0.5, initial_state=h0, seq_lens=seq_lens)
    check_prefill(case_id(B, T, Hk, Hk * r, Dk, Dv), ref, out, valid_mask(B, T, seq_lens), TOL[torch.float32])


@pytest.mark.parametrize("chunks_per_slab", [1, 2])
def test_prefill_cpu_slabs(chunks_per_slab: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks processed in several slabs (the last one partial) carry the state across slab boundaries."""
    B, T, Hk, Hv, Dk, Dv = 2, 300, 2, 4, 16, 16      # 10 chunks of 32
    monkeypatch.setattr(gdn, "SLAB_ELEMS", chunks_per_slab * B * Hv * gdn.chunk_size(Dk) ** 2)
    x = make_inputs(B, T, Hk, Hv, Dk, Dv)
    seq_lens = torch.tensor([300, 129])
    h0 = torch.randn(B, Hv, Dk, Dv)
    ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, initial_state=h0, seq_lens=seq_lens)
    out = gdr_prefill_cpu(**x, scale=Dk ** -0.5, initial_state=h0, seq_lens=seq_lens)
    check_prefill(f"gdr_prefill_cpu {chunks_per_slab} chunk(s) per slab", ref, out, valid_mask(B, T, seq_lens),
                  TOL[torch.float32])


def test_prefill_cpu_fast_decay() -> None:
    """Log-decays of -5..-30 per token (fast-forgetting heads): the chunked path flushes decay factors below
    e^-30 to zero to stay out of fp32 subnormals; the result must still match the recurrence."""
    B, T, Hk, Hv, Dk, Dv = 2, 100, 2, 4, 16, 16
    x = make_inputs(B, T, Hk, Hv, Dk, Dv)
    x["g"] = -5.0 - 25.0 * torch.rand(B, T, Hv, generator=torch.Generator().manual_seed(7))
    h0 = torch.randn(B, Hv, Dk, Dv)
    ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, initial_state=h0)
    out = gdr_prefill_cpu(**x, scale=Dk ** -0.5, initial_state=h0)
    check_prefill("gdr_prefill_cpu fast decay", ref, out, valid_mask(B, T, None), TOL[torch.float32])


class _SubnormalCounter(TorchDispatchMode):
    """Counts fp32 subnormal values in the outputs of every computing aten op run under it (views and
    allocations hold whatever memory they alias, so they are skipped)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or "empty" in str(func):
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                n = int(((t != 0) & (t.abs() < torch.finfo(torch.float32).tiny)).sum())
                if n:
                    self.found[str(func)] = self.found.get(str(func), 0) + n
        return out


@pytest.mark.parametrize("Dk", [32, 64])
def test_prefill_cpu_makes_no_subnormals(Dk: int) -> None:
    """Qwen3.5-like decays (g ~ -U(0, 3) per token: hundreds of e-folds per chunk) must not drive any
    intermediate into the fp32 subnormal range, where x86 matmuls and the triangular solve run 3-4x slower
    (the OpenMP workers do not inherit flush-to-zero). The decayed W used to be solved with e^G inside."""
    B, T, Hk, Hv = 1, 256, 2, 4
    x = make_inputs(B, T, Hk, Hv, Dk, Dk)
    x["g"] = -3.0 * torch.rand(B, T, Hv, generator=torch.Generator().manual_seed(3))
    counter = _SubnormalCounter()
    with counter:  # the eager path: its ops are what the compiled chunk terms fuse
        gdr_prefill_chunked(**x, scale=Dk ** -0.5)
    assert counter.found == {}, f"subnormal fp32 outputs per op: {counter.found}"


def test_ragged_row_equals_its_own_unpadded_run() -> None:
    """The final state of a padded row is the state of that row run alone at its true length."""
    B, T, Hk, Hv, Dk, Dv = 2, 100, 2, 4, 16, 16
    x = make_inputs(B, T, Hk, Hv, Dk, Dv)
    seq_lens = torch.tensor([100, 37])
    for impl in (gdr_prefill_ref, gdr_prefill_cpu):
        _, s = impl(**x, scale=0.25, seq_lens=seq_lens)
        row = {n: t[1:2, :37] for n, t in x.items()}
        o_alone, s_alone = impl(**row, scale=0.25)
        assert_close(f"{impl.__name__} ragged state", s_alone[0], s[1], *TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(2, 9, 1, 1, 16, 8), (2, 9, 2, 4, 16, 8), (1, 5, 1, 4, 32, 16)],
                         ids=lambda s: case_id(*s))
def test_decode_steps_equal_prefill(shape: tuple, dtype: torch.dtype) -> None:
    """gdr_decode_ref applied token by token reproduces gdr_prefill_ref's outputs and final state."""
    B, T, Hk, Hv, Dk, Dv = shape
    x = make_inputs(B, T, Hk, Hv, Dk, Dv, dtype=dtype)
    h0 = torch.randn(B, Hv, Dk, Dv)
    o_ref, s_ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, initial_state=h0)
    state = h0.clone()
    outs = [gdr_decode_ref(*(x[n][:, t] for n in ("q", "k", "v", "g", "beta")), Dk ** -0.5, state)
            for t in range(T)]
    o = torch.stack(outs, dim=1)
    assert o.dtype == dtype and state.dtype == torch.float32
    assert_close("decode o", o_ref, o, *TOL[dtype])
    assert_close("decode state", s_ref, state, *TOL[torch.float32])


@pytest.mark.slow
def test_decode_under_compile_fullgraph() -> None:
    B, Hk, Hv, Dk, Dv = 2, 2, 4, 16, 8
    x = make_inputs(B, 1, Hk, Hv, Dk, Dv)
    args = [x[n][:, 0] for n in ("q", "k", "v", "g", "beta")]
    state0 = torch.randn(B, Hv, Dk, Dv)
    eager_state, compiled_state = state0.clone(), state0.clone()
    o_eager = gdr_decode_ref(*args, 0.25, eager_state)
    compiled = torch.compile(gdr_decode_ref, fullgraph=True, dynamic=False)
    o_comp = compiled(*args, 0.25, compiled_state)
    assert_close("compiled decode o", o_eager, o_comp, *TOL[torch.float32])
    assert_close("compiled decode state (in place)", eager_state, compiled_state, *TOL[torch.float32])


# ---- NPU wrappers: their packing, layouts and dtypes, run on the pure-torch references of the torch_npu ops ----


@pytest.mark.parametrize("with_state", [False, True], ids=["h0None", "h0"])
@pytest.mark.parametrize("case", PREFILL_CASES[3::2], ids=PREFILL_IDS[3::2])
def test_npu_prefill_wrapper_on_op_reference(case: tuple, with_state: bool) -> None:
    B, T, Hk, Hv, Dk, Dv, lens = case
    x = make_inputs(B, T, Hk, Hv, Dk, Dv)
    seq_lens = None if lens is None else torch.tensor(lens)
    h0 = torch.randn(B, Hv, Dk, Dv) if with_state else None
    ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, initial_state=h0, seq_lens=seq_lens)
    out = _gdr_prefill_tnd(*x.values(), Dk ** -0.5, h0, seq_lens, chunk_gated_delta_rule_ref)
    check_prefill("npu prefill wrapper", ref, out, valid_mask(B, T, seq_lens), TOL_NPU_BF16)


@pytest.mark.parametrize("shape", [(3, 1, 1, 2, 16, 8), (2, 1, 2, 8, 32, 16)], ids=lambda s: case_id(*s))
def test_npu_decode_wrapper_on_op_reference(shape: tuple) -> None:
    B, _, Hk, Hv, Dk, Dv = shape
    x = make_inputs(B, 1, Hk, Hv, Dk, Dv)
    args = [x[n][:, 0] for n in ("q", "k", "v", "g", "beta")]
    state0 = torch.randn(B, Hv, Dk, Dv)
    ref_state, npu_state = state0.clone(), state0.clone()
    o_ref = gdr_decode_ref(*args, Dk ** -0.5, ref_state)
    o = _gdr_decode_bnvd(*args, Dk ** -0.5, npu_state, recurrent_gated_delta_rule_ref)
    assert_close("npu decode wrapper o", o_ref, o, *TOL_NPU_BF16)
    assert_close("npu decode wrapper state", ref_state, npu_state, *TOL_NPU_BF16)


def test_tables_cover_devices() -> None:
    assert set(GDR_DECODE) == {"ref", "cpu", "cuda", "npu"}
    # plan variants: CUDA without fla, CPU without a C++ compiler
    assert set(GDR_PREFILL) == set(GDR_DECODE) | {"cuda_torch", "cpu_eager"}


# ---- real device (the fla kernel is checked on a GPU by benchmarks/cuda_check.py) ----


@pytest.mark.parametrize("impl", [impl_param("npu")])
def test_prefill_and_decode_npu(impl: str) -> None:
    """GDR_PREFILL / GDR_DECODE["npu"] against the references, on an Ascend device when there is one.

    Without one, under the NPU emulator: that checks our calls (schemas, packing, layouts, dtypes, the
    documented Dk = Dv = 128 of the chunk op) against the ops' documented semantics, not the kernels."""
    device = device_for(impl)
    B, T, Hk, Hv, Dk, Dv = 2, 130, 2, 4, 128, 128
    x = make_inputs(B, T, Hk, Hv, Dk, Dv, dtype=torch.bfloat16)
    seq_lens = torch.tensor([130, 41])
    ref = gdr_prefill_ref(**x, scale=Dk ** -0.5, seq_lens=seq_lens)
    out = GDR_PREFILL[impl](**{n: t.to(device) for n, t in x.items()}, scale=Dk ** -0.5,
                           seq_lens=seq_lens.to(device))
    check_prefill("gdr_prefill_npu", ref, tuple(t.cpu() for t in out), valid_mask(B, T, seq_lens), TOL_NPU_BF16)
    args = [x[n][:, 0] for n in ("q", "k", "v", "g", "beta")]
    state = torch.randn(B, Hv, Dk, Dv, generator=torch.Generator().manual_seed(4))
    npu_state = state.to(device, copy=True)
    o_ref = gdr_decode_ref(*args, Dk ** -0.5, state)
    o = GDR_DECODE[impl](*(a.to(device) for a in args), Dk ** -0.5, npu_state)
    assert_close("gdr_decode_npu o", o_ref, o.cpu(), *TOL_NPU_BF16)
    assert_close("gdr_decode_npu state", state, npu_state.cpu(), *TOL_NPU_BF16)
