"""Sweep designs: a scenario becomes the RunSpecs to measure, one per distinct (effective plan, shape).

Designs vary `sweep.toggles` on top of the base request (`perfbench.toggles`); every other toggle keeps its
base value. Requests that resolve to the same effective plan (`Plan.key()`) for the same shape measure the
same thing, so only the first runs and records which requests it stands for.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tabulate import tabulate

from model.backend import Capabilities
from model.optimizations import TOGGLE_NAMES, Plan, resolve_plan
from perfbench.config.labels import TOGGLE_ABBREV
from perfbench.config.lengths import Draw, draw, load_lengths
from perfbench.config.planned import PlannedRun
from perfbench.config.rounds import assign_timing, interleave
from perfbench.config.scenario import Scenario
from perfbench.errors import UserError
from perfbench.results import RunSpec

# Short names for tables and progress lines.
ABBREV = TOGGLE_ABBREV


@dataclass(frozen=True)
class Combo:
    """One requested toggle combination of a design."""

    label: str  # "baseline", "+chunk_gdr", "-graph_mode", "runs[2]", ...
    toggles: dict[str, bool]  # the full request, every toggle
    env: dict[str, str] = field(default_factory=dict)  # environment of this combination only (explicit runs)


def combinations(scenario: Scenario) -> list[Combo]:
    """The requested combinations of the scenario's design, in run order."""
    pb = scenario.perfbench
    base = {name: bool(pb.toggles.get(name, False)) for name in TOGGLE_NAMES}
    design = pb.sweep.design
    swept = pb.sweep.varied()

    def with_(on: Sequence[str], off: Sequence[str] = ()) -> dict[str, bool]:
        return {**base, **dict.fromkeys(off, False), **dict.fromkeys(on, True)}

    extra = [] if design == "explicit" else [
        Combo(f"runs[{i}]", {**base, **run.toggles}, dict(run.env)) for i, run in enumerate(pb.sweep.runs)]
    return _design_combos(design, base, swept, pb.sweep.runs, with_) + extra


def _design_combos(design: str, base: dict[str, bool], swept: list[str], runs: Sequence,
                   with_: Callable[..., dict[str, bool]]) -> list[Combo]:
    if design == "none":
        return [Combo("base", dict(base))]
    if design == "grid":
        combos = []
        for values in itertools.product((False, True), repeat=len(swept)):
            on = [t for t, v in zip(swept, values) if v]
            combos.append(Combo("+".join(ABBREV.get(t, t) for t in on) or "swept off",
                                with_(on, [t for t in swept if t not in on])))
        return combos
    if design == "one_at_a_time":
        return [Combo("baseline", with_([], swept))] + [
            Combo(f"+{t}", with_([t], [s for s in swept if s != t])) for t in swept]
    if design == "leave_one_out":
        return [Combo("all swept on", with_(swept))] + [
            Combo(f"-{t}", with_([s for s in swept if s != t], [t])) for t in swept]
    if design == "cumulative":
        return [Combo("none" if k == 0 else "+" + "+".join(swept[:k]), with_(swept[:k], swept[k:]))
                for k in range(len(swept) + 1)]
    if design == "explicit":
        return [Combo(f"runs[{i}]", {**base, **run.toggles}, dict(run.env))
                for i, run in enumerate(runs)]
    raise ValueError(f"unknown design {design!r}")  # the scenario validated it already


@dataclass
class SweepPlan:
    scenario: Scenario
    caps: Capabilities
    runs: list[PlannedRun]
    requested: int  # combinations x shapes before merging duplicates
    device_present: bool = True
    timing: list[str] = field(default_factory=list)  # how each round's runs are timed, and why

    def specs(self) -> list[RunSpec]:
        return [r.spec for r in self.runs]

    def describe(self) -> str:
        """The dry-run table: run id, shape, label, effective toggles, reasons for requested-but-inactive."""
        sc, pb = self.scenario, self.scenario.perfbench
        first = self.runs[0].spec if self.runs else None
        layers = f" ({pb.num_layers} layers)" if pb.num_layers else ""
        lines = [
            f"scenario {sc.name} ({sc.source}): {_count(len(self.runs), 'run')} "
            f"({self.requested} requested) on "
            f"{first.device if first else pb.device} [{self.caps.device_name}], "
            f"{first.dtype if first else pb.dtype}, model {pb.model}{layers}, "
            f"world_size {sc.parallel_config.world_size}, exe_mode {sc.model_config.exe_mode}",
            f"design {pb.sweep.design}" + (f" over {', '.join(pb.sweep.varied())}"
                                           if pb.sweep.design not in ("none", "explicit") else "")
            + (f", {pb.sweep.rounds} interleaved rounds (seeded order per round)" if pb.sweep.rounds > 1 else ""),
        ]
        if not self.device_present:
            lines.append(f"note: no {first.device if first else pb.device} here; plans show this machine's "
                         f"view, and requests with equal plans on the device are merged when it runs")
        missing = sc.model_missing()
        if missing:
            lines.append(f"note: {missing}")
        header = ("run id", "shape", "request", "effective toggles", "inactive (requested)")
        rows = [(r.spec.run_id, shape_label(r.spec), r.label, compact(r.plan), inactive(r.plan))
                for r in self.runs]
        lines += tabulate(rows, header, tablefmt="plain", disable_numparse=True).splitlines()
        if self.timing:
            lines.append("timing:")
            lines += [f"  {line}" for line in self.timing]
        merged = [r for r in self.runs if r.stands_for and r.spec.round == 1]
        if merged:
            lines.append("merged requests (same effective plan and shape, measured once):")
            lines += [f"  {r.spec.run_id} ({r.label}) also stands for {', '.join(r.stands_for)}"
                      for r in merged]
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def shape_label(spec: RunSpec) -> str:
    return f"b{spec.batch_size} i{spec.input_len}{'r' if spec.ragged else ''} o{spec.output_len}"


def compact(plan: Plan) -> str:
    """Effective toggles that are on, abbreviated: "rope+attn+gdr", or "none"."""
    on = [ABBREV.get(n, n) for n, d in plan.decisions.items() if d.state == "on"]
    return "+".join(on) or "none"


def inactive(plan: Plan) -> str:
    """Requested-but-inactive toggles grouped by reason: "rope,attn: torch_npu not available"."""
    by_reason: dict[str, list[str]] = {}
    for name, d in plan.decisions.items():
        if d.state == "inactive":
            by_reason.setdefault(d.reason, []).append(ABBREV.get(name, name))
    return "; ".join(f"{','.join(names)}: {reason}" for reason, names in by_reason.items())


def run_id(identity: dict[str, object]) -> str:
    """Readable shape prefix + a short hash of everything that defines the measurement."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"b{identity['batch_size']}-i{identity['input_len']}-o{identity['output_len']}-{digest}"


def resolved_device(scenario: Scenario, caps: Capabilities) -> tuple[str, str]:
    """(device, dtype) of the runs: "auto" follows the capabilities' device."""
    device: str = scenario.perfbench.device
    if device == "auto":
        device = caps.device
    elif device != caps.device:
        raise ValueError(f"capabilities are for {caps.device}, the scenario runs on {device}")
    dtype = scenario.perfbench.dtype
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "bfloat16"
    return device, dtype


def plan_sweep(scenario: Scenario, caps: Capabilities, device_present: bool = True,
               executor: str = "local") -> SweepPlan:
    """Expand the design x shapes, resolve each plan, merge duplicates, assign stable ids and the timing mode
    (`executor`: the executor that will run them; only the local one times runs in blocks).

    `device_present=False` (a dry run with stand-in capabilities) merges only identical requests: the plans
    then say what this machine cannot run, not what the device would merge.
    """
    pb = scenario.perfbench
    device, dtype = resolved_device(scenario, caps)
    if pb.measure.profile_export_type == "db" and device != "npu":  # device auto found no NPU here
        raise UserError(f"{scenario.name}: perfbench.measure.profile_export_type: db is the torch_npu profiler's "
                        f"export and the runs go to {device} here (device {pb.device}); use text or device npu")
    parallel = scenario.parallel_config
    parallel_fields = {k: v for k, v in parallel.as_dict().items() if k != "moe_ep_size"}
    exe_mode = scenario.model_config.exe_mode
    model_cfg = scenario.model_config_here()
    workload, measure = pb.workload, pb.measure
    drawn: dict[int, Draw] = {}
    if workload.lengths:  # each batch size's requests drawn from the distribution, with the seed
        requests = load_lengths(str(workload.lengths))
        drawn = {b: draw(requests, b, int(pb.seed or 0)) for b in workload.batch_sizes or ()}
        shapes = [(b, max(drawn[b].input_lens)) for b in workload.batch_sizes or ()]
    else:
        shapes = list(itertools.product(workload.batch_sizes or (), workload.input_lens or ()))
    runs: list[PlannedRun] = []
    seen: dict[tuple[object, ...], PlannedRun] = {}
    requested = 0
    for batch, input_len in shapes:
        for combo in combinations(scenario):
            requested += 1
            plan = resolve_plan(combo.toggles, caps, parallel, model_cfg, exe_mode, dtype=dtype)
            what = plan.key() if device_present else tuple(sorted(combo.toggles.items()))
            key = (what, batch, input_len, tuple(sorted(combo.env.items())))
            if key in seen:
                seen[key].stands_for.append(combo.label)
                continue
            identity: dict[str, object] = {
                "scenario": scenario.name, "device": device, "dtype": dtype, "model": pb.model,
                "num_layers": pb.num_layers, "batch_size": batch, "input_len": input_len,
                "output_len": workload.output_len, "ragged": workload.ragged, "toggles": combo.toggles,
                "parallel": parallel_fields, "exe_mode": exe_mode, "seed": pb.seed,
            }
            if combo.env:
                identity["env"] = combo.env
            lengths = drawn.get(batch)
            output_len, ragged = int(workload.output_len or 1), workload.ragged
            if lengths is not None:
                output_len, ragged = max(lengths.output_lens), len(set(lengths.input_lens)) > 1
                identity.update(lengths=str(workload.lengths), prompt_lens=lengths.input_lens,
                                output_len=output_len, requested_output_lens=lengths.output_lens)
            spec = RunSpec(
                run_id=run_id(identity), scenario=scenario.name, device=device, dtype=dtype,
                model=str(pb.model), num_layers=pb.num_layers, with_ckpt=bool(pb.with_ckpt),
                seed=int(pb.seed or 0), batch_size=batch, input_len=input_len,
                output_len=output_len, ragged=ragged, toggles=dict(combo.toggles),
                prompt_lens=None if lengths is None else lengths.input_lens,
                requested_output_lens=None if lengths is None else lengths.output_lens,
                parallel=parallel_fields, exe_mode=exe_mode,
                enable_cache_compile=scenario.model_config.enable_cache_compile, warmup=measure.warmup,
                iterations=measure.iterations or measure.min_iterations,
                max_iterations=None if measure.iterations else measure.max_iterations,
                max_time_s=None if measure.iterations else measure.max_time_s,
                target_rel_ci=None if measure.iterations else measure.target_rel_ci, profile=bool(measure.profile),
                profile_export_type=measure.profile_export_type, numerics_check=measure.numerics_check,
                profile_decode_steps=measure.profile_decode_steps,
                trace_export=measure.trace_export if measure.trace_export is not None else device == "npu",
                timeout_s=measure.timeout_s,
                env={**pb.env, **combo.env}, expected_plan={n: d.state for n, d in plan.decisions.items()})
            seen[key] = PlannedRun(spec, plan, combo.label)
            runs.append(seen[key])
    timed, lines = assign_timing(interleave(runs, pb.sweep.rounds, int(pb.seed or 0)), pb.sweep.timing,
                                 _weight_bytes(scenario, dtype), _available_memory(), executor)
    return SweepPlan(scenario, caps, timed, requested, device_present, lines)


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _weight_bytes(scenario: Scenario, dtype: str) -> float | None:
    """One model's weights on one rank; None when the model's config cannot be read here."""
    from model.config import ConfigError, load_config
    from model.cost import total_weight_bytes
    from model.parallel_config import ParallelConfig

    if scenario.perfbench.model is None:  # filled in when the scenario loads
        return None
    try:
        config = load_config(scenario.perfbench.model, scenario.perfbench.num_layers)
    except (ConfigError, OSError, ValueError):
        return None
    parallel = ParallelConfig.from_dict(scenario.parallel_config.as_dict())
    return total_weight_bytes(config, parallel, DTYPE_BYTES.get(dtype, 4))


def _available_memory() -> float:
    import psutil

    return float(psutil.virtual_memory().available)


def expand(scenario: Scenario, caps: Capabilities) -> list[RunSpec]:
    """The RunSpecs of a scenario on a device with these capabilities, duplicates merged, ids stable."""
    return plan_sweep(scenario, caps).specs()
