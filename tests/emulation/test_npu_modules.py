"""The fake torch_npu / torchair / torch.npu modules, and the graph-capture behaviours that broke the model."""

from __future__ import annotations

import importlib.util
import inspect
import sys

import pytest
import torch

from model.backend import detect_capabilities
from perfbench.emulation import npu
from perfbench.emulation.npu.rules import NpuRuleError

pytestmark = pytest.mark.npu_emulated
bf16 = torch.bfloat16


def test_modules_import_and_capabilities(platform: str) -> None:
    import torch_npu
    import torchair
    from torchair.configs.compiler_config import CompilerConfig

    assert torch_npu.npu_rms_norm is torch.ops.npu.npu_rms_norm
    assert importlib.util.find_spec("torch_npu") is not None and importlib.util.find_spec("torchair") is not None
    assert not isinstance(sys.modules["torchair"], type(sys))  # torch_npu's lazy stand-in, not a module
    assert torchair.CompilerConfig is CompilerConfig and callable(torchair.inference.cache_compile)
    caps = detect_capabilities("auto")
    assert caps.device == "npu" and caps.torch_npu and caps.torchair
    assert caps.npu_platform == npu.PLATFORMS[platform].series
    assert f"emulated npu ({platform})" in caps.device_name
    assert torch.npu.is_available() and torch.npu.device_count() >= 1
    torch.npu.set_device(0)
    torch.npu.synchronize()
    assert torch.npu.max_memory_allocated() > 0
    assert npu.tensor_device("npu:0") == "cpu"


def test_deactivate_restores_cpu_detection(emulate) -> None:
    emulate("910b")
    npu.deactivate()
    assert detect_capabilities("auto").device == "cpu"
    assert npu.tensor_device("npu") == "npu"


def test_unknown_platform_is_a_clear_error() -> None:
    with pytest.raises(npu.PlatformError, match="unknown platform 'a5'; choose one of 910b, 910_93, 950"):
        npu.activate("a5")


def test_profiler_signatures_are_torch_npu_2_14(platform: str) -> None:
    import torch_npu

    prof = torch_npu.profiler
    # parameter names of torch_npu 2.14.0 (profiler.py:201-218, :180-185; experimental_config.py:87-105)
    assert list(inspect.signature(prof.profile).parameters) == [
        "activities", "schedule", "on_trace_ready", "record_shapes", "profile_memory", "with_stack", "with_flops",
        "with_modules", "experimental_config", "execution_trace_observer", "custom_trace_id_callback", "use_cuda"]
    assert list(inspect.signature(prof.tensorboard_trace_handler).parameters) == [
        "dir_name", "worker_name", "analyse_flag", "async_mode"]
    assert list(inspect.signature(prof._ExperimentalConfig).parameters) == [
        "profiler_level", "aic_metrics", "l2_cache", "msprof_tx", "mstx", "data_simplification", "record_op_args",
        "op_attr", "gc_detect_threshold", "export_type", "host_sys", "mstx_domain_include", "mstx_domain_exclude",
        "sys_io", "sys_interconnection"]
    assert prof.ProfilerLevel.Level1 and prof.AiCMetrics.PipeUtilization and prof.ProfilerActivity.NPU


def test_import_torchair_inside_a_traced_function_fails(platform: str) -> None:
    import torchair

    def step(x: torch.Tensor) -> torch.Tensor:
        import torchair

        return x + len(dir(torchair))

    backend = torchair.get_npu_backend(compiler_config=torchair.CompilerConfig())
    with pytest.raises(torch._dynamo.exc.Unsupported, match="Bad import result"):
        torch.compile(step, backend=backend, fullgraph=True, dynamic=False)(torch.ones(2))
    torch._dynamo.reset()


def _decode_fia(fia, lens):
    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fia(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BSH", scale=0.125,
                   actual_seq_lengths_kv=lens)[0]
    return step


def test_torchair_ops_run_only_in_a_ge_graph(platform: str) -> None:
    import torchair

    q, k, v = torch.randn(2, 1, 256, dtype=bf16), torch.randn(2, 5, 128, dtype=bf16), torch.randn(2, 5, 128,
                                                                                                 dtype=bf16)
    lens = torch.tensor([5, 3])
    air_fia = torchair.ops.npu_fused_infer_attention_score
    with pytest.raises(NotImplementedError, match="max-autotune"):
        _decode_fia(air_fia, lens)(q, k, v)
    expected = _decode_fia(torch.ops.npu.npu_fused_infer_attention_score, [5, 3])(q, k, v)
    ge = torch.compile(_decode_fia(air_fia, lens), backend=torchair.get_npu_backend(), fullgraph=True, dynamic=False)
    torch.testing.assert_close(ge(q, k, v), expected)
    torch._dynamo.reset()
    graph_ex = torch.compile(_decode_fia(air_fia, lens), backend="npugraph_ex", fullgraph=True, dynamic=False)
    with pytest.raises(NotImplementedError, match="max-autotune"):
        graph_ex(q, k, v)
    torch._dynamo.reset()


def test_host_sync_in_the_decode_graph_fails(platform: str) -> None:
    import torchair

    lens = torch.tensor([5, 3])
    q, k, v = torch.randn(2, 1, 256, dtype=bf16), torch.randn(2, 5, 128, dtype=bf16), torch.randn(2, 5, 128,
                                                                                                 dtype=bf16)

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        # eager FIA takes host int lists: reading them from a device tensor is a host sync
        return _decode_fia(torch.ops.npu.npu_fused_infer_attention_score, lens.tolist())(q, k, v)

    compiled = torch.compile(step, backend=torchair.get_npu_backend(), fullgraph=True, dynamic=False)
    # dynamo either breaks the graph (fullgraph: Unsupported) or captures the read as an unbacked value,
    # which the emulated GE backend refuses
    with pytest.raises((torch._dynamo.exc.Unsupported, torch._dynamo.exc.BackendCompilerFailed),
                       match="host|Unsupported|tolist|item"):
        compiled(q, k, v, lens)
    torch._dynamo.reset()

    def compact(x: torch.Tensor) -> torch.Tensor:
        return x[x > 0].sum(0)

    with pytest.raises((torch._dynamo.exc.Unsupported, torch._dynamo.exc.BackendCompilerFailed)):
        torch.compile(compact, backend=torchair.get_npu_backend(), fullgraph=True, dynamic=False)(torch.randn(6))
    torch._dynamo.reset()


def test_tnd_with_tiling_schedule_optimize_is_refused(platform: str) -> None:
    import torchair

    config = torchair.CompilerConfig()
    config.experimental_config.tiling_schedule_optimize = True

    def step(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.npu_fused_infer_attention_score_v2(
            q, k, k, num_query_heads=4, num_key_value_heads=2, input_layout="TND", actual_seq_qlen=[2],
            actual_seq_kvlen=[2])[0]

    q, k = torch.randn(2, 4, 128, dtype=bf16), torch.randn(2, 2, 128, dtype=bf16)
    compiled = torch.compile(step, backend=torchair.get_npu_backend(compiler_config=config), fullgraph=True,
                             dynamic=False)
    with pytest.raises(Exception, match="tiling_schedule_optimize") as err:
        compiled(q, k)
    assert isinstance(err.value, NpuRuleError) or "NpuRuleError" in repr(err.value)
    torch._dynamo.reset()
    with pytest.raises(ValueError, match="not one of"):
        config.experimental_config.topology_sorting_strategy = "Random"


def test_cache_compile_needs_a_module_method(platform: str) -> None:
    import torchair

    with pytest.raises(ValueError, match="method of a torch.nn.Module"):
        torchair.inference.cache_compile(lambda x: x, dynamic=False)


def test_emulated_profiler_takes_export_type_db_and_says_there_is_no_db(emulate, tmp_path) -> None:
    from perfbench.profiling.capture import capture_trace, parse_trace_path

    emulate("910b")
    with capture_trace("npu", tmp_path, "db") as capture:
        torch.softmax(torch.randn(4, 4), dim=-1)

    folder = capture.paths[0]
    note = (folder / "EMULATED.txt").read_text()
    assert "emulated npu (910b)" in note and "no ascend_pytorch_profiler .db is written" in note
    assert '"export_type": "db"' in note and not list(folder.rglob("*.db"))
    events = parse_trace_path(folder.parent, prefer="db")  # the host trace, as with the text export
    assert "aten::softmax" in set(events["name"]) and set(events["side"]) == {"host"}
