from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from model.tracing import scope_name
from perfbench.errors import UserError
from perfbench.profiling.capture import capture_trace, parse_trace_path


def test_cpu_capture_writes_a_trace_that_parses(tmp_path):
    with capture_trace("cpu", tmp_path / "trace") as capture:
        with torch.profiler.record_function(scope_name(phase="prefill", layer=0, module="attn")):
            torch.softmax(torch.randn(4, 4), dim=-1)

    assert capture.paths == [tmp_path / "trace" / "trace.json"]
    events = parse_trace_path(capture.paths[0])
    softmax = events[events["name"] == "aten::softmax"].iloc[0]
    assert (softmax["phase"], softmax["module"], softmax["category"]) == ("prefill", "attn", "attention")


def test_failed_body_exports_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with capture_trace("cpu", tmp_path) as capture:
            raise RuntimeError("boom")
    assert capture.paths == [] and not (tmp_path / "trace.json").exists()


def test_unknown_device_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="`device` must be one of"):
        with capture_trace("tpu", tmp_path):
            pass


def test_unknown_export_type_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="`export_type` must be one of text, db, got 'json'"):
        with capture_trace("cpu", tmp_path, "json"):
            pass


class _FakeNpuProfile:
    """Records how capture_trace configures torch_npu.profiler; on exit writes what the handler would."""

    calls: list[dict] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        _FakeNpuProfile.calls.append(kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        out = Path(self.kwargs["on_trace_ready"])
        (out / "host_1_123_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        return False


@pytest.mark.parametrize("export_type", ["text", "db"])
def test_npu_capture_uses_the_documented_settings(tmp_path, monkeypatch, export_type):
    profiler = types.SimpleNamespace(
        ProfilerLevel=types.SimpleNamespace(Level1="Level1"),
        AiCMetrics=types.SimpleNamespace(PipeUtilization="PipeUtilization"),
        ExportType=types.SimpleNamespace(Text="ExportType.Text", Db="ExportType.Db"),
        ProfilerActivity=types.SimpleNamespace(CPU="CPU", NPU="NPU"),
        _ExperimentalConfig=lambda **kw: kw,
        tensorboard_trace_handler=lambda path: path,
        profile=_FakeNpuProfile,
    )
    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(profiler=profiler))
    (tmp_path / "old_ascend_pt").mkdir()  # an earlier capture is not reported again

    with capture_trace("npu:0", tmp_path, export_type) as capture:
        pass

    kwargs = _FakeNpuProfile.calls[-1]
    assert kwargs["activities"] == ["CPU", "NPU"] and kwargs["record_shapes"] is False
    assert kwargs["experimental_config"] == {"profiler_level": "Level1", "aic_metrics": "PipeUtilization",
                                             "export_type": f"ExportType.{export_type.title()}"}
    assert kwargs["on_trace_ready"] == str(tmp_path)
    assert capture.paths == [tmp_path / "host_1_123_ascend_pt"]
