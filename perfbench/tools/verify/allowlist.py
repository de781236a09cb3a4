"""The environment variables a verify bundle may hold: an explicit allow-list, everything else dropped.

A bundle is meant to be attached to an issue, so it keeps only what explains an Ascend run (CANN, HCCL,
torch_npu, torch and thread settings, the torchrun layout, perfbench's own switches) and drops the rest, which
may hold credentials. A name that looks like a credential is dropped even under an allowed prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ALLOWED_PREFIXES = ("ASCEND_", "HCCL_", "PYTORCH_NPU_", "TORCH_", "TORCHINDUCTOR_", "TORCHAIR_", "ACL_", "NPU_",
                    "OMP_", "MKL_", "PERFBENCH_", "GLOO_")
ALLOWED_NAMES = ("TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF", "INF_NAN_MODE_ENABLE", "COMBINED_ENABLE",
                 "MASTER_ADDR", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
CREDENTIAL_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|KEY|AUTH|COOKIE", re.IGNORECASE)


def is_allowed(name: str) -> bool:
    if CREDENTIAL_NAME.search(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def allowed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allowed variables of `environ`, sorted by name."""
    return {name: value for name, value in sorted(environ.items()) if is_allowed(name)}
