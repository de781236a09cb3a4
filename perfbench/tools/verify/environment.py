"""Item 1, environment: versions (torch, torch_npu, torchair, CANN, driver), the device, HCCL variables, and the
installed torch_npu's op schemas against the 2.14.0 ones the project was built against.

`snapshot` is also the bundle's environment.json, with the environment variables filtered by the allow-list.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

import torch

from perfbench.emulation.npu.modules import TORCH_NPU_VERSION
from perfbench.measure.environment import cann_version, collect_environment, package_version
from perfbench.results.env_allowlist import recorded_env, withheld_text
from perfbench.tools.verify.context import VerifyContext
from perfbench.tools.verify.schemas import compare, installed_schemas
from perfbench.tools.verify.summary import FAIL, PASS, Check

DRIVER_INFO = Path("/usr/local/Ascend/driver/version.info")  # the driver package's default install path


def driver_version(info: Path = DRIVER_INFO) -> str | None:
    """The Ascend driver version (`Version=` of the driver's version.info), None without a driver."""
    try:
        found = re.search(r"^\s*Version\s*=\s*(\S+)", info.read_text(errors="replace"), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def versions(ctx: VerifyContext) -> dict[str, str | None]:
    torch_npu = importlib.import_module("torch_npu")
    npu_version = getattr(torch_npu, "__version__", None) or package_version("torch_npu")
    emulated = getattr(torch_npu, "__emulated__", None)
    if emulated:
        return {"torch": torch.__version__, "torch_npu": f"{npu_version} (emulated)", "torchair": "emulated",
                "CANN": cann_version(), "driver": driver_version()}
    torchair = package_version("torchair") or ("bundled with torch_npu" if ctx.caps.torchair else None)
    return {"torch": torch.__version__, "torch_npu": npu_version, "torchair": torchair, "CANN": cann_version(),
            "driver": driver_version()}


def snapshot(ctx: VerifyContext) -> dict[str, Any]:
    """environment.json: perfbench's run environment (only allow-listed variables, results/env_allowlist.py) and
    the versions above."""
    env = collect_environment("npu")
    found = versions(ctx)
    # the module's own versions: an emulated torch_npu (or torchair bundled with torch_npu) is no installed package
    env.update(versions=found, torch_npu=found["torch_npu"], torchair=found["torchair"],
               platform=ctx.platform, series=ctx.series)
    return env


def check_environment(ctx: VerifyContext, log: list[str]) -> list[Check]:
    found = versions(ctx)
    built = "" if (found["torch_npu"] or "").startswith(TORCH_NPU_VERSION) else \
        f"; the project was built against torch_npu {TORCH_NPU_VERSION}"
    checks = [Check("versions", PASS, ", ".join(f"{k} {v or '-'}" for k, v in found.items()) + built,
                    data=dict(found))]
    count = torch.npu.device_count()  # type: ignore[attr-defined]
    checks.append(Check("device", PASS, f"{ctx.caps.device_name} x{count}, platform {ctx.platform} ({ctx.series})",
                        data={"name": ctx.caps.device_name, "count": count, "platform": ctx.platform}))
    installed, source = installed_schemas()
    diffs = compare(installed)
    log.append(f"installed schemas read from {source}")
    for diff in diffs:
        checks.append(Check(f"schema {diff.op}", FAIL, f"torch_npu 2.14.0: {diff.expected} (installed: {source})",
                            op=diff.op, error=diff.problem,
                            data={"expected": diff.expected, "installed": installed.get(diff.op)}))
    if not diffs:
        checks.append(Check("schemas", PASS, f"all {len(installed)} ops match torch_npu 2.14.0's schemas "
                                             f"(installed: {source})", data={"source": source}))
    hccl_env = {k: v for k, v in os.environ.items() if k.startswith("HCCL_")}
    allowed = recorded_env(hccl_env)  # a credential under HCCL_ (HCCL_PWD) is counted, never shown
    hccl = allowed.env
    withheld = f" ({withheld_text(allowed.withheld)})" if allowed.withheld else ""
    checks.append(Check("hccl variables", PASS, (", ".join(f"{k}={v}" for k, v in hccl.items()) or
                        "no allow-listed HCCL_* variables set (defaults apply)") + withheld, data=hccl))
    return checks
