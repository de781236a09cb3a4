"""`torch_npu.profiler` under the emulator: torch_npu 2.14.0's signatures, backed by torch.profiler.

What comes out is a folder named like torch_npu's (`<worker>_<timestamp>_ascend_pt`) that holds the host-side
Kineto chrome trace and an EMULATED.txt saying what it is: CPU timings of the emulated ops, no device kernels,
no AI Core metrics (the Level / aic_metrics / export_type settings are accepted and recorded, not applied: with
export_type db there is no ascend_pytorch_profiler .db either, the host trace is read as with text).
"""

from __future__ import annotations

import enum
import json
import os
import socket
import time
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from perfbench.emulation.npu.platforms import require_active

EMULATED_NOTE = "EMULATED.txt"
TRACE_NAME = "emulated_host_trace.json"


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Text = "text"
    Db = "db"


class _ExperimentalConfig:
    def __init__(self, profiler_level: str = ProfilerLevel.Level0,
                 aic_metrics: str = AiCMetrics.PipeUtilization, l2_cache: bool = False, msprof_tx: bool = False,
                 mstx: bool = False, data_simplification: bool = True, record_op_args: bool = False,
                 op_attr: bool = False, gc_detect_threshold: float | None = None,
                 export_type: str | list[str] = ExportType.Text, host_sys: list[Any] | None = None,
                 mstx_domain_include: list[str] | None = None, mstx_domain_exclude: list[str] | None = None,
                 sys_io: bool = False, sys_interconnection: bool = False) -> None:
        self.settings = {k: v for k, v in locals().items() if k != "self"}


def tensorboard_trace_handler(dir_name: str | None = None, worker_name: str | None = None,
                              analyse_flag: bool = True, async_mode: bool = False) -> Callable[[profile], None]:
    out = Path(dir_name or ".")

    def handle(prof: profile) -> None:
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        folder = out / f"{worker}_{time.strftime('%Y%m%d%H%M%S')}{int(time.time() * 1000) % 1000:03d}_ascend_pt"
        folder.mkdir(parents=True, exist_ok=True)
        prof.export_host_trace(folder / TRACE_NAME)
        export = prof.settings.get("export_type", ExportType.Text)
        db = ExportType.Db in (export if isinstance(export, list) else [export])
        (folder / EMULATED_NOTE).write_text(
            f"{require_active().label}: host-side torch.profiler trace of the emulated ops (CPU timings). "
            "No device kernels, AI Core metrics or communication files: those need Ascend hardware.\n"
            + ("export_type db: no ascend_pytorch_profiler .db is written (it holds device tasks); the host "
               "trace stands for both exports.\n" if db else "")
            + f"requested settings: {json.dumps(prof.settings, default=str)}\n")
    return handle


class profile:  # torch_npu's name
    def __init__(self, *, activities: Iterable[ProfilerActivity] | None = None, schedule: Any = None,
                 on_trace_ready: Callable[..., Any] | None = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config: _ExperimentalConfig | None = None,
                 execution_trace_observer: Any = None, custom_trace_id_callback: Any = None,
                 use_cuda: bool | None = None) -> None:
        self.on_trace_ready = on_trace_ready
        self.settings = {"activities": [a.value for a in activities or ()],
                         **(experimental_config.settings if experimental_config else {})}
        self._torch = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                             record_shapes=record_shapes, profile_memory=profile_memory,
                                             with_stack=with_stack, with_flops=with_flops, with_modules=with_modules)

    def __enter__(self) -> profile:
        self._torch.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._torch.__exit__(*exc)
        if exc[0] is None and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def start(self) -> None:
        self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)

    def step(self) -> None:
        self._torch.step()

    def export_host_trace(self, path: Path) -> None:
        self._torch.export_chrome_trace(str(path))


def build_module() -> types.ModuleType:
    module = types.ModuleType("torch_npu.profiler", "torch_npu.profiler, emulated on torch.profiler (CPU)")
    for obj in (ProfilerActivity, ProfilerLevel, AiCMetrics, ExportType, _ExperimentalConfig,
                tensorboard_trace_handler, profile):
        setattr(module, obj.__name__, obj)
    return module
