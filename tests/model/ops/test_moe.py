"""MoE routing and routed experts: fast paths and the NPU op chain against the HF-eager reference."""

from __future__ import annotations

import pytest
import torch
from _compare import assert_close, device_for, impl_param

from model.ops import moe
from model.ops.moe import (
    EXPERTS_DECODE,
    EXPERTS_PREFILL,
    ROUTE,
    _experts_via_routing_ops,
    _route_via_gating_op,
    experts_gathered_cpu,
    experts_gathered_graph,
    experts_grouped_cpu,
    experts_ref,
    grouped_matmul_ref,
    moe_finalize_routing_ref,
    moe_gating_top_k_softmax_ref,
    moe_init_routing_v2_ref,
    route_ref,
    swiglu_ref,
)

# (atol, rtol). fp32: only the summation order over experts differs (~1e-7 observed). bf16: the reference
# rounds after every expert's index_add (up to K roundings per element) while the gathered path rounds once,
# and the NPU-chain references compute in fp32; outputs are O(1), so a few bf16 ulps (2^-8 relative each).
TOL = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (3e-2, 3e-2)}
DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["fp32", "bf16"]


def make_experts(E: int, H: int, I: int, dtype: torch.dtype, merged: bool, seed: int = 0
                 ) -> tuple[list[torch.Tensor], torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    gate_up = (torch.randn(E, 2 * I, H, generator=gen) * H ** -0.5).to(dtype)
    down = (torch.randn(E, H, I, generator=gen) * I ** -0.5).to(dtype)
    return ([gate_up] if merged else list(gate_up.split(I, dim=1))), down


def make_routing(N: int, E: int, K: int, H: int, dtype: torch.dtype, hit: int | None = None, seed: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [N, H], routing weights [N, K] and ids [N, K]; with `hit`, only experts [0, hit) can be chosen."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(N, H, generator=gen).to(dtype)
    logits = torch.randn(N, E, generator=gen)
    if hit is not None:
        logits[:, hit:] = float("-inf")  # experts never hit
    weights, ids = route_ref(logits.to(dtype), K)
    return x, weights, ids


def case_id(N: int, K: int, E: int, H: int, I: int, hit: int | None = None) -> str:
    return f"N{N}-K{K}-E{E}-H{H}-I{I}" + (f"-hit{hit}" if hit else "")


# (N, K, E, H, I, hit): N = 1 (decode), top-1, top-8, top-k = E, experts never hit, a prefill-sized N.
CASES = [
    (1, 1, 8, 32, 16, None),
    (1, 4, 16, 64, 32, None),
    (37, 8, 8, 32, 16, None),
    (64, 2, 16, 64, 32, 5),
    (5, 8, 32, 32, 16, None),
    (300, 4, 16, 64, 32, None),
]
CASE_IDS = [case_id(*c) for c in CASES]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("top_k,E", [(1, 8), (8, 16), (8, 8)], ids=["K1-E8", "K8-E16", "K8-E8"])
def test_route_npu_chain_matches_ref(top_k: int, E: int, dtype: torch.dtype) -> None:
    logits = torch.randn(33, E, generator=torch.Generator().manual_seed(3)).to(dtype)
    w_ref, ids_ref = route_ref(logits, top_k)
    assert w_ref.dtype == dtype and ids_ref.dtype == torch.int64 and ids_ref.shape == (33, top_k)
    assert_close("route weights sum", torch.ones(33), w_ref.float().sum(-1), *TOL[dtype])
    w, ids = _route_via_gating_op(logits, top_k, moe_gating_top_k_softmax_ref)
    assert torch.equal(ids, ids_ref)
    assert_close("route weights", w_ref, w, *TOL[torch.float32])


@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fast_experts_match_ref(case: tuple, dtype: torch.dtype, merged: bool) -> None:
    N, K, E, H, I, hit = case
    gate_up, down = make_experts(E, H, I, dtype, merged)
    x, w, ids = make_routing(N, E, K, H, dtype, hit)
    ref = experts_ref(x, ids, w, gate_up, down)
    assert ref.dtype == dtype and ref.shape == (N, H)
    for impl in (experts_grouped_cpu, experts_gathered_cpu, experts_gathered_graph):
        out = impl(x, ids, w, gate_up, down)
        assert out.dtype == dtype
        assert_close(impl.__name__, ref, out, *TOL[dtype])


@pytest.mark.parametrize("weights_left", [False, True], ids=["tokens-left", "weights-left"])
@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_both_gate_up_gemm_forms_match_ref(case: tuple, dtype: torch.dtype, merged: bool,
                                           weights_left: bool) -> None:
    N, K, E, H, I, hit = case
    gate_up, down = make_experts(E, H, I, dtype, merged)
    x, w, ids = make_routing(N, E, K, H, dtype, hit)
    out = moe._experts_sorted_grouped_mm(x, ids, w, gate_up, down, weights_left=weights_left)
    assert out.dtype == dtype
    assert_close("sorted grouped mm", experts_ref(x, ids, w, gate_up, down), out, *TOL[dtype])


@pytest.mark.parametrize("tokens,expected", [(95, False), (96, True), (384, True), (385, False)])
def test_grouped_cpu_takes_weights_left_form_within_its_row_range(tokens: int, expected: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # E = 32, K = 4: mean rows per expert = tokens / 8, so 96 and 384 tokens sit on the edges of [12, 48].
    assert moe.WEIGHT_LEFT_ROWS == (12, 48)
    seen = {}
    monkeypatch.setattr(moe, "_experts_sorted_grouped_mm", lambda *a, weights_left: seen.setdefault("wl", weights_left))
    gate_up, down = make_experts(32, 8, 4, torch.float32, merged=True)
    x, w, ids = make_routing(tokens, 32, 4, 8, torch.float32)
    experts_grouped_cpu(x, ids, w, gate_up, down)
    assert seen["wl"] is expected


@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES[1:4], ids=CASE_IDS[1:4])
def test_npu_chain_on_op_references_matches_ref(case: tuple, dtype: torch.dtype, merged: bool) -> None:
    """init_routing_v2 -> grouped_matmul -> swiglu -> grouped_matmul -> finalize_routing(drop_pad_mode=2), each
    op replaced by its reference, equals the expert loop: validates the NPU call sequence's semantics."""
    N, K, E, H, I, hit = case
    gate_up, down = make_experts(E, H, I, dtype, merged)
    x, w, ids = make_routing(N, E, K, H, dtype, hit)
    ref = experts_ref(x, ids, w, gate_up, down)
    out = _experts_via_routing_ops(
        x, ids, w, gate_up, down, init_routing=moe_init_routing_v2_ref, grouped_matmul=grouped_matmul_ref,
        swiglu=swiglu_ref, finalize_routing=moe_finalize_routing_ref,
    )
    assert out.dtype == dtype
    assert_close("npu chain", ref, out, *TOL[dtype])


def test_init_routing_and_finalize_refs_by_hand() -> None:
    x = torch.arange(3 * 2, dtype=torch.float32).view(3, 2)
    ids = torch.tensor([[2, 0], [0, 3], [2, 1]], dtype=torch.int32)   # N=3, K=2, E=4
    ex, row_idx, counts, scale = moe_init_routing_v2_ref(
        x, ids, active_num=6, expert_num=4, expert_tokens_num_type=1, expert_tokens_num_flag=True,
        active_expert_range=[0, 4])
    # Stable sort of the flat ids [2, 0, 0, 3, 2, 1] by expert: pairs 1, 2 (e0), 5 (e1), 0, 4 (e2), 3 (e3).
    assert row_idx.tolist() == [3, 0, 1, 5, 4, 2]
    assert counts.tolist() == [2, 1, 2, 1] and counts.dtype == torch.int64 and scale is None
    assert torch.equal(ex[row_idx.long()], x.repeat_interleave(2, dim=0))
    _, _, cumsum, _ = moe_init_routing_v2_ref(x, ids, expert_num=4, expert_tokens_num_type=0,
                                              expert_tokens_num_flag=True)
    assert cumsum.tolist() == [2, 3, 5, 6]
    # Experts outside active_expert_range are dropped: index -1, not counted.
    _, row_idx_r, counts_r, _ = moe_init_routing_v2_ref(x, ids, expert_num=4, expert_tokens_num_type=1,
                                                        expert_tokens_num_flag=True, active_expert_range=[1, 3])
    assert counts_r.tolist() == [1, 2] and row_idx_r.tolist() == [1, -1, -1, -1, 2, 0]
    # finalize: mode 2 indexes row-major (n*K+k), mode 0 column-major (k*N+n); both give the same sum.
    scales = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75]])
    out2 = moe_finalize_routing_ref(ex, None, None, None, scales, row_idx, ids, drop_pad_mode=2)
    col = row_idx.view(3, 2).t().reshape(-1)
    out0 = moe_finalize_routing_ref(ex, None, None, None, scales, col, ids, drop_pad_mode=0)
    expected = x * scales.sum(-1, keepdim=True)
    assert_close("finalize mode 2", expected, out2, *TOL[torch.float32])
    assert_close("finalize mode 0", expected, out0, *TOL[torch.float32])


def test_finalize_ref_bias_needs_each_rows_expert() -> None:
    rows = torch.ones(2, 2)  # N=1, K=2: one token's two routed rows
    scales, src = torch.tensor([[0.5, 0.5]]), torch.tensor([0, 1])
    bias = torch.tensor([[1.0, 1.0], [3.0, 3.0]])  # per expert
    with pytest.raises(ValueError, match="`bias` needs `export_for_source_row`"):
        moe_finalize_routing_ref(rows, None, None, bias, scales, src, None, drop_pad_mode=2)
    # near miss: with each row's expert the bias is added per row, before scaling
    experts = torch.tensor([[0, 1]])
    out = moe_finalize_routing_ref(rows, None, None, bias, scales, src, experts, drop_pad_mode=2)
    assert out.tolist() == [[3.0, 3.0]]  # 0.5 * (1 + 1) + 0.5 * (1 + 3)


def test_grouped_matmul_ref_count_and_cumsum_agree() -> None:
    gen = torch.Generator().manual_seed(5)
    a, w = torch.randn(10, 6, generator=gen), torch.randn(4, 6, 3, generator=gen)
    counts = torch.tensor([3, 0, 5, 2])
    y1 = grouped_matmul_ref([a], [w], group_list=counts, split_item=3, group_type=0, group_list_type=1)[0]
    y0 = grouped_matmul_ref([a], [w], group_list=counts.cumsum(0), split_item=3, group_type=0,
                            group_list_type=0)[0]
    expected = torch.cat([a[:3] @ w[0], a[3:8] @ w[2], a[8:] @ w[3]])
    assert_close("gmm counts", expected, y1, *TOL[torch.float32])
    assert_close("gmm cumsum", expected, y0, *TOL[torch.float32])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_experts_ref_matches_hf_eager(dtype: torch.dtype) -> None:
    """experts_ref follows HF's eager expert loop, dtype handling of the routing weights included."""
    pytest.importorskip("transformers")
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeExperts

    N, K, E, H, I = 40, 4, 16, 64, 32
    config = Qwen3_5MoeTextConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=K)
    config._experts_implementation = "eager"
    hf = Qwen3_5MoeExperts(config)
    gate_up, down = make_experts(E, H, I, dtype, merged=True)
    with torch.no_grad():
        hf.gate_up_proj.copy_(gate_up[0])
        hf.down_proj.copy_(down)
    hf.to(dtype)
    x, w, ids = make_routing(N, E, K, H, dtype)
    with torch.no_grad():
        expected = hf(x, ids, w)
    out = experts_ref(x, ids, w, gate_up, down)
    assert_close("experts_ref vs HF eager", expected, out, 1e-6, 1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("impl", [experts_gathered_cpu, experts_gathered_graph], ids=lambda f: f.__name__)
def test_gathered_under_compile_fullgraph(impl: object) -> None:
    N, K, E, H, I = 2, 4, 16, 64, 32
    gate_up, down = make_experts(E, H, I, torch.float32, merged=True)
    x, w, ids = make_routing(N, E, K, H, torch.float32)
    compiled = torch.compile(impl, fullgraph=True, dynamic=False)
    assert_close(f"compiled {impl.__name__}", experts_ref(x, ids, w, gate_up, down),
                 compiled(x, ids, w, gate_up, down), *TOL[torch.float32])


def test_tables_cover_devices() -> None:
    for table in (ROUTE, EXPERTS_PREFILL, EXPERTS_DECODE):
        assert {"ref", "cpu", "cuda", "npu"} <= set(table)


def test_experts_cuda_bf16() -> None:
    """The CUDA prefill experts (bf16 grouped GEMM): on a GPU when there is one, else the same torch calls on
    CPU tensors (the composition, not the CUDA kernel)."""
    device = device_for("cuda")
    N, K, E, H, I = 300, 4, 16, 64, 32
    gate_up, down = make_experts(E, H, I, torch.bfloat16, merged=True)
    x, w, ids = make_routing(N, E, K, H, torch.bfloat16)
    ref = experts_ref(x, ids, w, gate_up, down)
    out = EXPERTS_PREFILL["cuda"](x.to(device), ids.to(device), w.to(device), [t.to(device) for t in gate_up],
                                  down.to(device))
    assert_close("experts_cuda", ref, out.cpu(), *TOL[torch.bfloat16])


@pytest.mark.parametrize("impl", [impl_param("npu")])
def test_route_and_experts_npu(impl: str) -> None:
    """ROUTE / EXPERTS_PREFILL["npu"] against the references, on an Ascend device when there is one.

    Without one, under the NPU emulator: that checks our calls (schemas, dtypes, layouts, the routing ->
    grouped matmul -> swiglu -> finalize chain) against the ops' documented semantics, not the kernels."""
    device = device_for(impl)
    N, K, E, H, I = 64, 4, 16, 64, 32
    gate_up, down = make_experts(E, H, I, torch.bfloat16, merged=True)
    x, w, ids = make_routing(N, E, K, H, torch.bfloat16)
    logits = torch.randn(N, E, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    w_npu, ids_npu = ROUTE[impl](logits.to(device), K)
    w_ref, ids_ref = route_ref(logits, K)
    assert torch.equal(ids_npu.cpu(), ids_ref)
    assert_close("route_npu", w_ref, w_npu.cpu(), *TOL[torch.bfloat16])
    ref = experts_ref(x, ids, w, gate_up, down)
    out = EXPERTS_PREFILL[impl](x.to(device), ids.to(device), w.to(device), [t.to(device) for t in gate_up],
                                down.to(device))
    assert_close("experts_npu", ref, out.cpu(), *TOL[torch.bfloat16])
