"""Scenario YAML: the cann-recipes-infer sections as they are, plus a `perfbench:` section.

A recipe YAML (model_config / parallel_config / scheduler_config / data_config) is a valid scenario on its
own; every `perfbench:` option left out is derived from those sections (see `Scenario` docstring). Each YAML
section is one dataclass whose fields carry their help text; `perfbench/config/schema.py` turns raw YAML
into them and reports bad input as one line naming the key path.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from model.config import PRESETS, ConfigError, Qwen3_5MoeTextConfig, load_config
from model.parallel_config import ParallelConfig, ParallelConfigError
from model.toggles import TOGGLE_NAMES
from perfbench.config.schema import Section, opt, parse_section, read_yaml, with_overrides
from perfbench.errors import UserError

# Shipped as package data, so a plain (non-editable) install finds them too.
SCENARIOS_DIR = Path(str(importlib.resources.files("perfbench") / "scenarios"))
DESIGNS = ("none", "grid", "one_at_a_time", "leave_one_out", "cumulative", "explicit")
EXE_MODES = ("eager", "ge_graph", "npugraph_ex")
# What the recipe always runs fused (npu_recipe.md 2.1: no switch, always on at HEAD).
RECIPE_ALWAYS_ON = ("fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "merged_projections",
                    "grouped_moe")


# ---- recipe sections ---------------------------------------------------------------------------------------
@dataclass
class CustomParams(Section):
    PATH: ClassVar[str] = "model_config.custom_params"
    # Recipe custom params perfbench accepts and records but does not act on.
    RECIPE_ONLY: ClassVar[tuple[str, ...]] = (
        "enable_decode_moe_dispatch_combine_v2", "enable_superkernel", "enable_online_mxfp8_quantization",
        "online_mxfp8_quant_layers", "online_mxfp8_ignored_layers", "enable_afd")

    enable_mm_all_reduce_base: bool = opt(False, "recipe: fuse TP matmul + all_reduce in prefill "
                                                 "(npu_mm_all_reduce_base); default of toggle mm_all_reduce")
    enable_gdn_solve_triangular: bool = opt(False, "recipe: solve_triangular in its torch GDN fallback "
                                                   "(recorded only)")
    num_hidden_layers: int | None = opt(None, "recipe: layer-count override; default of perfbench.num_layers",
                                        min=1)
    recipe_extras: dict[str, Any] = opt(dict, "recipe custom params kept for the record")


@dataclass
class ModelConfigSection(Section):
    PATH: ClassVar[str] = "model_config"
    RECIPE_ONLY: ClassVar[tuple[str, ...]] = (
        "output_path", "dtype", "next_n", "packed_sequence", "enable_hadamard", "hadamard_weight_path")

    model_name: str = opt("qwen3.5", "recipe model registry name (recorded only)")
    model_path: str | None = opt(None, "checkpoint folder (config.json [+ safetensors]); "
                                       "default of perfbench.model")
    exe_mode: str = opt("eager", "decode execution mode; graph_mode defaults on unless eager, and on NPU "
                                 "this picks the graph flavour", choices=EXE_MODES)
    enable_profiler: bool | None = opt(None, "recipe profiler switch; default of perfbench.measure.profile")
    with_ckpt: bool = opt(True, "load safetensors weights (false: seeded dummy weights from config.json)")
    enable_cache_compile: bool = opt(False, "reuse the graph compile cache between runs")
    force_eplb: bool = opt(False, "recipe: forced expert load balancing (ignored by its Qwen3.5; recorded)")
    platform_version: str | None = opt(None, "Ascend platform override (default: detected from the device "
                                             "name)", choices=("A2", "A3", "950"))
    enable_weight_nz: bool = opt(True, "recipe: NZ weight format on NPU (recorded)")
    enable_static_kernel: bool = opt(False, "recipe: static kernels, npugraph_ex only (recorded)")
    enable_dynamic_graph: bool = opt(True, "recipe: dynamic shapes for npugraph_ex (recorded)")
    custom_params: CustomParams = opt(CustomParams, "model-specific recipe switches")
    recipe_extras: dict[str, Any] = opt(dict, "recipe model_config keys kept for the record")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.enable_static_kernel and self.exe_mode != "npugraph_ex":
            raise UserError(f"{self.PATH}.enable_static_kernel: needs exe_mode npugraph_ex, got exe_mode "
                            f"{self.exe_mode!r}; set it false or use exe_mode npugraph_ex")


@dataclass
class SchedulerSection(Section):
    PATH: ClassVar[str] = "scheduler_config"
    RECIPE_ONLY: ClassVar[tuple[str, ...]] = ("num_reserved_decode_tokens",)

    batch_size: int = opt(1, "requests per batch; default of perfbench.workload.batch_sizes", min=1)
    max_new_tokens: int = opt(32, "decode steps per request; default of perfbench.workload.output_len", min=1)
    max_prefill_tokens: int = opt(0, "recipe prefill token budget, 0 = input_truncated_len x batch", min=0)
    block_size: int = opt(128, "recipe paged KV block size (recorded)", min=1)
    mem_fraction_static: float = opt(0.85, "recipe static memory fraction (recorded)", gt=0.0, max=1.0)
    recipe_extras: dict[str, Any] = opt(dict, "recipe scheduler_config keys kept for the record")


@dataclass
class DataSection(Section):
    PATH: ClassVar[str] = "data_config"
    RECIPE_ONLY: ClassVar[tuple[str, ...]] = ()

    dataset: str = opt("default", "recipe prompt source (perfbench feeds seeded random token ids)")
    input_truncated_len: int = opt(256, "prompt length; default of perfbench.workload.input_lens", min=1)
    dataset_path: str = opt("", "recipe dataset folder (recorded)")
    temperature: float = opt(0.0, "sampling temperature, 0 = greedy", min=0.0)
    top_p: float = opt(1.0, "nucleus sampling mass", gt=0.0, max=1.0)
    top_k: int = opt(0, "top-k sampling, 0 = off", min=0)
    seed: int | None = opt(None, "sampling seed; default of perfbench.seed")
    recipe_extras: dict[str, Any] = opt(dict, "recipe data_config keys kept for the record")


# ---- perfbench section ------------------------------------------------------------------------------------
@dataclass
class WorkloadSection(Section):
    PATH: ClassVar[str] = "perfbench.workload"

    batch_sizes: list[int] | None = opt(None, "batch sizes to run (default [scheduler_config.batch_size])",
                                        min=1)
    input_lens: list[int] | None = opt(None, "prompt lengths to run (default "
                                             "[data_config.input_truncated_len])", min=1)
    output_len: int | None = opt(None, "decode steps (default scheduler_config.max_new_tokens)", min=1)
    ragged: bool = opt(False, "prompts of different lengths in a batch (input_len is the longest)")


@dataclass
class MeasureSection(Section):
    PATH: ClassVar[str] = "perfbench.measure"

    warmup: int = opt(1, "untimed generate calls before timing (graph compile happens here)", min=0)
    iterations: int | None = opt(None, "a fixed count of timed generate calls (sets min_iterations = "
                                       "max_iterations); null: adaptive stopping", min=1)
    min_iterations: int = opt(5, "adaptive stopping: timed calls at least", min=1)
    max_iterations: int = opt(30, "adaptive stopping: timed calls at most", min=1)
    max_time_s: float = opt(20.0, "adaptive stopping: stop once timing took this long", gt=0.0)
    target_rel_ci: float = opt(0.03, "adaptive stopping: stop once the 95% CI of the TTFT and TPOT medians is "
                                     "this narrow, relative to the median", gt=0.0)
    timeout_s: float = opt(600.0, "wall-clock limit of one run's process; past it the run is killed", gt=0.0)
    profile: bool | None = opt(None, "capture a profiler trace after timing (default "
                                     "model_config.enable_profiler, else true)")
    numerics_check: bool = opt(True, "compare logits and tokens against the all-off reference")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.iterations is None and self.max_iterations < self.min_iterations:
            raise UserError(f"{self.PATH}.max_iterations: must be >= min_iterations ({self.min_iterations}), "
                            f"got {self.max_iterations}")


@dataclass
class ExplicitRun(Section):
    PATH: ClassVar[str] = "perfbench.sweep.runs[]"

    toggles: dict[str, bool] = opt(dict, "toggles set on top of perfbench.toggles")
    env: dict[str, str] = opt(dict, "extra environment variables of this run only")

    @classmethod
    def from_yaml(cls, raw: Any) -> ExplicitRun:
        if not isinstance(raw, dict):
            raise UserError(f"{cls.PATH}: must be a mapping of toggle: true/false, got {raw!r}")
        if isinstance(raw.get("toggles"), dict):  # the spelled-out form {toggles: {...}, env: {...}}
            return parse_section(cls, raw)
        return cls(toggles={k: v for k, v in raw.items() if k != "env"}, env=raw.get("env"))

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_toggle_names(self.toggles, self.PATH)


@dataclass
class SweepSection(Section):
    PATH: ClassVar[str] = "perfbench.sweep"

    design: str = opt("none", "none: the base only; grid: every combination of sweep.toggles; "
                              "one_at_a_time: all swept off, then each alone; leave_one_out: all swept on, "
                              "then each removed; cumulative: add sweep.order one by one; explicit: "
                              "sweep.runs",
                      choices=DESIGNS)
    toggles: list[str] | None = opt(None, "toggles the design varies (default all)")
    order: list[str] | None = opt(None, "cumulative design: the order toggles are added in "
                                        "(default sweep.toggles)")
    runs: list[ExplicitRun] = opt(list, "explicit design: the runs, a list of {toggle: bool} (a run may add "
                                        "env: {VAR: value}); any other design: extra runs appended to it")
    rounds: int = opt(1, "interleaved rounds: every combination runs once per round, in a seeded random order "
                         "per round; results merge per combination and the round is the statistical unit",
                      min=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("toggles", "order"):
            names = getattr(self, key)
            if names is None:
                continue
            _check_toggle_names(names, f"{self.PATH}.{key}")
            seen: set[str] = set()
            for i, name in enumerate(names):
                if name in seen:
                    raise UserError(f"{self.PATH}.{key}[{i}]: {name!r} is listed twice")
                seen.add(name)
        if self.design == "explicit" and not self.runs:
            raise UserError(f"{self.PATH}.runs: design explicit needs at least one run, got none; "
                            f"e.g. runs: [{{chunk_gdr: true}}, {{chunk_gdr: false}}]")
        if self.toggles == [] and self.design in ("grid", "one_at_a_time", "leave_one_out"):
            raise UserError(f"{self.PATH}.toggles: design {self.design} needs at least one toggle, got []")

    def varied(self) -> list[str]:
        """The toggles this design switches, in order."""
        if self.design == "cumulative" and self.order is not None:
            return list(self.order)
        return list(self.toggles) if self.toggles is not None else list(TOGGLE_NAMES)


@dataclass
class ClusterSection(Section):
    PATH: ClassVar[str] = "perfbench.cluster"

    nnodes: int = opt(1, "nodes one run spans (torchrun --nnodes); world_size = nnodes x nproc_per_node", min=1)
    nproc_per_node: int | None = opt(None, "ranks per node (default world_size // nnodes)", min=1)
    node_rank: int = opt(0, "this node's rank in a plain multi-node launch (one `perfbench run` per node); "
                            "node 0 hosts the rendezvous and writes the results", min=0)
    rdzv_endpoint: str | None = opt(None, "HOST:PORT of the c10d rendezvous, an address of node 0 every node "
                                          "reaches; needed when nnodes > 1 (the ray executor picks one itself)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.node_rank >= self.nnodes:
            raise UserError(f"{self.PATH}.node_rank: must be below nnodes ({self.nnodes}), got {self.node_rank}")
        if self.rdzv_endpoint is not None:
            host, sep, port = self.rdzv_endpoint.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise UserError(f"{self.PATH}.rdzv_endpoint: must be HOST:PORT (e.g. 10.0.0.1:29400), "
                                f"got {self.rdzv_endpoint!r}")


@dataclass
class PerfbenchSection(Section):
    PATH: ClassVar[str] = "perfbench"

    name: str | None = opt(None, "scenario name in results and report (default: the file name)")
    device: str = opt("auto", "where runs execute; auto picks npu, then cuda, then cpu",
                      choices=("auto", "cpu", "cuda", "npu"))
    dtype: str = opt("auto", "weights and activations (auto: float32 on cpu, bfloat16 elsewhere)",
                     choices=("auto", "float32", "bfloat16", "float16"))
    model: str | None = opt(None, f"preset ({', '.join(PRESETS)}) or checkpoint folder "
                                  f"(default model_config.model_path, else tiny)")
    num_layers: int | None = opt(None, "layer-count override (default "
                                       "model_config.custom_params.num_hidden_layers)", min=1)
    with_ckpt: bool | None = opt(None, "load checkpoint weights (default model_config.with_ckpt; false for a "
                                       "preset: seeded dummy weights)")
    seed: int | None = opt(None, "seed of weights and prompts (default data_config.seed, else 0)")
    toggles: dict[str, bool] = opt(dict, "base request; missing toggles follow the recipe: its always-on "
                                         "fused ops on, graph_mode iff exe_mode != eager, mm_all_reduce iff "
                                         "enable_mm_all_reduce_base, moe_dispatch_combine on")
    workload: WorkloadSection = opt(WorkloadSection, "request shapes")
    measure: MeasureSection = opt(MeasureSection, "warm-up, iterations, limits")
    sweep: SweepSection = opt(SweepSection, "which toggle combinations to run")
    env: dict[str, str] = opt(dict, "environment variables of every run (e.g. HCCL_DETERMINISTIC: \"true\")")
    cluster: ClusterSection = opt(ClusterSection, "nodes a run spans and how their torchruns meet")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_toggle_names(self.toggles, f"{self.PATH}.toggles")


SECTIONS: dict[str, type[Section] | None] = {
    "model_config": ModelConfigSection, "parallel_config": None,  # model.parallel_config.ParallelConfig
    "scheduler_config": SchedulerSection, "data_config": DataSection, "perfbench": PerfbenchSection,
}


def _check_toggle_names(names: Any, path: str) -> None:
    for name in names:
        if name not in TOGGLE_NAMES:
            raise UserError(f"{path}.{name}: unknown toggle; toggles are {', '.join(TOGGLE_NAMES)}"
                            if isinstance(names, dict) else
                            f"{path}: unknown toggle {name!r}; toggles are {', '.join(TOGGLE_NAMES)}")


def recipe_toggles(model_config: ModelConfigSection) -> dict[str, bool]:
    """The toggle request equivalent to what the recipe runs for this model_config."""
    request = {name: name in RECIPE_ALWAYS_ON for name in TOGGLE_NAMES}
    request["graph_mode"] = model_config.exe_mode != "eager"
    request["mm_all_reduce"] = model_config.custom_params.enable_mm_all_reduce_base
    request["moe_dispatch_combine"] = True  # always used in EP decode at recipe HEAD (npu_recipe.md 0)
    return request


# ---- the validated scenario -------------------------------------------------------------------------------
@dataclass
class Scenario:
    """A validated scenario. `perfbench` holds every derived default filled in:

    model (model_config.model_path, else tiny), num_layers (custom_params.num_hidden_layers), with_ckpt
    (model_config.with_ckpt; false for a preset), seed (data_config.seed, else 0), toggles (the recipe's
    request, see `recipe_toggles`, overlaid with perfbench.toggles), workload (scheduler_config.batch_size,
    data_config.input_truncated_len, scheduler_config.max_new_tokens), measure.profile
    (model_config.enable_profiler, else true). device and dtype may stay "auto" until the runner knows the
    device.
    """

    name: str
    source: str
    model_config: ModelConfigSection
    parallel_config: ParallelConfig
    scheduler_config: SchedulerSection
    data_config: DataSection
    perfbench: PerfbenchSection
    model_key: str = "perfbench.model"  # the key path the model came from, for messages

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "source": self.source,
            "model_config": dataclasses.asdict(self.model_config),
            "parallel_config": self.parallel_config.as_dict(),
            "scheduler_config": dataclasses.asdict(self.scheduler_config),
            "data_config": dataclasses.asdict(self.data_config),
            "perfbench": dataclasses.asdict(self.perfbench),
        }

    def is_preset(self) -> bool:
        return self.perfbench.model in PRESETS

    def model_missing(self) -> str | None:
        """Why the model cannot be loaded on this machine (a one-line fix), or None when it can."""
        model = str(self.perfbench.model)
        if model in PRESETS or (Path(model).expanduser() / "config.json").is_file() or (
                model.endswith(".json") and Path(model).expanduser().is_file()):
            return None
        what = "has no config.json" if Path(model).expanduser().is_dir() else "not found"
        return (f"{self.model_key}: {model} {what}; run with --set perfbench.model=tiny (a preset; presets "
                f"are {', '.join(PRESETS)}) or point it at a folder with config.json (with_ckpt: false uses "
                f"dummy weights)")

    def model_config_here(self) -> Qwen3_5MoeTextConfig | None:
        """The model's config when it can be read on this machine, else None."""
        if self.model_missing():
            return None
        try:
            return load_config(Path(str(self.perfbench.model)).expanduser() if not self.is_preset()
                               else str(self.perfbench.model), self.perfbench.num_layers)
        except ConfigError as err:
            raise UserError(f"{self.model_key}: {err}") from None


def _looks_like_path(value: str) -> bool:
    return "/" in value or value.startswith((".", "~")) or value.endswith(".json") or Path(value).exists()


def _derive(raw_perfbench: PerfbenchSection, mc: ModelConfigSection, sched: SchedulerSection,
            data: DataSection, source_stem: str) -> tuple[PerfbenchSection, str]:
    pb = raw_perfbench
    model_key = "perfbench.model"
    model = pb.model
    if model is None and mc.model_path:
        model, model_key = mc.model_path, "model_config.model_path"
    elif model is None:
        model = "tiny"
    if model not in PRESETS and not _looks_like_path(model):
        raise UserError(f"{model_key}: unknown preset {model!r}; presets are {', '.join(PRESETS)}, "
                        f"or give a checkpoint folder path")
    with_ckpt = pb.with_ckpt
    if with_ckpt is None:
        with_ckpt = False if model in PRESETS else mc.with_ckpt
    elif with_ckpt and model in PRESETS:
        raise UserError(f"perfbench.with_ckpt: preset {model!r} has no checkpoint weights, got true; "
                        f"set it false or point perfbench.model at a checkpoint folder")
    toggles = {**recipe_toggles(mc), **pb.toggles}
    wl = pb.workload
    workload = dataclasses.replace(
        wl, batch_sizes=wl.batch_sizes if wl.batch_sizes is not None else [sched.batch_size],
        input_lens=wl.input_lens if wl.input_lens is not None else [data.input_truncated_len],
        output_len=wl.output_len if wl.output_len is not None else sched.max_new_tokens)
    for key in ("batch_sizes", "input_lens"):
        if not getattr(workload, key):
            raise UserError(f"perfbench.workload.{key}: needs at least one value, got []")
    profile = pb.measure.profile
    if profile is None:
        profile = mc.enable_profiler if mc.enable_profiler is not None else True
    sweep = pb.sweep
    if sweep.design == "cumulative" and sweep.order is None:
        sweep = dataclasses.replace(sweep, order=sweep.varied())
    filled = dataclasses.replace(
        pb, name=pb.name or source_stem, model=model, with_ckpt=with_ckpt,
        num_layers=pb.num_layers if pb.num_layers is not None else mc.custom_params.num_hidden_layers,
        seed=pb.seed if pb.seed is not None else (data.seed if data.seed is not None else 0),
        toggles=toggles, workload=workload, measure=dataclasses.replace(pb.measure, profile=profile),
        sweep=dataclasses.replace(sweep, toggles=sweep.varied() if sweep.toggles is None else sweep.toggles))
    return filled, model_key


def build_scenario(raw: Any, source: str = "<dict>", name: str | None = None) -> Scenario:
    """Validate a parsed YAML document; every message is one line naming the key path."""
    if not isinstance(raw, dict):
        raise UserError(f"top level must be a mapping of sections ({', '.join(SECTIONS)}), "
                        f"got {type(raw).__name__}")
    unknown = [k for k in raw if k not in SECTIONS]
    if unknown:
        raise UserError(f"{unknown[0]}: unknown section; sections are {', '.join(SECTIONS)}")
    mc = parse_section(ModelConfigSection, raw.get("model_config"))
    sched = parse_section(SchedulerSection, raw.get("scheduler_config"))
    data = parse_section(DataSection, raw.get("data_config"))
    pb = parse_section(PerfbenchSection, raw.get("perfbench"))
    parallel_raw = raw.get("parallel_config")
    if parallel_raw is not None and not isinstance(parallel_raw, dict):
        raise UserError(f"parallel_config: must be a mapping, got {parallel_raw!r}")
    try:
        parallel = ParallelConfig.from_dict(parallel_raw)
    except ParallelConfigError as err:
        raise UserError(str(err)) from None
    pb, model_key = _derive(pb, mc, sched, data, name or Path(source).stem)
    scenario = Scenario(name=str(pb.name), source=source, model_config=mc, parallel_config=parallel,
                        scheduler_config=sched, data_config=data, perfbench=pb, model_key=model_key)
    model = scenario.model_config_here()
    if model is not None:
        try:
            parallel.validate(model)
        except ParallelConfigError as err:
            raise UserError(f"{err} (model {pb.model})") from None
    _check_cluster(pb.cluster, parallel.world_size)
    attn_dp = parallel.attn_dp_size
    for i, batch in enumerate(pb.workload.batch_sizes or ()):
        if batch % attn_dp:
            raise UserError(f"perfbench.workload.batch_sizes[{i}]: {batch} is not a multiple of attn_dp_size "
                            f"{attn_dp} (world_size // attn_tp_size); use a multiple of {attn_dp}")
    return scenario


def _check_cluster(cluster: ClusterSection, world_size: int) -> None:
    path = ClusterSection.PATH
    if cluster.nproc_per_node is None:
        if world_size % cluster.nnodes:
            raise UserError(f"{path}.nnodes: {cluster.nnodes} does not divide parallel_config.world_size "
                            f"{world_size}; use a divisor or set {path}.nproc_per_node")
    elif cluster.nnodes * cluster.nproc_per_node != world_size:
        raise UserError(f"{path}.nproc_per_node: nnodes {cluster.nnodes} x nproc_per_node "
                        f"{cluster.nproc_per_node} must equal parallel_config.world_size {world_size}")


def find_scenario(path_or_name: str | None) -> Path:
    """A YAML path, or the name of a shipped scenario (perfbench/scenarios/NAME.yaml; default: default_cpu)."""
    key = path_or_name or "default_cpu"
    path = Path(key).expanduser()
    if path.is_file():
        return path
    shipped = SCENARIOS_DIR / f"{key}.yaml"
    if shipped.is_file():
        return shipped
    names = sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))
    raise UserError(f"scenario {key!r}: no such YAML file and no shipped scenario of that name "
                    f"(shipped: {', '.join(names) or 'none'})")


def load_scenario(path_or_name: str | None, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Read, override (`--set key.path=value`) and validate a scenario. Errors: one-line `UserError`."""
    path = find_scenario(path_or_name)
    label = path.name
    try:
        raw = read_yaml(path)
        if raw is None or raw == {}:
            raise UserError("the file holds no scenario (it is empty or only comments); a scenario is a mapping "
                            f"of sections ({', '.join(SECTIONS)})")
        raw = with_overrides(raw, list(overrides), SECTIONS)
        return build_scenario(raw, source=str(path), name=path.stem)
    except UserError as err:
        msg = str(err)
        raise UserError(msg if msg.startswith("--set") else f"{label}: {msg}") from None


def list_scenarios() -> list[tuple[str, str]]:
    """(name, first comment line) of every shipped scenario."""
    out = []
    for p in sorted(SCENARIOS_DIR.glob("*.yaml")):
        first = next((ln.lstrip("# ").strip() for ln in p.read_text().splitlines() if ln.startswith("#")), "")
        out.append((p.stem, first))
    return out
