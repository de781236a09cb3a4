"""The typed parts of a result record: what a run measured besides its spec, plan and raw samples.

Each part is a pydantic model that refuses unknown fields, with its defaults here and nowhere else. A part
nothing wrote is empty (no field set): `bool(part)` says whether it was recorded, and only the fields that
were set are written, so a record round-trips to the same JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from perfbench.git_refs import recorded_commit_problem
from perfbench.results.env_allowlist import recorded_env


def _recorded_commit(value: str | None) -> str | None:
    # a recorded commit reaches git (history's ordering, gate --confirm's ab job): never an option or a revision
    if problem := recorded_commit_problem(value):
        raise ValueError(problem)
    return value


RecordedCommit = Annotated[str | None, AfterValidator(_recorded_commit)]


class Record(BaseModel):
    """Base of every part: unknown fields refused, assignments validated, JSON of the fields that were set."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def __bool__(self) -> bool:
        return bool(self.model_fields_set)

    def update(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class Summary(Record):
    """Per-run statistics of the timed iterations and the host during them (milliseconds, tokens/s, MB)."""

    ttft_ms_median: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    tpot_ms_median: float | None = None
    tpot_ms_p90: float | None = None
    tpot_ms_p99: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    compile_s: float | None = None  # the first decode compile under graph_mode
    compile_warm_s: float | None = None  # a second compile from the warm cache (enable_cache_compile)
    first_ttft_ms: float | None = None  # the first prefill: builds the plan's compiled kernels
    # every timed decode step apart (samples.tpot_steps_ms): the tail a user feels (analysis/tail.py)
    decode_step_ms_p50: float | None = None
    decode_step_ms_p50_ci_low: float | None = None
    decode_step_ms_p50_ci_high: float | None = None
    decode_step_ms_p99: float | None = None
    decode_step_ms_p99_ci_low: float | None = None
    decode_step_ms_p99_ci_high: float | None = None
    peak_mem_mb: float | None = None  # device allocator peak; CPU: the process's peak resident set
    mem_weights_mb: float | None = None  # parameters and buffers (measure/memory_split.py)
    mem_state_mb: float | None = None  # KV cache + GDN conv and recurrent state
    mem_rest_mb: float | None = None  # peak - weights - state: activations, workspace (CPU: + the process)
    mem_graph_pool_mb: float | None = None  # CUDA graph private pools; None where the device does not say
    host_other_cores: float | None = None  # cores other processes used while timing (host_load.py)
    host_steal_cores: float | None = None
    host_spare_cores: float | None = None
    host_loadavg_1m: float | None = None
    host_cpus: float | None = None
    host_cpu_mhz_min: float | None = None
    host_cpu_mhz_max: float | None = None
    host_mem_pressure_avg10: float | None = None
    host_mem_available_frac: float | None = None
    host_speed_change: float | None = None  # the host probe's last / first time (host_probe.py)
    iterations: float | None = None
    compile_cache_warm: float | None = None  # 1.0: the compile cache already held this plan's kernels


SUMMARY_KEYS = tuple(Summary.model_fields)


# Largest relative error (perfbench/measure/numerics.py) of one layer branch or of the logits, in a run that replays
# the all-off reference's tokens, expert choices and layer inputs, that still counts as computing the same model,
# per dtype: the gate's default and the bound of a run's `numerics_fail`. Calibrated on every legit toggle and on
# planted 2-5 % kernel faults (docs/numerics.md).
REL_ERROR_TOLERANCE = {"float32": 1e-3, "float16": 3e-3, "bfloat16": 1.4e-2}


class Numerics(Record):
    """The run against the all-off reference on the same prompts, the run replaying the reference's greedy tokens,
    expert choices and each layer's inputs, so that every layer, row and step is compared (measure/numerics.py)."""

    max_rel_error: float | None = None  # the largest relative error of one (phase, layer, branch) or the logits
    worst_phase: str | None = None  # where it was: "prefill" or "decode"
    worst_layer: int | None = None  # None: the logits
    worst_branch: str | None = None  # "mixer", "moe" or "logits"
    max_rel_logit_error: float | None = None
    max_abs_logit_diff: float | None = None
    top1_agreement: float | None = None  # share of (row, step) whose greedy token equals the reference's
    tokens_match: bool | None = None  # every greedy token equals the reference's (information under replay)
    first_mismatch_step: int | None = None
    compared: int | None = None  # rows x steps compared
    # the run's own routing against the reference's, as information (perfbench/measure/routing_flips.py): how many
    # (token, layer) choices differ, the first step (0 = prefill) where one did, the widest reference margin
    routing_flips: int | None = None
    routing_flip_step: int | None = None
    routing_flip_margin: float | None = None
    not_compared: str | None = None  # why a run that asked for numerics has none: a gate FAIL, never a skip
    reference: str | None = None  # what the reference was

    @field_validator("max_rel_error", "max_rel_logit_error", "max_abs_logit_diff")
    @classmethod
    def _an_error_is_not_negative(cls, value: float | None) -> float | None:
        # NaN stays (a broken comparison, which the gate fails); a negative error no comparison gives, and a sign
        # bug (or a hand edit) that wrote one would pass every numerics gate
        if value is not None and value < 0:
            raise ValueError(f"holds {value!r}: an error is never negative")
        return value

    @field_validator("top1_agreement")
    @classmethod
    def _a_share(cls, value: float | None) -> float | None:
        if value is not None and not 0 <= value <= 1 and not math.isnan(value):
            raise ValueError(f"holds {value!r}: a share is between 0 and 1")
        return value

    @field_validator("worst_layer", "first_mismatch_step", "compared", "routing_flips", "routing_flip_step")
    @classmethod
    def _a_count(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError(f"holds {value!r}: a count, a layer or a step is never negative")
        return value

    @property
    def where(self) -> str:
        layer = "" if self.worst_layer is None else f"layer {self.worst_layer} "
        return f"{self.worst_phase} {layer}{self.worst_branch}"


class PlanCheckLine(Record):
    """One toggle's verdict of the trace against the plan (profiling/plan_check.py)."""

    toggle: str
    state: str
    ok: bool | None
    line: str


class ModeCheckLine(Record):
    """The profiled decode steps against the planned execution mode (profiling/graph_mode.py)."""

    mode: str
    ok: bool | None
    line: str
    decode_steps: int = 0
    replay_steps: int = 0


class TraceRecord(Record):
    """What the profiled iteration left: where the trace and tables are, op counts, the plan check."""

    dir: str | None = None  # relative to the run folder
    tables: list[str] = Field(default_factory=list)
    decode_ops_per_step: float | None = None
    decode_steps: int | None = None  # decode steps of the profiled iteration (fewer than timed: profile_decode_steps)
    op_counts_per_decode_step: dict[str, float] = Field(default_factory=dict)
    layer_scopes: bool | None = None  # False: graph mode, no per-layer scopes in the trace
    mode: str | None = None  # the execution mode measured: eager, inductor, cuda_graphs, ge_graph, npugraph_ex
    emulation: str | None = None  # "emulated npu (<platform>)" when the NPU emulator took the trace
    mode_check: ModeCheckLine | None = None
    plan_check: list[PlanCheckLine] = Field(default_factory=list)
    plan_mismatches: list[str] = Field(default_factory=list)
    cluster: dict[str, Any] = Field(default_factory=dict)  # per-rank means and the slowest rank (multi-rank)
    roofline_error: str | None = None
    export: str | None = None  # the normalized chrome trace for Perfetto (profiling/export.py), relative
    export_error: str | None = None  # the export failed; the tables stand
    error: str | None = None  # the trace could not be taken or parsed; the timed numbers stand


class MetricStability(Record):
    stable: bool | None = None
    reason: str = ""


class Stability(Record):
    """The run's stability verdict (analysis/stability.py), overall and per metric."""

    stable: bool | None = None
    reason: str = ""
    metrics: dict[str, MetricStability] = Field(default_factory=dict)


class CodeOrigin(Record):
    """Where one process of a run imported one of the project's packages from (measure/code_origin.py)."""

    package: str  # "model" or "perfbench"
    path: str  # the package's folder
    git_sha: RecordedCommit = None  # the commit of the checkout holding it; "unknown" outside one
    git_dirty: bool | None = None  # tracked files of that checkout differ from the commit
    rank: int = 0  # the process's global rank (0 for a single-process run)
    hostname: str | None = None


class Environment(Record):
    """What a run was measured on (measure/environment.py). Every field may be unknown (null)."""

    git_sha: RecordedCommit = None
    git_dirty: bool | None = None
    python: str | None = None
    python_executable: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    cann: str | None = None
    transformers: str | None = None
    torchair: str | None = None
    device: str | None = None
    device_name: str | None = None
    device_count: int | None = None
    emulation: str | None = None  # "emulated npu (<platform>)" when the NPU emulator ran the run
    torch_threads: int | None = None
    torch_interop_threads: int | None = None
    # why torch_threads is below torch's own count: other processes held cores when the job started
    # (measure/thread_budget.py); None when it was not lowered
    threads_note: str | None = None
    env: dict[str, str] = Field(default_factory=dict)  # the variables that change a measurement
    env_withheld: int | None = None  # how many variables the allow-list withheld (results/env_allowlist.py)
    executor: str | None = None
    hostname: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    platform: str | None = None
    date: str | None = None
    # `perfbench ab` (run/ab.py): which arm, its ref, and the model/ package it imported
    ab_arm: str | None = None
    ab_ref: str | None = None
    model_package: str | None = None
    # where each process of the run imported model/ and perfbench/ from: one entry per package and rank
    code: list[CodeOrigin] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _allowed_env_only(cls, data: Any) -> Any:
        # every record read or written passes the allow-list: a folder recorded before it (or by hand) loses its
        # credentials in reports, CSVs and baselines too; what is dropped here adds to the count
        if not isinstance(data, Mapping) or not isinstance(data.get("env"), Mapping):
            return data
        allowed = recorded_env(data["env"])
        dropped = len(data["env"]) - len(allowed.env)  # any name off the list counts here: it was written, not set
        if not dropped:
            return data
        return {**data, "env": allowed.env, "env_withheld": (data.get("env_withheld") or 0) + dropped}


class BlockPlacement(Record):
    """Where an interleaved run's timed iterations sat (measure/blocks.py): block index per iteration."""

    group: str = ""
    process: str = ""  # the timing process: "<pid>-<random>"
    index: list[int] = Field(default_factory=list)
    epoch: list[int] = Field(default_factory=list)  # the re-allocation epoch per iteration (older records: none)
    # the iteration's place in its block's random order (0 = first; older records: none): how far apart in time
    # a pair's two iterations were
    position: list[int] = Field(default_factory=list)
    runs: int = 0
    blocks: int = 0
    # each epoch's seed (perfbench/measure/epoch_engine.py): the orders and spacers of a replay (older: none)
    epoch_seeds: list[int] = Field(default_factory=list)


class StageSeconds(Record):
    """Where a run's wall time went, stage by stage (perfbench/measure/run_steps.py), so a slow host can be told
    what is slow: the all-off reference, the build, the warm-up (the compile is in it, also in `Summary.compile_s`),
    the timing (a block group's timing is shared: each run of the group records the group's), the numerics replay,
    the expert-load iteration and the profiled iteration."""

    reference_s: float | None = None
    build_s: float | None = None
    warmup_s: float | None = None
    timing_s: float | None = None
    numerics_s: float | None = None
    expert_load_s: float | None = None
    profile_s: float | None = None


class LayerCounts(Record):
    phase: str
    layer: int
    experts: list[int]


class ExpertLoad(Record):
    """Per-expert routing counts of every MoE layer (analysis/expert_load.py)."""

    counted: str | None = None  # which iteration was counted
    num_experts: int | None = None
    top_k: int | None = None
    ep_size: int | None = None
    counts: list[LayerCounts] = Field(default_factory=list)
    experts_by_rank: list[list[int]] = Field(default_factory=list)  # [first, stop) per EP rank
    not_recorded: dict[str, str] = Field(default_factory=dict)  # phase -> why


Status = Literal["ok", "error", "timeout", "killed"]

# Why a run did not give a trustworthy measurement (measure/failure_kinds.py decides):
#   startup_fail    import, model build, plan check or compile failed before timing
#   plan_refused    a requested toggle never took effect (inactive, with its reason), or the worker's plan
#                   differed from the runner's; an ok run keeps its numbers, measured without that toggle
#   benchmark_fail  timing or profiling failed, or the process died without a result
#   timeout         the run outlived its timeout_s and was killed
#   oom             out of memory (device or host)
#   numerics_fail   the logits left the dtype's tolerance against the all-off reference, or tokens differ
FailureKind = Literal["startup_fail", "plan_refused", "benchmark_fail", "timeout", "oom", "numerics_fail"]
FAILURE_KINDS: tuple[str, ...] = FailureKind.__args__  # type: ignore[attr-defined]


class Failure(Record):
    """A run's failure kind and a one-line reason; empty for a run that measured what it was asked."""

    kind: FailureKind | None = None
    reason: str = ""
