"""What a result was measured on: code version, library versions, device, threads, the allow-listed env vars.

Read-only: nothing here changes the process. Every probe degrades to "unknown"/None instead of failing, so a
missing git or library never costs a measurement.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import sys
from pathlib import Path
from typing import Any

import torch

from perfbench.measure.code_origin import code_origins
from perfbench.measure.git_state import git_state
from perfbench.measure.thread_budget import threads_note
from perfbench.results.env_allowlist import recorded_env
from perfbench.results.host_kind import cpu_model
from perfbench.results.timestamps import utc_timestamp


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cann_version() -> str | None:
    """CANN toolkit version from the install-info files under $ASCEND_TOOLKIT_HOME (or $ASCEND_HOME_PATH)."""
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        home = os.environ.get(var)
        if not home:
            continue
        root = Path(home)
        candidates = [root / "version.cfg", root / "ascend_toolkit_install.info",
                      root / "compiler" / "version.info", *sorted(root.glob("*/ascend_toolkit_install.info"))]
        for path in candidates:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            found = re.search(r"^\s*(?:version|Version|toolkit_running_version)\s*=\s*\[?([^\]\s:]+)",
                              text, re.M)
            if found:
                return found.group(1)
    return None


def device_info(device: str) -> tuple[str, int]:
    """(name, count) of the device; CPU: the CPU model and the logical core count."""
    try:
        if device == "cuda" and torch.cuda.is_available():
            return torch.cuda.get_device_name(0), torch.cuda.device_count()
        if device == "npu" and hasattr(torch, "npu") and torch.npu.is_available():
            return torch.npu.get_device_name(0), torch.npu.device_count()
    except Exception:  # noqa: BLE001 - a probe that fails is recorded as unknown, never fatal
        return "unknown", 0
    if device == "cpu":
        return cpu_model(), os.cpu_count() or 0
    return "unknown", 0


def emulation_label() -> str | None:
    """"emulated npu (<platform>)" when the NPU emulator runs this process, else None."""
    from perfbench.emulation.npu import label

    return label()


def collect_environment(device: str, executor: str | None = None) -> dict[str, Any]:
    """A snapshot of this process's environment for one result; `executor` (default: what the runner put in
    PERFBENCH_EXECUTOR, else local) says which executor started the run."""
    sha, dirty = git_state()
    name, count = device_info(device)
    allowed = recorded_env(os.environ)  # exact names, no credential (results/env_allowlist.py)
    return {
        "git_sha": sha, "git_dirty": dirty,
        "python": platform.python_version(), "python_executable": sys.executable,
        "torch": torch.__version__, "torch_npu": package_version("torch_npu"), "cann": cann_version(),
        "transformers": package_version("transformers"), "torchair": package_version("torchair"),
        "device": device, "device_name": name, "device_count": count, "emulation": emulation_label(),
        "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
        "threads_note": threads_note(),
        "env": allowed.env, "env_withheld": allowed.withheld,
        "executor": executor or os.environ.get("PERFBENCH_EXECUTOR") or "local",
        "hostname": socket.gethostname(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "date": utc_timestamp(),
        # this process's own; a run of several ranks replaces it with every rank's (run_steps.prepare_run)
        "code": [o.to_dict() for o in code_origins(int(os.environ.get("RANK", "0") or 0))],
    }
