"""The NPU call sites against the documented rules (docs/npu_rules.md), one test per audit finding, with fake
op callables that record their arguments. No torch_npu: the fakes stand in for it (emulation, CPU only)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
import torch

from model import parallel
from model.ops import attention, comm, graph, norm

pytestmark = pytest.mark.npu_emulated


def _fia_like_query(tag: float, calls: list | None = None):
    """A FIA stand-in: returns (query * tag, None) so the output shows which op ran."""
    def op(query, key, value, **kwargs):
        if calls is not None:
            calls.append({"query": query, "key": key, "value": value, **kwargs})
        return query * tag, None
    return op


class LazyTorchair:
    """Like torch_npu's `_LazyTorchair`: what `import torchair` returns is an object, not a module."""

    def __init__(self, air_v1, air_v2) -> None:
        self.ops = types.SimpleNamespace(npu_fused_infer_attention_score=air_v1,
                                         npu_fused_infer_attention_score_v2=air_v2)


def _air_only_in_ge(tag: float):
    def op(query, key, value, **kwargs):
        # air:: FIA takes Tensor lengths (schema `Tensor? actual_seq_lengths_kv`)
        lens = kwargs.get("actual_seq_lengths_kv", kwargs.get("actual_seq_kvlen"))
        assert isinstance(lens, torch.Tensor)
        return query * tag, None
    return op


def _air_not_in_npugraph_ex(query, key, value, **kwargs):
    raise NotImplementedError("air:: FIA only runs in max-autotune (GE) mode")


def _fake_torch_ops_npu(monkeypatch, calls: list | None = None) -> None:
    """torch.ops.npu's FIA ops as recording stand-ins, and an (empty) torch_npu module to import."""
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch.ops, "npu", types.SimpleNamespace(
        npu_fused_infer_attention_score=_fia_like_query(3.0, calls),
        npu_fused_infer_attention_score_v2=_fia_like_query(3.0, calls)), raising=False)


DECODE = {"npu": attention.attention_decode_npu, "npu_tnd": attention.attention_decode_npu_tnd}


@pytest.fixture
def fake_fia(monkeypatch):
    _fake_torch_ops_npu(monkeypatch)


def _decode_inputs(s: int = 128):
    b, n_q, n_kv, d = 2, 4, 2, 128
    g = torch.Generator().manual_seed(0)
    return (torch.randn(b, 1, n_q, d, generator=g), torch.randn(b, s, n_kv, d, generator=g),
            torch.randn(b, s, n_kv, d, generator=g), torch.tensor([5, 128]), d ** -0.5)


@pytest.mark.parametrize("variant", ["npu", "npu_tnd"])
def test_graph_decode_imports_nothing_inside_the_trace(fake_fia, monkeypatch, variant):
    """Finding 1 (#8, #10): `import torchair` inside the traced decode fails under fullgraph, because
    sys.modules["torchair"] is not a module. The op is bound at build time, so the trace imports nothing."""
    monkeypatch.setitem(sys.modules, "torchair", LazyTorchair(_air_only_in_ge(2.0), _air_only_in_ge(2.0)))
    decode = attention.bind_decode_fia(DECODE[variant], v2=variant == "npu_tnd", ge_graph=True)
    torch._dynamo.reset()
    args = _decode_inputs()
    out = torch.compile(decode, backend="eager", fullgraph=True)(*args)
    torch.testing.assert_close(out, args[0] * 2.0)  # the torchair.ops op ran, with Tensor lengths


def test_the_fake_reproduces_the_in_trace_import_failure(monkeypatch):
    """The premise of the test above (audit Appendix B): importing the proxy inside a fullgraph trace fails."""
    monkeypatch.setitem(sys.modules, "torchair", LazyTorchair(_air_only_in_ge(2.0), _air_only_in_ge(2.0)))

    def decode_importing_inside(x):
        import torchair  # the pattern the audit found
        return torchair.ops.npu_fused_infer_attention_score(x, x, x, actual_seq_lengths_kv=x)[0]

    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(decode_importing_inside, backend="eager", fullgraph=True)(torch.ones(2))


@pytest.mark.parametrize("variant", ["npu", "npu_tnd"])
def test_decode_outside_ge_uses_torch_ops_npu_with_host_lists(monkeypatch, variant):
    """Finding 2 (#8, #10): air:: FIA only runs in GE; outside it torch.ops.npu takes int lists (npugraph_ex
    with fused attention is refused by the plan, test_npu_plan)."""
    calls: list[dict] = []
    _fake_torch_ops_npu(monkeypatch, calls)
    monkeypatch.setitem(sys.modules, "torchair", LazyTorchair(_air_not_in_npugraph_ex, _air_not_in_npugraph_ex))
    decode = attention.bind_decode_fia(DECODE[variant], v2=variant == "npu_tnd", ge_graph=False)
    args = _decode_inputs()
    torch.testing.assert_close(decode(*args), args[0] * 3.0)
    lens = calls[0].get("actual_seq_lengths_kv", calls[0].get("actual_seq_kvlen"))
    assert lens == [5, 128]


def test_prefill_value_is_contiguous_with_merged_projections(monkeypatch):
    """#6: FIA takes no non-contiguous value; merged projections make v a strided slice of the merged GEMM."""
    calls: list[dict] = []
    _fake_torch_ops_npu(monkeypatch, calls)
    prefill = attention.attention_prefill_npu
    b, t, n_q, n_kv, d = 2, 6, 4, 2, 16
    qkv = torch.randn(b, t, (n_q + 2 * n_kv) * d)
    q, k, v = qkv.split([n_q * d, n_kv * d, n_kv * d], dim=-1)
    q, k, v = q.view(b, t, n_q, d), k.reshape(b, t, n_kv, d), v.view(b, t, n_kv, d)
    assert not v.is_contiguous()
    prefill(q, k, v, torch.tensor([6, 3]), d ** -0.5)
    assert calls[0]["value"].is_contiguous()
    torch.testing.assert_close(calls[0]["value"], v.reshape(b, t, n_kv * d))


def test_rms_norm_gamma_goes_in_the_input_dtype(monkeypatch):
    """#1: torch_npu documents npu_rms_norm's gamma in self's dtype; the model keeps gamma = 1 + w in fp32."""
    seen: list[torch.dtype] = []

    def npu_rms_norm(x, gamma, epsilon=1e-6):
        seen.append(gamma.dtype)
        return x, x

    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(npu_rms_norm=npu_rms_norm))
    norm.rms_norm_npu(torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(8, dtype=torch.float32), 1e-6)
    assert seen == [torch.bfloat16]


def test_ge_compiler_drops_tiling_schedule_optimize_with_tnd(monkeypatch):
    """#30 / #10: TND FIA does not support tiling_schedule_optimize; BSH keeps the recipe's setting."""
    configs = []

    class CompilerConfig:
        def __init__(self) -> None:
            self.experimental_config = types.SimpleNamespace()

    def get_npu_backend(compiler_config):
        configs.append(compiler_config)
        return "eager"

    torchair = types.SimpleNamespace(get_npu_backend=get_npu_backend)
    monkeypatch.setitem(sys.modules, "torchair", torchair)
    monkeypatch.setitem(sys.modules, "torchair.configs", types.SimpleNamespace())
    monkeypatch.setitem(sys.modules, "torchair.configs.compiler_config",
                        types.SimpleNamespace(CompilerConfig=CompilerConfig))
    graph.graph_compiler("npu", "ge_graph", tnd_attention=True)(lambda x: x, None)
    graph.graph_compiler("npu", "ge_graph", tnd_attention=False)(lambda x: x, None)
    assert [c.experimental_config.tiling_schedule_optimize for c in configs] == [False, True]


# ---- MC2 dispatch_v2 / combine_v2 ----------------------------------------------------------------------

class FakeMC2:
    """Records dispatch_v2/combine_v2 kwargs; shapes follow the torch_npu meta functions (A = rows received)."""

    def __init__(self, local_experts: int) -> None:
        self.local_experts = local_experts
        self.dispatch: dict = {}
        self.combine: dict = {}
        self.expand_scales = None

    def npu_moe_distribute_dispatch_v2(self, *, x, expert_ids, **kwargs):
        self.dispatch = {"x": x, "expert_ids": expert_ids, **kwargs}
        a = expert_ids.numel()
        counts = torch.zeros(self.local_experts, dtype=torch.int64)
        counts[0] = a
        self.expand_scales = torch.ones(a)
        return (x.repeat_interleave(expert_ids.shape[1], 0), None, torch.arange(a), counts,
                torch.zeros(2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), self.expand_scales)

    def npu_grouped_matmul(self, x, weight, **kwargs):
        return [x[0] @ weight[0][0]]

    def npu_swiglu(self, h, dim=-1):
        gate, up = h.chunk(2, dim)
        return torch.nn.functional.silu(gate) * up

    def npu_moe_distribute_combine_v2(self, *, expand_x, expert_ids, **kwargs):
        self.combine = {"expand_x": expand_x, "expert_ids": expert_ids, **kwargs}
        return torch.zeros(expert_ids.shape[0], expand_x.shape[1])


def _as_torch_npu(monkeypatch, ops: FakeMC2) -> None:
    module = types.ModuleType("torch_npu")  # a real module: dynamo imports it inside the traced step
    for name in ("npu_moe_distribute_dispatch_v2", "npu_grouped_matmul", "npu_swiglu",
                 "npu_moe_distribute_combine_v2"):
        setattr(module, name, getattr(ops, name))
    monkeypatch.setitem(sys.modules, "torch_npu", module)


def _run_mc2(monkeypatch, platform: str, graph_on: bool) -> FakeMC2:
    n, k, h, i, e = 3, 2, 8, 4, 4
    ops = FakeMC2(local_experts=e // 2)
    _as_torch_npu(monkeypatch, ops)
    ep = comm.ExpertParallel(group=None, size=2, rank=1, num_experts=e,  # type: ignore[arg-type]
                             dispatch_name="hcom_ep")
    g = torch.Generator().manual_seed(0)
    comm.ep_dispatch_combine_npu(
        torch.randn(n, h, generator=g), torch.tensor([[0, 1], [2, 3], [1, 2]]), torch.rand(n, k, generator=g),
        [torch.randn(e // 2, 2 * i, h, generator=g)], torch.randn(e // 2, h, i, generator=g), None, ep,
        tokens_per_rank=4, platform=platform, in_graph=graph_on)
    return ops


@pytest.mark.parametrize("graph_on", [False, True])
def test_mc2_follows_the_atlas_a2_contract(monkeypatch, graph_on):
    """Finding 5 (#25, #28), Atlas A2: expert_scales (BS, K) fp32 on dispatch, its expand_scales output into
    combine, no TP domain (tp_world_size 0), shared_expert_num at its default, group_tp only in graph mode."""
    ops = _run_mc2(monkeypatch, "A2", graph_on)
    d, c = ops.dispatch, ops.combine
    assert d["expert_scales"].dtype == torch.float32 and d["expert_scales"].shape == (4, 2)
    assert c["expand_scales"] is ops.expand_scales
    for args in (d, c):
        assert args["tp_world_size"] == 0 and args["tp_rank_id"] == 0
        assert "shared_expert_num" not in args  # "暂不支持该参数，使用默认值即可"
        assert args["group_ep"] == "hcom_ep" and args["ep_world_size"] == 2 and args["ep_rank_id"] == 1
        assert args["global_bs"] == 8
        assert args["group_tp"] == ("hcom_ep" if graph_on else "")
    assert c["tp_send_counts"] is None


def test_mc2_follows_the_atlas_a3_arguments(monkeypatch):
    ops = _run_mc2(monkeypatch, "A3", graph_on=True)
    for args in (ops.dispatch, ops.combine):
        assert (args["group_tp"], args["tp_world_size"], args["tp_rank_id"], args["shared_expert_num"]) == (
            "hcom_ep", 1, 0, 0)
    assert ops.dispatch["expert_scales"] is None and ops.combine["expand_scales"] is None
    assert ops.combine["tp_send_counts"] is not None


def test_compiled_mc2_decode_never_looks_up_the_communicator(monkeypatch):
    """Finding 4 (#23): get_hccl_comm_name inside the compiled decode breaks fullgraph; the name is computed
    once at build time and read from ExpertParallel.

    Runs in a fresh interpreter: once the NPU emulator has registered the real npu:: ops in a process (other
    tests do), dynamo resolves `torch_npu.npu_*` names to them instead of these recording fakes."""
    if os.environ.get("PERFBENCH_TEST_CHILD") != "1":
        test_id = f"{__file__}::test_compiled_mc2_decode_never_looks_up_the_communicator"
        child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_id],
                               env={**os.environ, "PERFBENCH_TEST_CHILD": "1"}, capture_output=True, text=True,
                               timeout=300)
        assert child.returncode == 0, child.stdout[-4000:]
        return
    lookups = []
    monkeypatch.setattr(comm, "hccl_comm_name", lambda group: lookups.append(group) or "looked_up")
    ops = FakeMC2(local_experts=2)
    _as_torch_npu(monkeypatch, ops)
    ep = comm.ExpertParallel(group=None, size=2, rank=0, num_experts=4,  # type: ignore[arg-type]
                             dispatch_name="hcom_ep")

    def step(x, ids, w, gate_up, down):
        return comm.ep_dispatch_combine_npu(x, ids, w, [gate_up], down, None, ep, tokens_per_rank=4,
                                            platform="A3", in_graph=True)

    torch._dynamo.reset()
    torch.compile(step, backend="eager", fullgraph=True)(
        torch.randn(3, 8), torch.tensor([[0, 1], [2, 3], [1, 2]]), torch.rand(3, 2), torch.randn(2, 8, 8),
        torch.randn(2, 8, 4))
    assert lookups == []
    assert ops.dispatch["group_ep"] == "hcom_ep"


def test_hccl_comm_name_uses_the_group_rank(monkeypatch):
    """#23: production callers key the name by the rank in the EP group, not the global rank."""
    asked = []
    backend = types.SimpleNamespace(get_hccl_comm_name=lambda rank: asked.append(rank) or f"hcom{rank}")
    group = types.SimpleNamespace(_get_backend=lambda device: backend)
    monkeypatch.setattr(parallel.dist, "get_rank", lambda group=None: 5 if group is None else 1)
    monkeypatch.setattr(parallel.torch, "device", str)  # CPU torch has no "npu" device type
    assert parallel.hccl_comm_name(group) == "hcom1"  # type: ignore[arg-type]
    assert asked == [1]
