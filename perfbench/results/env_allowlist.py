"""The environment variables a result, report, baseline or verify bundle may hold: an allow-list of exact names
known to change a measurement, each value checked for credential shapes. Everything else is withheld, and only
the number withheld is recorded ("4 variables withheld"), never a name or a value.

Result folders and bundles get attached to issues and committed as baselines, so a prefix (HCCL_*, ASCEND_*) is
not enough: HCCL_AUTH_KEY, ASCEND_TOKEN or NCCL_IB_PASS sit under the same prefixes as the tuning knobs, and a
credential need not say so in its name (SLACK_WEBHOOK_URL, AZURE_STORAGE_SAS, CI_BEARER). An allowed name is
recorded only when its value has no credential shape either: user:password@ or anything@host, a known token
prefix (ghp_, ghs_, xoxb-, AKIA, eyJ..., hf_, glpat-), a `sig=` / `token=` / `password=` parameter, a bearer
header, or a long run of letters and digits that reads as a random token.

The one home of this rule: measure/environment.py (every run's env), results/records.py (any Environment read or
written, so a report, CSV or baseline of an older or hand-edited folder is filtered too), tools/verify (the
bundle), and the worker's environment (run/launcher.py, run/ab.py): torch copies every variable whose name holds
TORCH, DYNAMO, INDUCTOR or TRITON into the repro scripts of its compile cache, which lives inside --out, so an
inherited variable under such a name reaches a worker only when it is on `TORCH_PASSED` with a clean value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

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
# PAT, SAS and SIG only as words of the name (GLOO_PAT, AZURE_STORAGE_SAS), so that ..._PATH stays a path
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|PASS|PWD|SECRET|AUTH|CRED|COOKIE|BEARER|WEBHOOK|SIGNATURE|PRIVATE|"
                             r"(?:^|_)(?:PAT|SAS|SIG)(?:_|$)", re.IGNORECASE)
CREDENTIAL_VALUE = re.compile(
    r"[^\s:/@]+:[^\s@]*@"  # user:password@host, in a URL or not
    r"|[^\s/@=,;]+@[^\s@]"  # token@host: no allowed variable names a user
    r"|(?<![A-Za-z0-9])(?:gh[pousr]_|github_pat_|xox[abpors]-|glpat-|hf_[A-Za-z0-9]{8}|sk-[A-Za-z0-9_-]{8}|"
    r"npm_[A-Za-z0-9]{8}|AIza[A-Za-z0-9_-]{8}|(?:AKIA|ASIA)[A-Z0-9]{12}|eyJ[A-Za-z0-9_-]{8})"  # known tokens
    r"|%3A[^\s@]*%40"  # user%3Apassword%40host: the same, percent-encoded
    r"|(?:^|[?&;,\s])(?:sig|signature|token|tok|access_token|password|passwd|pwd|pass|secret|api_?key|auth)="  # key=
    r"|(?:^|[?&;,\s/])(?:password|passwd|secret|token|api_?key)\s*:"  # password: ... in a value
    r"|\bbearer\s+\S",  # an Authorization header's value
    re.IGNORECASE)
TOKEN_RUN = re.compile(r"[A-Za-z0-9+/=_]{20,}")  # a random token's alphabet (base64); - and . split ids and hosts
PATH_WORD = re.compile(r"[a-z_]{2,}|[A-Z][a-z]+|[a-z]+[0-9]{1,3}")  # usr, local, Ascend, lib64: a path, not a token


class RecordedEnv(BaseModel):
    """The variables that may be recorded (sorted by name) and how many were withheld."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: dict[str, str]
    withheld: int


def _reads_as_random(run: str) -> bool:
    """A run of 20+ token characters holding upper and lower case and digits, or 32+ holding letters and digits
    (hex keys): knob values and paths split into shorter words, and words are not that mixed."""
    has_digit = any(c.isdigit() for c in run)
    has_upper, has_lower = any(c.isupper() for c in run), any(c.islower() for c in run)
    return has_digit and ((has_upper and has_lower) or (len(run) >= 32 and (has_upper or has_lower)))


def _holds_random_run(value: str) -> bool:
    """A token-shaped run in `value`; a run with a word between its slashes is a path, judged part by part."""
    for match in TOKEN_RUN.finditer(value):
        run = match.group()
        parts = run.split("/")
        if len(parts) > 1 and any(PATH_WORD.fullmatch(part) for part in parts):
            if any(len(part) >= 20 and _reads_as_random(part) for part in parts):
                return True
        elif _reads_as_random(run):
            return True
    return False


def looks_like_credential(name: str, value: str) -> bool:
    return bool(CREDENTIAL_NAME.search(name) or CREDENTIAL_VALUE.search(value) or _holds_random_run(value))


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
# the variables under those names that a worker inherits: torch's and triton's documented switches for logging,
# caches, compilation and collectives (plus the recorded ones: PYTORCH_*_ALLOC_CONF, TORCHINDUCTOR_*). Any other
# (a made-up TORCH_BEARER) stays out of the worker; a scenario's own `env:` is the user's choice and passes.
TORCH_PASSED = frozenset({
    "TORCH_LOGS", "TORCH_LOGS_OUT", "TORCH_LOGS_FORMAT", "TORCH_TRACE", "TORCH_COMPILE_DEBUG",
    "TORCH_COMPILE_DEBUG_DIR", "TORCH_COMPILE_JOB_ID", "TORCHDYNAMO_VERBOSE", "TORCHDYNAMO_REPRO_AFTER",
    "TORCHDYNAMO_REPRO_LEVEL", "TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS", "TORCHDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS",
    "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
    "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING", "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM",
    "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE", "TORCHINDUCTOR_UNIQUE_KERNEL_NAMES", "TORCHINDUCTOR_BENCHMARK_KERNEL",
    "TORCHINDUCTOR_DEBUG", "TORCHINDUCTOR_TRACE", "TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_INTERPRET",
    "TRITON_PRINT_AUTOTUNING", "TRITON_DEBUG", "TORCH_HOME", "TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST",
    "TORCH_SHOW_CPP_STACKTRACES", "TORCH_CPP_LOG_LEVEL", "TORCH_DISTRIBUTED_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ENABLE_MONITORING", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_AVOID_RECORD_STREAMS",
    "TORCH_DEVICE_BACKEND_AUTOLOAD", "TORCH_USE_CUDA_DSA", "TORCH_FORCE_WEIGHTS_ONLY_LOAD",
    "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_NVML_BASED_CUDA_CHECK",
    "PYTORCH_JIT", *(name for name in RECORDED_NAMES if any(word in name for word in TORCH_COPIED)),
})


def torch_copied_credentials(environ: Mapping[str, str], chosen: Collection[str] = ()) -> list[str]:
    """The variables torch would write into a compile cache that a worker must go without: every name holding
    TORCH, DYNAMO, INDUCTOR or TRITON that is neither on `TORCH_PASSED` nor among `chosen` (the names a scenario
    sets itself), and every such name with a credential-shaped value (torch reads no credential under such a
    name; it would serve nothing there but a leak)."""
    return sorted(name for name, value in environ.items()
                  if any(word in name for word in TORCH_COPIED)
                  and ((name not in TORCH_PASSED and name not in chosen) or looks_like_credential(name, str(value))))


def withheld_text(count: int) -> str:
    return f"{count} variable{'s' * (count != 1)} withheld"


# ---- values written from a scenario ---------------------------------------------------------------------------
# A scenario's own `env:` (per sweep and per run) and its other values (recipe_extras, data_config.dataset_path,
# a model path) are written into scenario.json, sweep.json, runs/*/spec.json, results.jsonl, the report and a
# baseline. One rule masks them all, where they are written and where they are read (a folder written before it):
# - an `env:` mapping keeps every name, and the value of a name the allow-list would not record (off the list,
#   or credential-shaped) becomes `MASK`;
# - any other value under a key whose words name a credential (hf_token, api_key, db_password, auth) becomes
#   `MASK`, and so does any string of a credential shape (user:password@host, a known token prefix, token=).
MASK = "***"
# whole words of a key (split at _ - . and case changes): max_new_tokens and sweep.design are not credentials
CREDENTIAL_WORDS = frozenset({
    "token", "password", "passwd", "pwd", "pass", "passphrase", "secret", "secrets", "key", "apikey", "credential",
    "credentials", "cred", "creds", "auth", "authorization", "cookie", "bearer", "webhook", "signature", "sig",
    "sas", "pat", "private", "dsn"})


def credential_key(key: str) -> bool:
    words = re.split(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])", key)
    return any(word.lower() in CREDENTIAL_WORDS for word in words)


def masked_env(env: Mapping[str, object]) -> dict[str, str]:
    """A scenario's (or a run's) own `env:` as written: every name, and `MASK` for each value the allow-list
    would withhold."""
    return {str(name): str(value) if is_recorded(str(name), str(value)) else MASK for name, value in env.items()}


def masked_values(data: Any) -> Any:
    """`data` (a scenario as a dict, or any part of one) with the scenario masking rule applied throughout."""
    if isinstance(data, Mapping):
        out: dict[Any, Any] = {}
        for key, value in data.items():
            if key == "env" and isinstance(value, Mapping):
                out[key] = masked_env(value)
            elif credential_key(str(key)) and value not in (None, "", [], {}) and not isinstance(value, bool):
                out[key] = MASK
            else:
                out[key] = masked_values(value)
        return out
    if isinstance(data, list | tuple):
        return [masked_values(value) for value in data]
    if isinstance(data, str) and CREDENTIAL_VALUE.search(data):
        return MASK
    return data
