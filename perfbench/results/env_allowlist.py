"""The environment variables a result, report, baseline or verify bundle may hold: an allow-list of exact names
known to change a measurement, each value checked for credential shapes. Everything else is withheld, and only
the number withheld is recorded ("4 variables withheld"), never a name or a value.

Result folders and bundles get attached to issues and committed as baselines, so a prefix (HCCL_*, ASCEND_*) is
not enough: HCCL_AUTH_KEY, ASCEND_TOKEN or NCCL_IB_PASS sit under the same prefixes as the tuning knobs. The one
home of this rule: measure/environment.py (every run's env), results/records.py (any Environment read or written, so a
baseline or report of an older folder is filtered too) and tools/verify (the bundle).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

THREADS = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY", "OMP_DYNAMIC", "OMP_SCHEDULE",
           "MKL_NUM_THREADS", "MKL_DYNAMIC", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME",
           "GOMP_CPU_AFFINITY")
ALLOCATOR = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "MALLOC_CONF",
             "MULTI_STREAM_MEMORY_REUSE")
HCCL = ("HCCL_BUFFSIZE", "HCCL_OP_EXPANSION_MODE", "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT",
        "HCCL_DETERMINISTIC", "HCCL_ALGO", "HCCL_INTRA_ROCE_ENABLE", "HCCL_INTRA_PCIE_ENABLE", "HCCL_RDMA_TC",
        "HCCL_RDMA_SL", "HCCL_SOCKET_IFNAME", "HCCL_IF_IP", "HCCL_OP_BASE_FFTS_MODE_ENABLE",
        "HCCL_WHITELIST_DISABLE")
ASCEND = ("TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF", "INF_NAN_MODE_ENABLE", "COMBINED_ENABLE", "ACLNN_CACHE_LIMIT",
          "ASCEND_LAUNCH_BLOCKING", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME",
          "ASCEND_GLOBAL_LOG_LEVEL", "ASCEND_ENHANCE_ENABLE")
NCCL_GLOO = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE",
             "NCCL_NVLS_ENABLE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "GLOO_SOCKET_IFNAME",
             "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS")
COMPILER = ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_MAX_AUTOTUNE", "TORCHINDUCTOR_FREEZING",
            "TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_CPP_WRAPPER", "TORCHDYNAMO_DISABLE")
# what torchrun gives each rank: its place in a (multi-node) launch; GROUP_RANK is the node's rank. The master
# port is left out: a fresh one per run would make every run's environment look different.
DISTRIBUTED = ("MASTER_ADDR", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "GROUP_WORLD_SIZE")
# perfbench's own switches: the executor and node rank it gave a run, the emulator and its test hooks
PERFBENCH = ("PERFBENCH_EXECUTOR", "PERFBENCH_NODE_RANK", "PERFBENCH_EMULATE_NPU", "PERFBENCH_FAULT",
             "PERFBENCH_VERIFY_FAULT")
RECORDED_NAMES = frozenset((*THREADS, *ALLOCATOR, *HCCL, *ASCEND, *NCCL_GLOO, *COMPILER, *DISTRIBUTED, *PERFBENCH))

# Names under these prefixes are what a reader would expect to see recorded: those withheld are counted.
NOTICED_PREFIXES = ("HCCL_", "ASCEND_", "OMP_", "MKL_", "KMP_", "PYTORCH_", "PERFBENCH_", "NCCL_", "GLOO_",
                    "TORCH", "ACL_", "NPU_", "CUDA_", "MASTER_")
# PAT only as a word of the name (GLOO_PAT, GITHUB_PAT_X), so that ..._PATH stays a path
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|PASS|PWD|SECRET|AUTH|CRED|COOKIE|(?:^|_)PAT(?:_|$)", re.IGNORECASE)
CREDENTIAL_VALUE = re.compile(r"[^\s:/@]+:[^\s@]*@")  # user:password@host, in a URL or not


class RecordedEnv(BaseModel):
    """The variables that may be recorded (sorted by name) and how many were withheld."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: dict[str, str]
    withheld: int


def looks_like_credential(name: str, value: str) -> bool:
    return bool(CREDENTIAL_NAME.search(name) or CREDENTIAL_VALUE.search(value))


def is_recorded(name: str, value: str) -> bool:
    return name in RECORDED_NAMES and not looks_like_credential(name, value)


def recorded_env(environ: Mapping[str, str]) -> RecordedEnv:
    """The allowed part of `environ`, and the count of what was withheld among the variables a reader would
    expect (an allowed name with a credential-shaped value, or any other name under a noticed prefix)."""
    env = {name: str(value) for name, value in sorted(environ.items()) if is_recorded(name, str(value))}
    withheld = sum(name not in env and (name in RECORDED_NAMES or name.startswith(NOTICED_PREFIXES)
                                        or looks_like_credential(name, str(value)))
                   for name, value in environ.items())
    return RecordedEnv(env=env, withheld=withheld)


# torch copies every variable whose name holds one of these into the repro script inside its compile caches
# (torch/_dynamo/debug_utils.py generate_env_vars_string), which live in the result folder
TORCH_COPIED = ("TORCH", "DYNAMO", "INDUCTOR", "TRITON")


def torch_copied_credentials(environ: Mapping[str, str]) -> list[str]:
    """Credential-shaped variables torch would write into a compile cache: a run's worker goes without them
    (torch reads no credential under such a name; they serve nothing there but a leak)."""
    return sorted(name for name, value in environ.items()
                  if any(word in name for word in TORCH_COPIED) and looks_like_credential(name, str(value)))


def withheld_text(count: int) -> str:
    return f"{count} variable{'s' * (count != 1)} withheld"
