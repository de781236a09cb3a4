"""`perfbench estimate SCENARIO`: roofline TTFT and TPOT of every plan of a scenario's sweep on a named device,
with the compute / memory / communication breakdown per op category and the most each toggle can change.

Analytic only: the model config (a checkpoint's config.json, or the preset named like the checkpoint folder),
the parallel layout, the workload shapes and each plan's effective toggles go through model/cost.py and are
priced on device_peaks.yaml. No weights, no device, seconds even for 397B.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from model.backend import Capabilities
from model.config import PRESETS, Qwen3_5MoeTextConfig, load_config
from model.cost import CostToggles, CostWorkload, model_cost
from model.optimizations import TOGGLE_NAMES, TOGGLES, Plan
from perfbench.config.scenario import Scenario, load_scenario
from perfbench.config.sweep import compact, plan_sweep
from perfbench.errors import UserError
from perfbench.results import atomic_write_text
from perfbench.results.cells import csv_safe
from perfbench.roofline.memory import MemoryEstimate, estimate_run, size
from perfbench.roofline.peaks import DevicePeaks, device_peaks
from perfbench.roofline.pricing import PhaseEstimate, estimate_model

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PLATFORM_DEVICE = {"A2": "ascend910b", "A3": "ascend910_93", "950": "ascend950dt"}
# toggles whose effect is on counted work; the others fuse launches of the same work
COUNTED = {f.name for f in dataclasses.fields(CostToggles)}


@dataclass(frozen=True)
class PlanEstimate:
    label: str
    batch: int
    input_len: int
    output_len: int
    ragged: bool
    toggles: str  # effective toggles, compact
    prefill: PhaseEstimate
    decode: PhaseEstimate
    graph_mode: bool
    memory: MemoryEstimate  # per rank: weights, KV cache + GDN state, peak activations (roofline/memory.py)

    @property
    def ttft_ms(self) -> float:
        return self.prefill.roofline_s * 1e3

    @property
    def tpot_ms(self) -> float:
        return self.decode.roofline_s * 1e3


def scenario_model(scenario: Scenario) -> Qwen3_5MoeTextConfig:
    """The scenario's model config: readable here, or the preset named like the checkpoint folder."""
    config = scenario.model_config_here()
    if config is not None:
        return config
    folder = Path(str(scenario.perfbench.model)).name.lower()
    if folder in PRESETS:
        return load_config(folder, scenario.perfbench.num_layers)
    raise UserError(f"{scenario.model_key}: {scenario.perfbench.model} has no config.json here and no preset "
                    f"matches its folder name (presets: {', '.join(PRESETS)}); run with "
                    f"--set perfbench.model=<preset>")


def default_device(scenario: Scenario) -> str:
    platform = scenario.model_config.platform_version or ""
    if platform in PLATFORM_DEVICE:
        return PLATFORM_DEVICE[platform]
    device = scenario.perfbench.device
    if device in ("npu", "auto"):
        return "ascend910_93"
    return "h100-sxm" if device == "cuda" else "cpu"


def stand_in_capabilities(peaks: DevicePeaks) -> Capabilities:
    """What the named device would report, so the plans resolve as they would there."""
    if peaks.kind == "npu":
        ops = frozenset(op for spec in TOGGLES.values() for op in spec.npu_ops)
        return Capabilities(device="npu", device_name=peaks.title, torch_npu=True, torchair=True,
                            npu_platform=peaks.platform, npu_ops=ops)
    if peaks.kind == "cuda":
        return Capabilities(device="cuda", device_name=peaks.title, fla=True, triton=True)
    return Capabilities(device="cpu", device_name=peaks.title)


def _workload(batch: int, input_len: int, output_len: int, ragged: bool, dtype_bytes: int) -> CostWorkload:
    make = CostWorkload.ragged if ragged else CostWorkload.uniform
    return make(batch, input_len, output_len, dtype_bytes)


def _on(plan: Plan) -> dict[str, bool]:
    return {name: plan.on(name) for name in TOGGLE_NAMES}


@dataclass(frozen=True)
class ToggleEffect:
    toggle: str
    ttft_ms_saved: float  # roofline time the toggle removes (negative: it adds)
    tpot_ms_saved: float
    decode_launches_saved: float
    note: str


def estimate_scenario(scenario: Scenario, peaks: DevicePeaks) -> tuple[list[PlanEstimate], list[ToggleEffect]]:
    config = scenario_model(scenario)
    scenario = copy.deepcopy(scenario)
    caps = stand_in_capabilities(peaks)
    scenario.perfbench.device = caps.device  # type: ignore[assignment]  # a peaks file's device is cpu, cuda or npu
    dtype = scenario.perfbench.dtype
    if dtype == "auto":
        dtype = "float32" if caps.device == "cpu" else "bfloat16"
    sweep = plan_sweep(scenario, caps)
    parallel = scenario.parallel_config
    parallel.validate(config)
    workload = scenario.perfbench.workload
    out: list[PlanEstimate] = []
    for run in sweep.runs:
        spec = run.spec
        cost = model_cost(config, parallel,
                          _workload(spec.batch_size, spec.input_len, spec.output_len, spec.ragged, DTYPE_BYTES[dtype]),
                          CostToggles.from_states(_on(run.plan)), caps.device)
        prefill, decode = estimate_model(cost, peaks, dtype)
        memory = estimate_run(config, parallel, dataclasses.replace(run, spec=spec.replace(dtype=dtype)))
        out.append(PlanEstimate(run.label, spec.batch_size, spec.input_len, spec.output_len, spec.ragged,
                                compact(run.plan), prefill, decode, run.plan.on("graph_mode"), memory))
    # the most each toggle can change: everything that can be on, then that toggle off
    effects: list[ToggleEffect] = []
    shapes = [(b, i) for b in workload.batch_sizes or () for i in workload.input_lens or ()]
    if shapes:
        from model.optimizations import resolve_plan

        batch, input_len = shapes[0]
        wl = _workload(batch, input_len, int(workload.output_len or 1), workload.ragged, DTYPE_BYTES[dtype])
        full = resolve_plan("all", caps, parallel, config, scenario.model_config.exe_mode, dtype=dtype)
        base_on = _on(full)
        base = estimate_model(model_cost(config, parallel, wl, CostToggles.from_states(base_on), caps.device),
                              peaks, dtype)
        for name in TOGGLE_NAMES:
            if not base_on[name]:
                effects.append(ToggleEffect(name, 0.0, 0.0, 0.0, f"inactive here: {full.decisions[name].reason}"))
                continue
            off = estimate_model(model_cost(config, parallel, wl, CostToggles.from_states({**base_on, name: False}),
                                            caps.device), peaks, dtype)
            if name == "graph_mode":
                note = "host overhead only (outside the roofline): one graph launch per decode step"
                launches = off[1].launches - 1.0
            elif name in COUNTED:
                note = "changes counted work"
                launches = off[1].launches - base[1].launches
            else:
                note = "same counted work (fuses launches and intermediate passes not counted)"
                launches = 0.0
            effects.append(ToggleEffect(name, (off[0].roofline_s - base[0].roofline_s) * 1e3,
                                        (off[1].roofline_s - base[1].roofline_s) * 1e3, launches, note))
    return out, effects


# ---- output ---------------------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return tabulate(rows, header, tablefmt="plain", disable_numparse=True).splitlines()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def render(scenario: Scenario, peaks: DevicePeaks, plans: list[PlanEstimate], effects: list[ToggleEffect]) -> str:
    pc = scenario.parallel_config
    lines = [f"roofline estimate: scenario {scenario.name} on {peaks.name} ({peaks.title}), per rank; "
             f"world_size {pc.world_size}, attn_tp {pc.attn_tp_size}, moe_tp {pc.moe_tp_size}, "
             f"moe_ep {pc.moe_ep_size}",
             "TTFT = prefill floor, TPOT = mean decode step floor (max of compute and memory time at peak per op, "
             "plus collectives at link bandwidth); host overhead is outside the roofline",
             "peaks per rank: " + ", ".join(f"{d} {v / 1e12:.1f} TFLOP/s" for d, v in peaks.flops.items())
             + (f", memory {peaks.memory_Bps / 1e9:.0f} GB/s" if peaks.memory_Bps else "")
             + (f", link {peaks.link_Bps / 1e9:.0f} GB/s per direction" if peaks.link_Bps else "")
             + (" (measured here)" if peaks.measured else " (sources: perfbench/roofline/device_peaks.yaml)")]
    header = ["plan", "shape", "toggles", "TTFT ms", "TPOT ms", "prefill c/m/comm ms", "decode c/m/comm ms",
              "decode launches", "memory w/state/act"]
    rows = []
    for p in plans:
        shape = f"b{p.batch} i{p.input_len}{'r' if p.ragged else ''} o{p.output_len}"
        launches = "1 graph" if p.graph_mode else f"{p.decode.launches:.0f}"
        rows.append([p.label, shape, p.toggles, f"{p.ttft_ms:.3f}", f"{p.tpot_ms:.3f}",
                     f"{_ms(p.prefill.compute_s)}/{_ms(p.prefill.memory_s)}/{_ms(p.prefill.comm_s)}",
                     f"{_ms(p.decode.compute_s)}/{_ms(p.decode.memory_s)}/{_ms(p.decode.comm_s)}", launches,
                     "/".join(size(x) for x in (p.memory.weights, p.memory.state, p.memory.activations))])
    lines += _table(header, rows)
    lines.append("memory per rank, analytic: weights / KV cache + GDN state / peak prefill activations "
                 "(perfbench/roofline/memory.py)")
    if plans:
        first = plans[0]
        lines.append(f"breakdown of '{first.label}' per op category (one prefill, one decode step):")
        cat_rows = [[c.phase, c.category, f"{c.flops / 1e9:.2f}", f"{c.bytes / 1e6:.2f}", f"{c.wire_bytes / 1e6:.2f}",
                     _ms(c.compute_s), _ms(c.memory_s), _ms(c.comm_s), _ms(c.roofline_s)]
                    for est in (first.prefill, first.decode) for c in est.categories]
        lines += ["  " + line for line in _table(
            ["phase", "category", "GFLOP", "MB moved", "MB on links", "compute ms", "memory ms", "comm ms",
             "roofline ms"], cat_rows)]
        coll_rows = [[est.phase, c.collective, f"{c.calls:.0f}", f"{c.payload_bytes / 1e6:.3f}",
                      f"{c.wire_bytes / 1e6:.3f}", _ms(c.seconds)]
                     for est in (first.prefill, first.decode) for c in est.collectives]
        if coll_rows:
            lines.append("  collectives (per rank; payload as the model records it, wire = what the links carry):")
            lines += ["    " + line for line in _table(
                ["phase", "collective", "calls", "payload MB", "wire MB", "ms"], coll_rows)]
        names = {"full_attention": "full attention layers", "linear_attention": "GDN layers",
                 "": "embedding, final norm, lm_head"}
        lines.append("  by layer type (roofline ms): " + "; ".join(
            f"{est.phase} " + ", ".join(f"{names.get(k, k)} {_ms(v)}" for k, v in est.layer_types.items())
            for est in (first.prefill, first.decode)))
    if effects:
        lines.append("most each toggle can change (all possible toggles on, then this one off; + = time it saves):")
        lines += ["  " + line for line in _table(
            ["toggle", "TTFT ms", "TPOT ms", "decode launches", "note"],
            [[e.toggle, f"{e.ttft_ms_saved:+.3f}", f"{e.tpot_ms_saved:+.3f}", f"{e.decode_launches_saved:+.0f}", e.note]
             for e in effects])]
    if peaks.note:
        lines.append(f"note: {' '.join(peaks.note.split())}")
    return "\n".join(lines)


def _write_rows(path: Path, header: list[str], rows: list[list[object]]) -> None:
    """One CSV, written atomically: a failure mid-write (a full disk) leaves the previous file."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows([[csv_safe(cell) for cell in row] for row in rows])
    atomic_write_text(path, buf.getvalue())


def write_csv(out_dir: Path, plans: list[PlanEstimate], effects: list[ToggleEffect]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    plan_path, cat_path, eff_path = (out_dir / "estimate.csv", out_dir / "estimate_categories.csv",
                                     out_dir / "estimate_toggles.csv")
    _write_rows(plan_path, ["plan", "batch", "input_len", "output_len", "ragged", "toggles", "ttft_ms", "tpot_ms",
                            "prefill_compute_ms", "prefill_memory_ms", "prefill_comm_ms", "decode_compute_ms",
                            "decode_memory_ms", "decode_comm_ms", "prefill_launches", "decode_launches",
                            "graph_mode", "mem_weights_bytes", "mem_state_bytes", "mem_activations_bytes"],
                [[p.label, p.batch, p.input_len, p.output_len, p.ragged, p.toggles, f"{p.ttft_ms:.6f}",
                  f"{p.tpot_ms:.6f}", *(f"{x * 1e3:.6f}" for x in (
                      p.prefill.compute_s, p.prefill.memory_s, p.prefill.comm_s, p.decode.compute_s,
                      p.decode.memory_s, p.decode.comm_s)),
                  f"{p.prefill.launches:.1f}", f"{p.decode.launches:.1f}", p.graph_mode,
                  f"{p.memory.weights:.0f}", f"{p.memory.state:.0f}", f"{p.memory.activations:.0f}"] for p in plans])
    _write_rows(cat_path, ["plan", "batch", "input_len", "phase", "category", "flops", "bytes", "wire_bytes",
                           "compute_ms", "memory_ms", "comm_ms", "roofline_ms", "launches"],
                [[p.label, p.batch, p.input_len, c.phase, c.category, f"{c.flops:.0f}", f"{c.bytes:.0f}",
                  f"{c.wire_bytes:.0f}", f"{c.compute_s * 1e3:.6f}", f"{c.memory_s * 1e3:.6f}",
                  f"{c.comm_s * 1e3:.6f}", f"{c.roofline_s * 1e3:.6f}", f"{c.launches:.1f}"]
                 for p in plans for est in (p.prefill, p.decode) for c in est.categories])
    _write_rows(eff_path, ["toggle", "ttft_ms_saved", "tpot_ms_saved", "decode_launches_saved", "note"],
                [[e.toggle, f"{e.ttft_ms_saved:.6f}", f"{e.tpot_ms_saved:.6f}", f"{e.decode_launches_saved:.1f}",
                  e.note] for e in effects])
    return [plan_path, cat_path, eff_path]


def run_estimate(scenario_name: str, device: str | None, overrides: dict[str, float], out_dir: Path | None,
                 set_overrides: tuple[str, ...] = ()) -> str:
    scenario = load_scenario(scenario_name, list(set_overrides))
    peaks = device_peaks(device or default_device(scenario), overrides)
    plans, effects = estimate_scenario(scenario, peaks)
    text = render(scenario, peaks, plans, effects)
    out = out_dir or Path("reports") / f"estimate-{scenario.name}-{peaks.name}"
    paths = write_csv(out, plans, effects)
    return text + "\n" + "csv: " + ", ".join(str(p) for p in paths)
