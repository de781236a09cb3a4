"""fused_rmsnorm ops: every implementation against its reference (run first), the references against HF.

Tolerances (implementation vs reference, both from the same inputs):
  fp32: atol = rtol = 1e-5. The reference and F.rms_norm agree bit for bit on CPU; the inductor kernel
        reorders the mean reduction (observed max-abs error ~2e-6 on O(1) outputs).
  bf16: atol = rtol = 1.6e-2, i.e. two bf16 ulps (2^-7 relative each): the reference rounds once from fp32,
        inductor may keep the gated norm's intermediate in fp32, and the CUDA path rounds gamma to bf16.
The references themselves must equal HF's Qwen3_5MoeRMSNorm / Qwen3_5MoeRMSNormGated exactly.

NPU implementations run on an Ascend device when torch_npu has one; otherwise under the NPU emulator (ids
"npu_emulated", marker `npu_emulated`, conftest.py), which checks our call sites' arguments, layouts and op
composition against the emulated ops' documented semantics and rules, not the real kernels' numerics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from _compare import assert_close, device_for, impl_param, strict_recompiles
from hypothesis import given, settings
from hypothesis import strategies as st

from model.ops import norm

EPS = 1e-6
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2)}
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


# NPU implementations run on an Ascend device when there is one, else under the NPU emulator (conftest.py)
IMPLS = [impl_param(i) for i in ("cpu", "cuda", "npu")]


@pytest.fixture(autouse=True, scope="module")
def _compiled_kernels_never_fall_back() -> Iterator[None]:
    with strict_recompiles():
        yield


# (leading dims..., H) plus how the input is laid out in memory.
#   contig: a fresh tensor; rowpad: rows of a wider buffer (row stride > H), like a slice of a merged
#   projection output (the GDN gate z); headchunk: the per-head q half of the interleaved [q_h | gate_h]
#   projection output (HF layout), as q_norm receives it.
DECODE = ((1, 2048), "contig")
ODD = ((2, 7, 769), "contig")
ROWPAD = ((3, 769), "rowpad")
HEADCHUNK = ((2, 3, 4, 256), "headchunk")


def _case_id(case: tuple[tuple[int, ...], str]) -> str:
    shape, layout = case
    letters = {2: "T-H", 3: "B-T-H", 4: "B-T-N-D"}[len(shape)].split("-")
    return "-".join(f"{a}{n}" for a, n in zip(letters, shape)) + f"-{layout}"


def _cases(fp32: list, bf16: list) -> list:
    # Each new size-1 / stride / dtype pattern costs the CPU path one inductor compile (~2 s cold), so every
    # op gets the layouts its callers produce in fp32 and one or two of them again in bf16.
    return ([pytest.param(c, torch.float32, id=f"{_case_id(c)}-fp32") for c in fp32]
            + [pytest.param(c, torch.bfloat16, id=f"{_case_id(c)}-bf16") for c in bf16])


def _make(shape: tuple[int, ...], layout: str, dtype: torch.dtype, device: str, gen: torch.Generator) -> torch.Tensor:
    def randn(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=gen).to(device=device, dtype=dtype)

    *lead, h = shape
    if layout == "contig":
        return randn(*shape)
    if layout == "rowpad":
        return randn(*lead, h + 13)[..., :h]
    if layout == "headchunk":
        return randn(*lead, 2 * h).chunk(2, dim=-1)[0]
    raise ValueError(layout)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _check_unchanged(name: str, before: list[torch.Tensor], after: list[torch.Tensor]) -> None:
    for i, (b, a) in enumerate(zip(before, after)):
        assert torch.equal(b, a), f"{name}: input {i} was modified"


@pytest.mark.parametrize(("case", "dtype"), _cases([DECODE, ODD, ROWPAD, HEADCHUNK], [DECODE, HEADCHUNK]))
@pytest.mark.parametrize("impl", IMPLS)
def test_rms_norm_matches_ref(impl: str, case: tuple[tuple[int, ...], str], dtype: torch.dtype) -> None:
    device = device_for(impl)
    gen = _gen(0)
    x = _make(*case, dtype, device, gen)
    gamma = (1.0 + 0.1 * torch.randn(case[0][-1], generator=gen)).to(device)  # fp32 1 + w, as the layer passes
    inputs = [x.clone(), gamma.clone()]
    ref = norm.rms_norm_ref(x, gamma, EPS)
    out = norm.RMS_NORM[impl](x, gamma, EPS)
    _check_unchanged(impl, inputs, [x, gamma])
    assert out.dtype == dtype and out.shape == x.shape
    assert_close(f"rms_norm_{impl}", ref, out, *TOL[dtype])


@pytest.mark.parametrize(("case", "dtype"), _cases([DECODE, ODD], [DECODE, ODD]))
@pytest.mark.parametrize("impl", IMPLS)
def test_add_rms_norm_matches_ref(impl: str, case: tuple[tuple[int, ...], str], dtype: torch.dtype) -> None:
    device = device_for(impl)
    gen = _gen(1)
    x = _make(*case, dtype, device, gen)
    residual = 4.0 * _make(*case, dtype, device, gen)  # the residual stream dominates, as in a real model
    gamma = (1.0 + 0.1 * torch.randn(case[0][-1], generator=gen)).to(device)
    inputs = [x.clone(), residual.clone(), gamma.clone()]
    ref_y, ref_res = norm.add_rms_norm_ref(x, residual, gamma, EPS)
    out_y, out_res = norm.ADD_RMS_NORM[impl](x, residual, gamma, EPS)
    _check_unchanged(impl, inputs, [x, residual, gamma])
    assert out_y.dtype == dtype and out_res.dtype == dtype
    assert_close(f"add_rms_norm_{impl}.residual", ref_res, out_res, *TOL[dtype])
    assert_close(f"add_rms_norm_{impl}.y", ref_y, out_y, *TOL[dtype])


@pytest.mark.parametrize(("case", "dtype"), _cases([DECODE, ODD, ROWPAD], [ROWPAD]))
@pytest.mark.parametrize("impl", IMPLS)
def test_gated_rms_norm_matches_ref(impl: str, case: tuple[tuple[int, ...], str], dtype: torch.dtype) -> None:
    device = device_for(impl)
    gen = _gen(2)
    x = _make(*case, dtype, device, gen)
    gate = _make(*case, dtype, device, gen)
    weight = (1.0 + 0.1 * torch.randn(case[0][-1], generator=gen)).to(device=device, dtype=dtype)  # plain w
    inputs = [x.clone(), gate.clone(), weight.clone()]
    ref = norm.gated_rms_norm_ref(x, gate, weight, EPS)
    out = norm.GATED_RMS_NORM[impl](x, gate, weight, EPS)
    _check_unchanged(impl, inputs, [x, gate, weight])
    assert out.dtype == dtype and out.shape == x.shape
    assert_close(f"gated_rms_norm_{impl}", ref, out, *TOL[dtype])


@settings(max_examples=15, deadline=None, derandomize=True)
@given(rows=st.integers(1, 48), h=st.integers(2, 1100))
def test_cpu_norms_random_shapes(rows: int, h: int) -> None:
    """The compiled CPU kernels vs the references over random row counts and hidden sizes (fp32)."""
    gen = _gen(rows * 1103 + h)
    x, res, gate = (torch.randn(rows, h, generator=gen) for _ in range(3))
    gamma = 1.0 + 0.1 * torch.randn(h, generator=gen)
    assert_close("rms_norm_cpu (random)", norm.rms_norm_ref(x, gamma, EPS), norm.rms_norm_cpu(x, gamma, EPS),
                 *TOL[torch.float32])
    for name, a, b in zip(("y", "residual"), norm.add_rms_norm_ref(x, res, gamma, EPS),
                          norm.add_rms_norm_cpu(x, res, gamma, EPS)):
        assert_close(f"add_rms_norm_cpu.{name} (random)", a, b, *TOL[torch.float32])
    assert_close("gated_rms_norm_cpu (random)", norm.gated_rms_norm_ref(x, gate, gamma, EPS),
                 norm.gated_rms_norm_cpu(x, gate, gamma, EPS), *TOL[torch.float32])


def test_tables_cover_every_device() -> None:
    for table in (norm.RMS_NORM, norm.ADD_RMS_NORM, norm.GATED_RMS_NORM):
        assert set(table) == {"ref", "cpu", "cuda", "npu"}
        assert all(callable(f) for f in table.values())


# ---- the references are HF's modules -------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf() -> object:
    return pytest.importorskip("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_ref_equals_hf(hf: object, dtype: torch.dtype) -> None:
    gen = _gen(3)
    h = 769
    module = hf.Qwen3_5MoeRMSNorm(h, eps=EPS)  # type: ignore[attr-defined]
    with torch.no_grad():
        module.weight.copy_(0.1 * torch.randn(h, generator=gen))  # nonzero so 1 + w matters
    module = module.to(dtype)
    x = torch.randn(3, 5, h, generator=gen).to(dtype)
    gamma = 1.0 + module.weight.float()  # the layer's precomputed effective weight
    with torch.no_grad():
        expected = module(x)
    assert_close("rms_norm_ref vs HF", expected, norm.rms_norm_ref(x, gamma, EPS), 0.0, 0.0)
    y, res = norm.add_rms_norm_ref(x, 2.0 * x, gamma, EPS)
    with torch.no_grad():
        assert_close("add_rms_norm_ref vs HF", module(2.0 * x + x), y, 0.0, 0.0)
    assert torch.equal(res, 2.0 * x + x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_rms_norm_ref_equals_hf(hf: object, dtype: torch.dtype) -> None:
    gen = _gen(4)
    dv = 96
    module = hf.Qwen3_5MoeRMSNormGated(dv, eps=EPS)  # type: ignore[attr-defined]
    with torch.no_grad():
        module.weight.copy_(1.0 + 0.1 * torch.randn(dv, generator=gen))
    module = module.to(dtype)
    x = torch.randn(2, 3, 4, dv, generator=gen).to(dtype)
    gate = torch.randn(2, 3, 4, dv, generator=gen).to(dtype)
    with torch.no_grad():
        expected = module(x, gate)
    out = norm.gated_rms_norm_ref(x, gate, module.weight.detach(), EPS)
    assert_close("gated_rms_norm_ref vs HF", expected, out, 0.0, 0.0)


# ---- inside a compiled graph (graph_mode) the CPU kernels inline ----------------------------------------


@pytest.mark.slow
def test_cpu_norms_inside_fullgraph_compile() -> None:
    gen = _gen(5)
    x = torch.randn(4, 1, 64, generator=gen)
    res = torch.randn(4, 1, 64, generator=gen)
    gate = torch.randn(4, 1, 64, generator=gen)
    gamma = 1.0 + 0.1 * torch.randn(64, generator=gen)

    def step(x: torch.Tensor, res: torch.Tensor, gate: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, new_res = norm.add_rms_norm_cpu(x, res, gamma, EPS)
        return norm.rms_norm_cpu(y, gamma, EPS), new_res, norm.gated_rms_norm_cpu(y, gate, gamma, EPS)

    fns: list[Callable[..., tuple[torch.Tensor, ...]]] = [step, torch.compile(step, fullgraph=True, dynamic=False)]
    eager, compiled = (f(x, res, gate) for f in fns)
    for name, a, b in zip(("rms_norm", "residual", "gated"), eager, compiled):
        assert_close(f"compiled {name}", a, b, *TOL[torch.float32])
