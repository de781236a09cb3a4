"""Plans bind the op the device can actually run, and say which one."""

from __future__ import annotations

import pytest

from model.backend import Capabilities
from model.ops import gdn
from model.ops.opset import build_ops
from model.optimizations import resolve_plan


@pytest.mark.parametrize(("fla", "impl", "words"), [
    (True, gdn.gdr_prefill_cuda, "fla"),
    (False, gdn.gdr_prefill_chunked, "fla not installed"),
])
def test_chunk_gdr_on_cuda_binds_fla_only_when_installed(fla: bool, impl, words: str) -> None:
    plan = resolve_plan("all", Capabilities(device="cuda", device_name="test GPU", fla=fla, triton=fla))
    decision = plan.decisions["chunk_gdr"]
    assert decision.state == "on" and words in decision.impl
    assert build_ops(plan).gdr_prefill is impl


def test_chunk_gdr_on_cpu_binds_the_chunked_kernel() -> None:
    plan = resolve_plan({"chunk_gdr": True}, Capabilities(device="cpu", device_name="cpu"))
    assert build_ops(plan).gdr_prefill is gdn.gdr_prefill_cpu
    off = resolve_plan("none", Capabilities(device="cpu", device_name="cpu"))
    assert build_ops(off).gdr_prefill is gdn.gdr_prefill_ref


def test_cpu_without_a_cpp_compiler_marks_inductor_paths_inactive() -> None:
    caps = Capabilities(device="cpu", device_name="cpu", inductor=False)
    plan = resolve_plan("all", caps)
    for name in ("fused_rope", "fused_rmsnorm", "graph_mode"):
        decision = plan.decisions[name]
        assert decision.state == "inactive" and "C++ compiler" in decision.reason, decision
    chunk = plan.decisions["chunk_gdr"]
    assert chunk.state == "on" and "no C++ compiler" in chunk.impl
    assert build_ops(plan).gdr_prefill is gdn.gdr_prefill_chunked


def test_detection_follows_cxx(monkeypatch) -> None:
    from model.backend import detect_capabilities

    monkeypatch.setenv("CXX", "/nonexistent/compiler-for-test")
    assert detect_capabilities("cpu").inductor is False


@pytest.mark.slow
def test_model_with_every_toggle_runs_without_a_cpp_compiler(tmp_path) -> None:
    # In a fresh process whose CXX points nowhere, inductor cannot build anything: "all" must still generate,
    # because the plan binds no inductor-compiled CPU kernel.
    import os
    import subprocess
    import sys

    code = ("from model import Qwen3_5MoeForCausalLM\n"
            "m = Qwen3_5MoeForCausalLM.from_pretrained('tiny', optimizations='all', num_layers=4)\n"
            "assert not m.plan.on('graph_mode') and not m.plan.on('fused_rmsnorm'), m.plan.describe()\n"
            "out = m.generate([[1, 2, 3, 4] * 20, [5, 6, 7]], max_new_tokens=3)\n"
            "assert [len(t) for t in out.tokens] == [3, 3], out.tokens\n")
    env = {**os.environ, "CXX": "/nonexistent/compiler-for-test", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
