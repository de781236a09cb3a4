"""One run's record: its spec (what to measure), its plan (what ran) and its result (what was measured)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from model.toggles import TOGGLE_NAMES, ToggleDecision
from perfbench.results.env_allowlist import masked_env
from perfbench.results.expert_load import worst_imbalance
from perfbench.results.records import (
    SUMMARY_KEYS,
    BlockPlacement,
    Environment,
    ExpertLoad,
    Failure,
    Numerics,
    Stability,
    StageSeconds,
    Status,
    Summary,
    TraceRecord,
)
from perfbench.results.validation import json_kind, record_error
from perfbench.results.versions import SCHEMA_VERSION, migrate
from perfbench.terminal_text import escaped

if TYPE_CHECKING:
    from model.optimizations import Plan

STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]

CSV_COLUMNS = (
    "run_id", "status", "error", "scenario", "device", "world_size", "dtype", "model", "batch_size", "input_len",
    "output_len", "ragged",
    *(f"req.{t}" for t in TOGGLE_NAMES), *(f"eff.{t}" for t in TOGGLE_NAMES),
    *SUMMARY_KEYS,
    "stop_reason", "stable", "unstable_reason", "round", "combination",
    "max_rel_error", "max_abs_logit_diff",
    "tokens_match", "decode_ops_per_step", "moe_imbalance_prefill", "moe_imbalance_decode", "wall_s",
    "failure_kind", "failure_reason",
)


def _validated(model: type[BaseModel], raw: Any, where: str) -> Any:
    """`raw` (parsed JSON) as `model`, strictly: a wrong type or an unknown key is one ValueError line."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {json_kind(raw)}")
    try:
        return model.model_validate(raw, strict=True)
    except ValidationError as err:
        raise ValueError(record_error(err, where, model)) from None


def _printable_name(value: str) -> str:
    """A name every output line and table carries: a line break in one would forge a line ("PASS ...")."""
    if value != escaped(value):
        raise ValueError(f"holds a control character ({escaped(value)[:60]}): not a name perfbench gives")
    return value


class RunSpec(BaseModel):
    """One run: a toggle combination x a workload shape, with everything needed to repeat it."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    run_id: str
    scenario: str
    device: str = "cpu"
    dtype: str = "float32"
    model: str = "tiny"  # preset name or checkpoint folder
    num_layers: int | None = None
    with_ckpt: bool = False  # False: dummy random weights (seeded), even for a checkpoint folder's config
    seed: int = 0
    batch_size: int = 1
    input_len: int = 128
    output_len: int = 16
    ragged: bool = False  # prompts of different lengths (input_len is the longest)
    # drawn from a length distribution (perfbench.workload.lengths): each request's prompt length, and the output
    # length it asked for (every sequence decodes output_len - 1 steps, the longest asked: no early stop)
    prompt_lens: list[int] | None = None
    requested_output_lens: list[int] | None = None
    toggles: dict[str, bool] = Field(default_factory=dict)  # requested
    parallel: dict[str, int] = Field(default_factory=dict)  # ParallelConfig fields
    exe_mode: str = "ge_graph"
    enable_cache_compile: bool = False
    warmup: int = 1
    iterations: int = 5  # timed iterations at least (a fixed count when max_iterations is None)
    max_iterations: int | None = None  # adaptive stopping (perfbench/measure/stopping.py) up to this many
    max_time_s: float | None = None  # ... or until this much timing
    target_rel_ci: float | None = None  # ... or until the 95 % CI of each median is this narrow (relative)
    round: int = 1  # interleaved rounds: this run's round (1-based) ...
    rounds: int = 1  # ... of how many
    combination: str = ""  # the run_id shared by every round of this combination ("" = run_id)
    # "blocks": timed in interleaved blocks with the other runs of `block_group` (perfbench/measure/blocks.py);
    # "separate": timed on its own (its own window; rounds interleave the runs)
    # "ab": timed pair by pair by `perfbench ab` (run/ab.py)
    timing: Literal["blocks", "separate", "ab"] = "separate"
    block_group: str = ""
    profile: bool = True
    # the NPU profiler's export: "text", or "db" (its ascend_pytorch_profiler_{rank}.db is then what is read)
    profile_export_type: Literal["text", "db"] = "text"
    profile_decode_steps: int | None = None  # decode steps of the profiled iteration (None: output_len)
    trace_export: bool = False  # a normalized chrome trace beside the raw one (trace/export/trace.json.gz)
    numerics_check: bool = True
    timeout_s: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    # toggle -> effective state the runner resolved; the worker refuses to measure a plan that differs
    # (its own detection may see another device through spec.env). Empty: not checked.
    expected_plan: dict[str, str] = Field(default_factory=dict)

    _printable = field_validator("run_id", "scenario", "combination", "block_group")(_printable_name)

    @property
    def world_size(self) -> int:
        return int(self.parallel.get("world_size", 1))

    @property
    def combination_id(self) -> str:
        return self.combination or self.run_id

    def requested_on(self) -> frozenset[str]:
        return frozenset(t for t, on in self.toggles.items() if on)

    def plan_mismatch(self, plan: RunPlan) -> str:
        """Why `plan` (the worker's) is not the plan the runner resolved for this run; "" when it is."""
        if not self.expected_plan:
            return ""
        got = plan.states()
        diffs = [f"{t} {want} -> {got.get(t) or 'missing'}" for t, want in self.expected_plan.items()
                 if got.get(t) != want]
        diffs += [f"{t} not in the runner's plan" for t in got if t not in self.expected_plan]
        if not diffs:
            return ""
        return (f"run {self.run_id}: the worker resolved a different plan than the runner ({'; '.join(diffs)}); "
                f"its device detection differs (see the run's env: {sorted(self.env) or 'none'})")

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with `changes`, validated."""
        return RunSpec.model_validate({**self.model_dump(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """The spec as written (spec.json, results.jsonl): its own `env:` masked (results/env_allowlist.py); the
        worker gets the variables from its environment, never from the file."""
        return {**self.model_dump(mode="json"), "env": masked_env(self.env)}

    @classmethod
    def from_dict(cls, raw: Any, where: str = "spec") -> RunSpec:
        """A spec as read; a folder written before the masking rule loses its credentials here too."""
        spec: RunSpec = _validated(cls, raw, where)
        masked = masked_env(spec.env)
        return spec if masked == spec.env else spec.replace(env=masked)


class DecisionRecord(BaseModel):
    """One toggle's decision as written: name, reason and impl may be left out (older records)."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    requested: bool
    state: Literal["on", "off", "inactive"]
    reason: str = ""
    impl: str = ""


class RunPlan:
    """The effective plan of a run: toggle -> ToggleDecision (state, reason, implementation). Empty when no
    plan was resolved (a run that failed before building its model)."""

    def __init__(self, decisions: dict[str, ToggleDecision] | None = None) -> None:
        self.decisions: dict[str, ToggleDecision] = dict(decisions or {})

    @classmethod
    def of(cls, plan: Plan) -> RunPlan:
        """The record of a resolved plan."""
        return cls(dict(plan.decisions))

    def __bool__(self) -> bool:
        return bool(self.decisions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunPlan) and self.decisions == other.decisions

    def __repr__(self) -> str:
        return f"RunPlan({self.states()})"

    def state(self, toggle: str) -> str:
        """"on", "off", "inactive", or "" when the plan does not mention the toggle."""
        decision = self.decisions.get(toggle)
        return decision.state if decision else ""

    def on(self, toggle: str) -> bool:
        return self.state(toggle) == "on"

    def effective_on(self) -> frozenset[str]:
        return frozenset(t for t, d in self.decisions.items() if d.state == "on")

    def states(self) -> dict[str, str]:
        return {t: d.state for t, d in self.decisions.items()}

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {t: asdict(d) for t, d in self.decisions.items()}

    @classmethod
    def from_dict(cls, raw: Any, where: str = "plan") -> RunPlan:
        if not isinstance(raw, dict):
                raise ValueError(f"{where}: expected an object, got {json_kind(raw)}")
        decisions = {}
        for toggle, entry in raw.items():
            decision = _validated(DecisionRecord, entry, f"{where}.{toggle}")
            if decision.name not in ("", toggle):
                raise ValueError(f"{where}.{toggle}: name {decision.name!r} differs from its key")
            decisions[toggle] = ToggleDecision(toggle, decision.requested, decision.state, decision.reason,
                                               decision.impl)
        return cls(decisions)


class WorkloadShape(BaseModel):
    """What a run computed apart from its toggles: runs are only comparable within one shape."""

    model_config = ConfigDict(frozen=True)

    model: str
    device: str
    dtype: str
    world_size: int
    batch_size: int
    input_len: int
    output_len: int
    ragged: bool

    def _key(self) -> tuple[Any, ...]:
        return tuple(self.model_dump().values())

    def __lt__(self, other: WorkloadShape) -> bool:
        return self._key() < other._key()

    def label(self) -> str:
        ragged = " ragged" if self.ragged else ""
        return (f"{self.model} {self.device} {self.dtype} ws={self.world_size} bs={self.batch_size} "
                f"in={self.input_len}{ragged} out={self.output_len}")


class RunResult(BaseModel):
    """A run's record: spec, plan, raw samples and the typed parts (records.py). One line of results.jsonl."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    run_id: str
    status: Status
    spec: RunSpec
    error: str | None = None
    plan: RunPlan = Field(default_factory=RunPlan)
    # raw samples, milliseconds, one per timed iteration (the statistical unit): ttft_ms, tpot_ms (the mean
    # of that iteration's decode steps); tpot_steps_ms: every decode step, for distribution plots only
    samples: dict[str, list[float]] = Field(default_factory=dict)
    summary: Summary = Field(default_factory=Summary)
    numerics: Numerics = Field(default_factory=Numerics)
    trace: TraceRecord = Field(default_factory=TraceRecord)
    env: Environment = Field(default_factory=Environment)
    started_at: str = ""
    wall_s: float = 0.0
    stages: StageSeconds = Field(default_factory=StageSeconds)  # where wall_s went (older records: empty)
    stop_reason: str = ""  # why timing stopped: converged / max_iterations / max_time (perfbench/measure/stopping.py)
    stability: Stability = Field(default_factory=Stability)  # empty when not judged (a failed run)
    expert_load: ExpertLoad = Field(default_factory=ExpertLoad)  # empty when not recorded
    blocks: BlockPlacement = Field(default_factory=BlockPlacement)  # empty for a run timed on its own
    failure: Failure = Field(default_factory=Failure)  # empty for a run that measured what it was asked

    _printable = field_validator("run_id")(_printable_name)

    # ---- views -----------------------------------------------------------------------------------
    def shape(self) -> WorkloadShape:
        s = self.spec
        return WorkloadShape(model=str(s.model), device=s.device, dtype=s.dtype, world_size=s.world_size,
                             batch_size=s.batch_size, input_len=s.input_len, output_len=s.output_len,
                             ragged=s.ragged)

    def effective_on(self) -> frozenset[str]:
        """Toggles whose effective state is "on" in the run's plan."""
        return self.plan.effective_on()

    def ran_on(self) -> frozenset[str]:
        """What actually ran: the plan's "on" toggles, the request when no plan was recorded."""
        return self.plan.effective_on() if self.plan else self.spec.requested_on()

    def selector_field(self, name: str) -> Any:
        """A selector field: a spec key, world_size, req.<toggle> (bool) or eff.<toggle> (state)."""
        if name.startswith("req."):
            return bool(self.spec.toggles.get(name[4:], False))
        if name.startswith("eff."):
            return self.plan.state(name[4:])
        if name == "world_size":
            return self.spec.world_size
        return getattr(self.spec, name, None)

    def is_stable(self) -> bool | None:
        """The run's stability verdict; None when none was recorded."""
        return self.stability.stable

    def metric(self, name: str) -> float | None:
        """A summary metric named by a string (SUMMARY_KEYS), None when not recorded: the one door for a metric
        that a gate rule, a compare or an attribution names; code that knows the field reads the attribute."""
        value = getattr(self.summary, name) if name in Summary.model_fields else None
        return None if value is None else float(value)

    def finite_samples(self, key: str) -> list[float]:
        """Raw samples under `key` without NaN/inf (a broken timer must not break every statistic)."""
        return [float(x) for x in self.samples.get(key, []) if x is not None and math.isfinite(x)]

    def replace(self, **changes: Any) -> RunResult:
        """A copy with `changes` (validated like an assignment)."""
        copy = self.model_copy(deep=True)
        for name, value in changes.items():
            setattr(copy, name, value)
        return copy

    # ---- files -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for name in type(self).model_fields:
            value = getattr(self, name)
            out[name] = value.to_dict() if hasattr(value, "to_dict") else value
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str = "result") -> RunResult:
        """A record of any known schema version (older ones migrated); unknown keys and wrong types refused."""
        raw = migrate(raw, where)
        fields = {k: v for k, v in raw.items() if k not in ("schema_version", "plan", "spec")}
        spec = RunSpec.from_dict(raw.get("spec", {}), f"{where}.spec")
        plan = RunPlan.from_dict(raw.get("plan") or {}, f"{where}.plan")
        try:
            return cls.model_validate({**fields, "spec": spec, "plan": plan}, strict=True)
        except ValidationError as err:
            raise ValueError(record_error(err, where, cls)) from None

    def csv_row(self) -> dict[str, Any]:
        spec = self.spec
        row: dict[str, Any] = {
            "run_id": self.run_id, "status": self.status, "error": (self.error or "").splitlines()[-1:][0]
            if self.error else "",
            "scenario": spec.scenario, "device": spec.device, "world_size": spec.world_size, "dtype": spec.dtype,
            "model": spec.model, "batch_size": spec.batch_size, "input_len": spec.input_len,
            "output_len": spec.output_len, "ragged": spec.ragged,
        }
        for t in TOGGLE_NAMES:
            row[f"req.{t}"] = bool(spec.toggles.get(t, False))
            row[f"eff.{t}"] = self.plan.state(t)
        row.update(self.summary.model_dump(include=set(SUMMARY_KEYS)))
        row["stop_reason"] = self.stop_reason
        row["stable"] = "" if self.stability.stable is None else self.stability.stable
        row["unstable_reason"] = self.stability.reason
        row["round"] = spec.round
        row["combination"] = spec.combination_id
        row["max_rel_error"] = self.numerics.max_rel_error
        row["max_abs_logit_diff"] = self.numerics.max_abs_logit_diff
        row["tokens_match"] = self.numerics.tokens_match
        row["decode_ops_per_step"] = self.trace.decode_ops_per_step
        for phase in ("prefill", "decode"):
            imbalance = worst_imbalance(self.expert_load, phase)
            row[f"moe_imbalance_{phase}"] = None if imbalance is None else round(imbalance, 3)
        row["wall_s"] = round(self.wall_s, 3)
        row["failure_kind"] = self.failure.kind or ""
        row["failure_reason"] = self.failure.reason
        return row
