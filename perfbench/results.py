"""Result files: the schema every later stage (report, compare, gate) reads, written atomically.

A result folder holds
  results.jsonl   one `RunResult` object per line (raw samples included)
  results.csv     one row per run (`CSV_COLUMNS` + req./eff. toggle columns)
  runs/<run_id>/  result.json, worker.log, trace/ (profiler output), tables/*.csv (parsed trace tables)
  scenario.json   the validated scenario the runs came from
  compile_cache/  the sweep's shared compile cache (inductor; per combination on NPU)

Every record carries `schema_version` (SCHEMA_VERSION): older records are migrated on load, newer ones and
unknown keys are refused, so a committed baseline cannot drift without a clear error.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import tempfile
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, get_type_hints

from model.toggles import TOGGLE_NAMES, ToggleDecision
from perfbench.errors import UserError

if TYPE_CHECKING:
    from model.optimizations import Plan

STATUSES = ("ok", "error", "timeout", "killed")

SUMMARY_KEYS = (
    "ttft_ms_median", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_median", "tpot_ms_p90", "tpot_ms_p99",
    "prefill_tok_s", "decode_tok_s", "compile_s", "compile_warm_s", "first_ttft_ms", "peak_mem_mb",
    "host_other_cores", "host_steal_cores", "host_spare_cores", "host_loadavg_1m", "host_cpus", "host_cpu_mhz_min",
    "host_cpu_mhz_max", "host_mem_pressure_avg10", "host_mem_available_frac", "host_speed_change", "iterations",
    "compile_cache_warm",
)

CSV_COLUMNS = (
    "run_id", "status", "error", "scenario", "device", "world_size", "dtype", "model", "batch_size", "input_len",
    "output_len", "ragged",
    *(f"req.{t}" for t in TOGGLE_NAMES), *(f"eff.{t}" for t in TOGGLE_NAMES),
    "ttft_ms_median", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_median", "tpot_ms_p90", "tpot_ms_p99",
    "prefill_tok_s", "decode_tok_s", "compile_s", "compile_warm_s", "first_ttft_ms", "peak_mem_mb",
    "host_other_cores", "host_steal_cores", "host_spare_cores", "host_loadavg_1m", "host_cpus", "host_cpu_mhz_min",
    "host_cpu_mhz_max", "host_mem_pressure_avg10", "host_mem_available_frac", "host_speed_change", "iterations",
    "compile_cache_warm",
    "stop_reason", "stable", "unstable_reason", "round", "combination",
    "max_abs_logit_diff",
    "tokens_match", "decode_ops_per_step", "moe_imbalance_prefill", "moe_imbalance_decode", "wall_s",
)


SCHEMA_VERSION = 5
# Versions of a result record (one line of results.jsonl, or result.json):
#   1  no `schema_version` key; otherwise the fields of version 2 without `spec.expected_plan`
#   2  `schema_version`, `spec.expected_plan` (the runner's resolved plan, checked by the worker)
#   3  samples.tpot_ms one per iteration (samples.tpot_steps_ms: every step); stop_reason, stability; spec
#      adaptive-stopping and round fields
#   4  expert_load: per-expert MoE routing counts (perfbench/analysis/expert_load.py); {} in older records
#   5  blocks (interleaved block indices, perfbench/run/blocks.py), spec.timing and spec.block_group; older
#      records were timed on their own: {}, "separate", ""
# `migrate` brings an older record up to SCHEMA_VERSION; a newer one is refused.


def _checked_keys(cls: type, raw: dict[str, Any], where: str) -> dict[str, Any]:
    """`raw` as keyword arguments of the dataclass `cls`; an unknown key is an error, never dropped."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    known = cls.__dataclass_fields__
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(known)})")
    missing = [name for name, f in known.items() if name not in raw
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where}: missing key {missing[0]!r}")
    hints = _FIELD_TYPES.get(cls)
    if hints is None:
        hints = _FIELD_TYPES[cls] = get_type_hints(cls)
    for name, value in raw.items():
        tp = hints[name]
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):  # nested records check themselves
            _check_type(value, tp, f"{where}.{name}")
    return raw


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def _json_kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _check_type(value: Any, tp: Any, where: str) -> None:
    """ValueError(`where: expected ..., got ...`) unless `value` (parsed JSON) is a `tp` (a field annotation:
    str, int, float, bool, X | None, Literal, list[X], dict[str, X], Any). A record of the wrong types that is
    valid JSON is an input error on load, not a crash in whatever reads the field later."""
    origin = get_origin(tp)
    if tp is Any:
        return
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return
        problems = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _check_type(value, option, where)
            except ValueError as err:
                problems.append(err)
        raise problems[0]
    if origin is Literal:
        if value not in get_args(tp):
            raise ValueError(f"{where}: expected one of {', '.join(map(str, get_args(tp)))}, got {value!r}")
        return
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {_json_kind(value)} {value!r:.40}")
        (item,) = get_args(tp)
        for i, element in enumerate(value):
            _check_type(element, item, f"{where}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {_json_kind(value)} {value!r:.40}")
        _, item = get_args(tp)
        for key, element in value.items():
            _check_type(element, item, f"{where}.{key}")
        return
    expected = {str: (str,), bool: (bool,), int: (int,), float: (int, float)}.get(tp)
    if expected is None:
        return  # a type this check does not know: left to the dataclass
    if isinstance(value, bool) and tp is not bool or not isinstance(value, expected):
        what = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}[tp]
        raise ValueError(f"{where}: expected {what}, got {_json_kind(value)} {value!r:.40}")


# ---- MoE expert load: views on RunResult.expert_load (written by perfbench/analysis/expert_load.py) --------

@dataclass(frozen=True)
class LayerLoad:
    """One MoE layer in one phase. `imbalance` = max / mean assignments per expert (1.0: perfectly even; the
    slowest expert, and under EP the slowest rank, does `imbalance` times the mean work)."""

    phase: str
    layer: int
    assignments: int  # tokens x top_k
    max_per_expert: int
    mean_per_expert: float
    hottest_expert: int
    rank_totals: tuple[int, ...]  # assignments to each EP rank's experts

    @property
    def imbalance(self) -> float | None:
        return self.max_per_expert / self.mean_per_expert if self.mean_per_expert else None

    @property
    def rank_imbalance(self) -> float | None:
        """Max / mean assignments per EP rank (None with one rank)."""
        if len(self.rank_totals) < 2 or not self.assignments:
            return None
        return max(self.rank_totals) / (self.assignments / len(self.rank_totals))


def layer_loads(record: Mapping[str, Any]) -> list[LayerLoad]:
    """Every (phase, layer) of a record, in recorded order; [] for an empty record (not recorded)."""
    blocks = record.get("experts_by_rank") or []
    out = []
    for entry in record.get("counts") or []:
        hits = [int(c) for c in entry["experts"]]
        total = sum(hits)
        peak = max(hits) if hits else 0
        out.append(LayerLoad(
            phase=entry["phase"], layer=int(entry["layer"]), assignments=total, max_per_expert=peak,
            mean_per_expert=total / len(hits) if hits else 0.0, hottest_expert=hits.index(peak) if hits else -1,
            rank_totals=tuple(sum(hits[first:stop]) for first, stop in blocks)))
    return out


def worst_imbalance(record: Mapping[str, Any], phase: str) -> float | None:
    """The largest per-layer imbalance (max / mean per expert) of `phase`; None when not recorded."""
    values = [load.imbalance for load in layer_loads(record) if load.phase == phase and load.imbalance is not None]
    return max(values) if values else None


@dataclass
class RunSpec:
    """One run: a toggle combination x a workload shape, with everything needed to repeat it."""

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
    toggles: dict[str, bool] = field(default_factory=dict)  # requested
    parallel: dict[str, int] = field(default_factory=dict)  # ParallelConfig fields
    exe_mode: str = "ge_graph"
    enable_cache_compile: bool = False
    warmup: int = 1
    iterations: int = 5  # timed iterations at least (a fixed count when max_iterations is None)
    max_iterations: int | None = None  # adaptive stopping (perfbench/run/stopping.py) up to this many
    max_time_s: float | None = None  # ... or until this much timing
    target_rel_ci: float | None = None  # ... or until the 95 % CI of each median is this narrow (relative)
    round: int = 1  # interleaved rounds: this run's round (1-based) ...
    rounds: int = 1  # ... of how many
    combination: str = ""  # the run_id shared by every round of this combination ("" = run_id)
    # "blocks": timed in interleaved blocks with the other runs of `block_group` (perfbench/run/blocks.py);
    # "separate": timed on its own (its own window; rounds interleave the runs)
    timing: str = "separate"
    block_group: str = ""
    profile: bool = True
    profile_export_type: str = "text"  # the NPU profiler's export: "text" or "db" (its .db is then what is read)
    numerics_check: bool = True
    timeout_s: float = 600.0
    env: dict[str, str] = field(default_factory=dict)
    # toggle -> effective state the runner resolved; the worker refuses to measure a plan that differs
    # (its own detection may see another device through spec.env). Empty: not checked.
    expected_plan: dict[str, str] = field(default_factory=dict)

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "spec") -> RunSpec:
        return cls(**_checked_keys(cls, raw, where))


@dataclass
class RunPlan:
    """The effective plan of a run: toggle -> ToggleDecision (state, reason, implementation). Empty when no
    plan was resolved (a run that failed before building its model)."""

    decisions: dict[str, ToggleDecision] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan) -> RunPlan:
        """The record of a resolved plan."""
        return cls(dict(plan.decisions))

    def __bool__(self) -> bool:
        return bool(self.decisions)

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
    def from_dict(cls, raw: dict[str, Any], where: str = "plan") -> RunPlan:
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
        decisions = {}
        for toggle, entry in raw.items():
            if not isinstance(entry, dict):
                raise ValueError(f"{where}.{toggle}: expected an object, got {type(entry).__name__}")
            name = entry.get("name", toggle)
            if name != toggle:
                raise ValueError(f"{where}.{toggle}: name {name!r} differs from its key")
            decision = {"name": toggle, "reason": "", "impl": "", **entry}  # reason / impl: optional detail
            decisions[toggle] = ToggleDecision(**_checked_keys(ToggleDecision, decision, f"{where}.{toggle}"))
        return cls(decisions)


@dataclass(frozen=True, order=True)
class WorkloadShape:
    """What a run computed apart from its toggles: runs are only comparable within one shape."""

    model: str
    device: str
    dtype: str
    world_size: int
    batch_size: int
    input_len: int
    output_len: int
    ragged: bool

    def label(self) -> str:
        ragged = " ragged" if self.ragged else ""
        return (f"{self.model} {self.device} {self.dtype} ws={self.world_size} bs={self.batch_size} "
                f"in={self.input_len}{ragged} out={self.output_len}")


@dataclass
class RunResult:
    run_id: str
    status: str  # one of STATUSES
    spec: RunSpec
    error: str | None = None
    plan: RunPlan = field(default_factory=RunPlan)
    # raw samples, milliseconds, one per timed iteration (the statistical unit): ttft_ms, tpot_ms (the mean
    # of that iteration's decode steps); tpot_steps_ms: every decode step, for distribution plots only
    samples: dict[str, list[float]] = field(default_factory=dict)
    summary: dict[str, float | None] = field(default_factory=dict)  # SUMMARY_KEYS
    numerics: dict[str, Any] = field(default_factory=dict)  # max_abs_logit_diff, tokens_match, reference
    trace: dict[str, Any] = field(default_factory=dict)  # dir, decode_ops_per_step, op_counts_per_decode_step
    env: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_s: float = 0.0
    stop_reason: str = ""  # why timing stopped: converged / max_iterations / max_time (perfbench/run/stopping.py)
    # perfbench/analysis/stability.py: {"stable": bool, "reason": str, "metrics": {name: {"stable", "reason"}}};
    # empty when not judged (a failed run, or a record from before verdicts existed)
    stability: dict[str, Any] = field(default_factory=dict)
    # per-expert routing counts of every MoE layer (perfbench/analysis/expert_load.py); {} when not recorded
    expert_load: dict[str, Any] = field(default_factory=dict)
    # interleaved blocks (perfbench/run/blocks.py): {"group", "process", "index": block per timed iteration,
    # "runs", "blocks"}; {} for a run timed on its own
    blocks: dict[str, Any] = field(default_factory=dict)

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
        value = self.stability.get("stable")
        return None if value is None else bool(value)

    def metric(self, name: str) -> float | None:
        """A summary metric (SUMMARY_KEYS), None when not recorded."""
        value = self.summary.get(name)
        return None if value is None else float(value)

    def finite_samples(self, key: str) -> list[float]:
        """Raw samples under `key` without NaN/inf (a broken timer must not break every statistic)."""
        return [float(x) for x in self.samples.get(key, []) if x is not None and math.isfinite(x)]

    # ---- files -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, RunSpec | RunPlan) else value
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "result") -> RunResult:
        """A record of any known schema version (older ones migrated); unknown keys are refused."""
        raw = migrate(raw, where)
        args = dict(_checked_keys(cls, {k: v for k, v in raw.items() if k != "schema_version"}, where))
        args["spec"] = RunSpec.from_dict(args.get("spec", {}), f"{where}.spec")
        args["plan"] = RunPlan.from_dict(args.get("plan") or {}, f"{where}.plan")
        return cls(**args)

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
        for key in SUMMARY_KEYS:
            row[key] = self.summary.get(key)
        row["stop_reason"] = self.stop_reason
        row["stable"] = self.stability.get("stable", "")
        row["unstable_reason"] = self.stability.get("reason", "")
        row["round"] = spec.round
        row["combination"] = spec.combination_id
        row["max_abs_logit_diff"] = self.numerics.get("max_abs_logit_diff")
        row["tokens_match"] = self.numerics.get("tokens_match")
        row["decode_ops_per_step"] = self.trace.get("decode_ops_per_step")
        for phase in ("prefill", "decode"):
            imbalance = worst_imbalance(self.expert_load, phase)
            row[f"moe_imbalance_{phase}"] = None if imbalance is None else round(imbalance, 3)
        row["wall_s"] = round(self.wall_s, 3)
        return row


def migrate(raw: dict[str, Any], where: str = "result") -> dict[str, Any]:
    """A result record brought up to SCHEMA_VERSION (a copy); a record from a newer perfbench is refused."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{where}: schema_version must be a positive integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise ValueError(f"{where}: schema_version {version} is newer than this perfbench reads "
                         f"({SCHEMA_VERSION}); upgrade perfbench to read it")
    # 1 -> 2, 3 -> 4, 4 -> 5: only added fields (schema_version, spec.expected_plan; expert_load; blocks,
    # spec.timing, spec.block_group), whose defaults say "not recorded" or "timed on its own".
    if version < 3:
        raw = {**raw, "samples": _per_iteration_tpot(raw)}
    return {**raw, "schema_version": SCHEMA_VERSION}


def _per_iteration_tpot(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 kept every decode step in samples.tpot_ms, iteration after iteration (output_len - 1 each):
    those become tpot_steps_ms, and tpot_ms the mean of each iteration's steps."""
    samples = dict(raw.get("samples") or {})
    steps = samples.get("tpot_ms")
    per_iteration = int((raw.get("spec") or {}).get("output_len", 0)) - 1
    if not steps or per_iteration < 1 or len(steps) % per_iteration:
        return samples
    samples["tpot_steps_ms"] = steps
    samples["tpot_ms"] = [sum(steps[i:i + per_iteration]) / per_iteration
                          for i in range(0, len(steps), per_iteration)]
    return samples


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + rename: readers never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def load_results(folder: str | Path) -> list[RunResult]:
    """Results of a folder, last record per run_id winning (a resumed sweep may have rewritten a run)."""
    path = Path(folder) / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results.jsonl (is {folder} a perfbench result folder?)")
    by_id: dict[str, RunResult] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        result = RunResult.from_dict(raw, f"{path}:{lineno}")
        if result.status not in STATUSES:
            raise ValueError(f"{path}:{lineno}.status: expected one of {', '.join(STATUSES)}, got "
                             f"{result.status!r}")
        by_id[result.run_id] = result
    return list(by_id.values())


@dataclass
class ResultFolder:
    """A result (or baseline) folder as read: its runs by run_id, scenario.json and baseline.json if any."""

    path: Path
    runs: dict[str, RunResult]
    scenario: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None  # baseline.json, for a saved baseline

    @property
    def results(self) -> list[RunResult]:
        return list(self.runs.values())


def _read_json_object(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def load_folder(path: str | Path, name: str | None = None) -> ResultFolder:
    """Every command's folder loader: anything unreadable is a one-line UserError starting with `name` (how
    the user gave the folder, e.g. "--baseline <path>"; default the path)."""
    path = Path(path)
    name = name or str(path)
    if not path.exists():
        raise UserError(f"{name}: no such folder")
    if not path.is_dir():
        raise UserError(f"{name}: not a folder (give a result or baseline folder)")
    if not (path / "results.jsonl").is_file():
        raise UserError(f"{name}: no results.jsonl (not a perfbench result or baseline folder)")
    try:
        results = load_results(path)
    except (ValueError, TypeError) as err:
        raise UserError(f"{name}: unreadable results.jsonl ({err})") from None
    return ResultFolder(path, {r.run_id: r for r in results}, _read_json_object(path / "scenario.json"),
                        _read_json_object(path / "baseline.json"))


def write_results(folder: str | Path, results: list[RunResult]) -> None:
    """Rewrite results.jsonl and results.csv atomically from the full list."""
    folder = Path(folder)
    lines = "".join(json.dumps(r.to_dict(), default=str) + "\n" for r in results)
    atomic_write_text(folder / "results.jsonl", lines)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS))
    writer.writeheader()
    for r in results:
        writer.writerow(r.csv_row())
    atomic_write_text(folder / "results.csv", buf.getvalue())
