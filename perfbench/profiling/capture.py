"""Profiler capture for the worker: torch.profiler on CPU/CUDA, torch_npu.profiler on NPU.

    with capture_trace("cpu", out_dir) as capture:
        run_profiled_iterations()
    events = parse_trace_path(capture.paths[0])

CPU/CUDA write one Kineto chrome trace, `out_dir/trace.json`. NPU writes a `*_ascend_pt` folder into out_dir
through `tensorboard_trace_handler` with the settings of npu_ops.md section 3: activities CPU+NPU, Level1
(kernel types, AI Core pipe metrics, communication files), aic_metrics PipeUtilization, record_shapes off,
and the export the scenario asked for (`export_type` text, or db: ascend_pytorch_profiler_{rank}.db,
profiler_formats.md 6). torch_npu is imported only when capturing on NPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perfbench.errors import UserError
from perfbench.profiling.loading import parse_trace_path

__all__ = ["CHROME_TRACE_NAME", "TraceCapture", "capture_trace", "parse_trace_path"]

CHROME_TRACE_NAME = "trace.json"
DEVICES = ("cpu", "cuda", "npu")
EXPORT_TYPES = ("text", "db")  # torch_npu.profiler.ExportType values


@dataclass
class TraceCapture:
    """One capture. `paths` is filled when the `capture_trace` block exits: the trace file (CPU/CUDA) or the
    new `*_ascend_pt` folder(s) (NPU), each ready for `parse_trace_path`."""

    device: str
    out_dir: Path
    paths: list[Path] = field(default_factory=list)


def _device_kind(device: str) -> str:
    kind = device.split(":", 1)[0].strip().lower()
    if kind not in DEVICES:
        raise UserError(f"`device` must be one of {', '.join(DEVICES)} (optionally with :index), "
                        f"got {device!r}")
    return kind


@contextmanager
def capture_trace(device: str, out_dir: Path, export_type: str = "text") -> Iterator[TraceCapture]:
    """Profile the body of the `with` block and write its trace into `out_dir` (created) on a normal exit.

    `export_type` ("text" or "db") is what the NPU profiler writes; CPU/CUDA always write a chrome trace.
    If the body raises, the profiler is stopped and nothing is exported.
    """
    kind = _device_kind(device)
    if export_type not in EXPORT_TYPES:
        raise UserError(f"`export_type` must be one of {', '.join(EXPORT_TYPES)}, got {export_type!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    capture = TraceCapture(device=device, out_dir=out_dir)
    if kind == "npu":
        before = set(out_dir.glob("*_ascend_pt"))
        with _npu_profile(out_dir, export_type):
            yield capture
        capture.paths = sorted(set(out_dir.glob("*_ascend_pt")) - before)
        return
    activities = [torch.profiler.ProfilerActivity.CPU]
    if kind == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=False) as prof:
        yield capture
    path = out_dir / CHROME_TRACE_NAME
    prof.export_chrome_trace(str(path))
    capture.paths = [path]


def _npu_profile(out_dir: Path, export_type: str) -> Any:  # a torch_npu profile object
    import torch_npu  # only importable on an Ascend machine

    npu_profiler = torch_npu.profiler
    config = npu_profiler._ExperimentalConfig(
        profiler_level=npu_profiler.ProfilerLevel.Level1,
        aic_metrics=npu_profiler.AiCMetrics.PipeUtilization,
        export_type=npu_profiler.ExportType.Db if export_type == "db" else npu_profiler.ExportType.Text,
    )
    return npu_profiler.profile(
        activities=[npu_profiler.ProfilerActivity.CPU, npu_profiler.ProfilerActivity.NPU],
        record_shapes=False,
        experimental_config=config,
        on_trace_ready=npu_profiler.tensorboard_trace_handler(str(out_dir)),
    )
