"""Scenario YAML: the cann-recipes-infer sections as they are, plus a `perfbench:` section.

A recipe YAML (model_config / parallel_config / scheduler_config / data_config) is a valid scenario on its
own; every `perfbench:` option left out is derived from those sections (see `Scenario` docstring). Each YAML
section is one pydantic model whose fields carry their help text (`perfbench list options` prints it);
`perfbench/config/schema.py` holds the base model and reports bad input as one line naming the key path.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from model.config import PRESETS, ConfigError, Qwen3_5MoeTextConfig, load_config
from model.parallel_config import ParallelConfig, ParallelConfigError
from model.toggles import TOGGLE_NAMES
from perfbench.config.lengths import load_lengths
from perfbench.config.model_limits import check_model_limits, check_shapes
from perfbench.config.schema import (
    Name,
    NonNegativeInt,
    OneOrMany,
    PositiveFloat,
    PositiveInt,
    Section,
    Text,
    ValueAt,
    read_yaml,
    text_value,
    with_overrides,
)
from perfbench.errors import UserError


def scenarios_dir(code_root: Path = Path(__file__).parent.parent.parent) -> Path:
    """scenarios/ of the checkout this perfbench/ is in; else (an install) the package data. A checkout put on
    PYTHONPATH reads its own scenarios, not those of whatever copy is installed: its perfbench/ holds no
    scenarios package, so `perfbench.scenarios` would resolve to the installed (or editable) copy's."""
    here = code_root / "scenarios"
    if (here / "__init__.py").is_file() and (code_root / "pyproject.toml").is_file():
        return here
    # shipped as package data, so a plain (non-editable) install finds them too
    return Path(str(importlib.resources.files("perfbench.scenarios")))


SCENARIOS_DIR = scenarios_dir()
Design = Literal["none", "grid", "one_at_a_time", "leave_one_out", "cumulative", "explicit"]
ExeMode = Literal["eager", "ge_graph", "npugraph_ex"]
# What the recipe always runs fused (npu_recipe.md 2.1: no switch, always on at HEAD).
RECIPE_ALWAYS_ON = ("fused_rope", "fused_attention", "fused_rmsnorm", "chunk_gdr", "merged_projections",
                    "grouped_moe")


def _known_toggles(request: dict[str, bool]) -> dict[str, bool]:
    for name in request:
        if name not in TOGGLE_NAMES:
            raise ValueAt(f"unknown toggle; toggles are {', '.join(TOGGLE_NAMES)}", f".{name}")
    return request


def _toggle_list(names: list[str]) -> list[str]:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name not in TOGGLE_NAMES:
            raise ValueAt(f"unknown toggle {name!r}; toggles are {', '.join(TOGGLE_NAMES)}", f"[{i}]")
        if name in seen:
            raise ValueAt(f"{name!r} is listed twice", f"[{i}]")
        seen.add(name)
    return names


ToggleRequest = Annotated[dict[str, bool], AfterValidator(_known_toggles)]
ToggleList = Annotated[list[str], OneOrMany, AfterValidator(_toggle_list)]
RecipeExtras = dict[str, Any]


# ---- recipe sections ---------------------------------------------------------------------------------------
class CustomParams(Section):
    PATH = "model_config.custom_params"
    # Recipe custom params perfbench accepts and records but does not act on.
    RECIPE_ONLY = ("enable_decode_moe_dispatch_combine_v2", "enable_superkernel", "enable_online_mxfp8_quantization",
                   "online_mxfp8_quant_layers", "online_mxfp8_ignored_layers", "enable_afd")

    enable_mm_all_reduce_base: bool = Field(False, description="recipe: fuse TP matmul + all_reduce in prefill "
                                            "(npu_mm_all_reduce_base); default of toggle mm_all_reduce")
    enable_gdn_solve_triangular: bool = Field(False, description="recipe: solve_triangular in its torch GDN "
                                              "fallback (recorded only)")
    num_hidden_layers: PositiveInt | None = Field(None, description="recipe: layer-count override; default of "
                                                  "perfbench.num_layers")
    recipe_extras: RecipeExtras = Field(default_factory=dict, description="recipe custom params kept for the record")


class ModelConfigSection(Section):
    PATH = "model_config"
    RECIPE_ONLY = ("output_path", "dtype", "next_n", "packed_sequence", "enable_hadamard", "hadamard_weight_path")

    model_name: Text = Field("qwen3.5", description="recipe model registry name (recorded only)")
    model_path: Text | None = Field(None, description="checkpoint folder (config.json [+ safetensors]); "
                                    "default of perfbench.model")
    exe_mode: ExeMode = Field("eager", description="decode execution mode; graph_mode defaults on unless eager, "
                              "and on NPU this picks the graph flavour")
    enable_profiler: bool | None = Field(None, description="recipe profiler switch; default of "
                                         "perfbench.measure.profile")
    with_ckpt: bool = Field(True, description="load safetensors weights (false: seeded dummy weights from "
                            "config.json)")
    enable_cache_compile: bool = Field(False, description="reuse the graph compile cache between runs")
    force_eplb: bool = Field(False, description="recipe: forced expert load balancing (ignored by its Qwen3.5; "
                             "recorded)")
    platform_version: Annotated[Literal["A2", "A3", "950"], BeforeValidator(text_value)] | None = Field(
        None, description="Ascend platform override (default: detected from the device name)")
    enable_weight_nz: bool = Field(True, description="recipe: NZ weight format on NPU (recorded)")
    enable_static_kernel: bool = Field(False, description="recipe: static kernels, npugraph_ex only (recorded)")
    enable_dynamic_graph: bool = Field(True, description="recipe: dynamic shapes for npugraph_ex (recorded)")
    custom_params: CustomParams = Field(default_factory=CustomParams, description="model-specific recipe switches")
    recipe_extras: RecipeExtras = Field(default_factory=dict, description="recipe model_config keys kept for the "
                                        "record")

    @model_validator(mode="after")
    def _static_kernel_needs_npugraph_ex(self) -> ModelConfigSection:
        if self.enable_static_kernel and self.exe_mode != "npugraph_ex":
            raise ValueAt(f"needs exe_mode npugraph_ex, got exe_mode {self.exe_mode!r}; set it false or use "
                          f"exe_mode npugraph_ex", ".enable_static_kernel")
        return self


class SchedulerSection(Section):
    PATH = "scheduler_config"
    RECIPE_ONLY = ("num_reserved_decode_tokens",)

    batch_size: PositiveInt = Field(1, description="requests per batch; default of perfbench.workload.batch_sizes")
    max_new_tokens: PositiveInt = Field(32, description="decode steps per request; default of "
                                        "perfbench.workload.output_len")
    max_prefill_tokens: NonNegativeInt = Field(0, description="recipe prefill token budget, 0 = "
                                               "input_truncated_len x batch")
    block_size: PositiveInt = Field(128, description="recipe paged KV block size (recorded)")
    mem_fraction_static: float = Field(0.85, gt=0.0, le=1.0, description="recipe static memory fraction "
                                       "(recorded)")
    recipe_extras: RecipeExtras = Field(default_factory=dict, description="recipe scheduler_config keys kept for "
                                        "the record")


class DataSection(Section):
    PATH = "data_config"

    dataset: Text = Field("default", description="recipe prompt source (perfbench feeds seeded random token ids)")
    input_truncated_len: PositiveInt = Field(256, description="prompt length; default of "
                                             "perfbench.workload.input_lens")
    dataset_path: Text = Field("", description="recipe dataset folder (recorded)")
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature, 0 = greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    top_k: NonNegativeInt = Field(0, description="top-k sampling, 0 = off")
    seed: int | None = Field(None, description="sampling seed; default of perfbench.seed")
    recipe_extras: RecipeExtras = Field(default_factory=dict, description="recipe data_config keys kept for the "
                                        "record")


# ---- perfbench section ------------------------------------------------------------------------------------
class WorkloadSection(Section):
    PATH = "perfbench.workload"

    batch_sizes: Annotated[list[PositiveInt], OneOrMany] | None = Field(
        None, description="batch sizes to run (default [scheduler_config.batch_size])")
    input_lens: Annotated[list[PositiveInt], OneOrMany] | None = Field(
        None, description="prompt lengths to run (default [data_config.input_truncated_len])")
    output_len: PositiveInt | None = Field(None, description="decode steps (default scheduler_config.max_new_tokens)")
    ragged: bool = Field(False, description="prompts of different lengths in a batch (input_len is the longest)")
    lengths: Text | None = Field(None, description="a length distribution: a shipped name (chat_synthetic) or a "
                                 "JSONL of {input_len, output_len} per request; each batch is drawn from it with "
                                 "the seed, replacing input_lens and output_len (docs/ragged.md)")


class MeasureSection(Section):
    PATH = "perfbench.measure"

    warmup: NonNegativeInt = Field(1, description="untimed generate calls before timing (graph compile happens "
                                   "here)")
    iterations: PositiveInt | None = Field(None, description="a fixed count of timed generate calls (sets "
                                           "min_iterations = max_iterations); null: adaptive stopping")
    min_iterations: PositiveInt = Field(5, description="adaptive stopping: timed calls at least")
    max_iterations: PositiveInt = Field(30, description="adaptive stopping: timed calls at most")
    max_time_s: PositiveFloat = Field(20.0, description="adaptive stopping: stop once timing took this long")
    target_rel_ci: PositiveFloat = Field(0.03, description="adaptive stopping: stop once the CI of the TTFT "
                                         "and TPOT medians is this narrow, relative to the median")
    timeout_s: PositiveFloat = Field(600.0, description="wall-clock limit of one run's process; past it the run "
                                     "is killed")
    profile: bool | None = Field(None, description="capture a profiler trace after timing (default "
                                 "model_config.enable_profiler, else true)")
    profile_export_type: Literal["text", "db"] = Field(
        "text", description="what the torch_npu profiler writes on npu (its export_type): text (kernel_details.csv, "
        "trace_view.json, ...) or db (ascend_pytorch_profiler_{rank}.db, SQLite); cpu and cuda write a chrome trace")
    profile_decode_steps: PositiveInt | None = Field(
        None, description="decode steps in the profiled iteration (its prefill, then this many); null: the "
        "workload's output_len. Per-step tables are per step either way; fewer steps make a smaller trace")
    trace_export: bool | None = Field(
        None, description="write each profiled run's normalized chrome trace (trace/export/trace.json.gz, for "
        "Perfetto); null: on npu only, whose trace_view.json Perfetto mis-nests (a CPU or CUDA Kineto trace opens "
        "as it is); `perfbench trace RUN --export OUT` writes one on demand")
    numerics_check: bool = Field(True, description="compare logits and tokens against the all-off reference")

    @model_validator(mode="after")
    def _iteration_bounds_ordered(self) -> MeasureSection:
        if self.iterations is None and self.max_iterations < self.min_iterations:
            raise ValueAt(f"must be >= min_iterations ({self.min_iterations}), got {self.max_iterations}",
                          ".max_iterations")
        return self


class TargetsSection(Section):
    PATH = "perfbench.targets"

    ttft_p90_ms: PositiveFloat | None = Field(None, description="service target: TTFT p90 at most this (ms); the "
                                              "report's capacity table finds each plan's largest batch that meets it")
    decode_step_p99_ms: PositiveFloat | None = Field(None, description="service target: decode-step p99 at most "
                                                     "this (ms), with ttft_p90_ms for the capacity table")


class ExplicitRun(Section):
    PATH = "perfbench.sweep.runs[]"

    toggles: ToggleRequest = Field(default_factory=dict, description="toggles set on top of perfbench.toggles")
    env: dict[str, Text] = Field(default_factory=dict, description="extra environment variables of this run only")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, raw: Any) -> Any:
        """`{toggle: bool, ..., env: {...}}` stands for `{toggles: {toggle: bool, ...}, env: {...}}`."""
        if not isinstance(raw, dict):
            raise ValueAt(f"must be a mapping of toggle: true/false, got {raw!r}")
        if isinstance(raw.get("toggles"), dict):
            return raw
        request = {k: v for k, v in raw.items() if k != "env"}
        for name in request:
            if name not in TOGGLE_NAMES:  # named where the user wrote it, not under `toggles`
                raise ValueAt(f"unknown toggle; toggles are {', '.join(TOGGLE_NAMES)}", f".{name}")
        return {"toggles": request, **({"env": raw["env"]} if raw.get("env") is not None else {})}


class SweepSection(Section):
    PATH = "perfbench.sweep"

    design: Design = Field("none", description="none: the base only; grid: every combination of sweep.toggles; "
                           "one_at_a_time: all swept off, then each alone; leave_one_out: all swept on, then each "
                           "removed; cumulative: add sweep.order one by one; explicit: sweep.runs")
    toggles: ToggleList | None = Field(None, description="toggles the design varies (default all)")
    order: ToggleList | None = Field(None, description="cumulative design: the order toggles are added in "
                                     "(default sweep.toggles)")
    runs: Annotated[list[ExplicitRun], OneOrMany] = Field(
        default_factory=list, description="explicit design: the runs, a list of {toggle: bool} (a run may add "
        "env: {VAR: value}); any other design: extra runs appended to it")
    rounds: PositiveInt = Field(1, description="interleaved rounds: every combination runs once per round, in a "
                                "seeded random order per round; results merge per combination and the round is "
                                "a process")
    timing: Literal["blocks", "separate"] = Field(
        "blocks", description="blocks: the runs of a round and shape share one process and are timed in "
        "interleaved blocks (one iteration of each, in a random order), speed-ups from within-block pairs; "
        "separate: each run timed in its own window. Runs that cannot share a process (torchrun, an "
        "accelerator, their own env, models too large to hold together) are timed separately")

    @model_validator(mode="after")
    def _design_has_what_it_needs(self) -> SweepSection:
        if self.design == "explicit" and not self.runs:
            raise ValueAt("design explicit needs at least one run, got none; e.g. runs: [{chunk_gdr: true}, "
                          "{chunk_gdr: false}]", ".runs")
        if self.toggles == [] and self.design in ("grid", "one_at_a_time", "leave_one_out"):
            raise ValueAt(f"design {self.design} needs at least one toggle, got []", ".toggles")
        return self

    def varied(self) -> list[str]:
        """The toggles this design switches, in order."""
        if self.design == "cumulative" and self.order is not None:
            return list(self.order)
        return list(self.toggles) if self.toggles is not None else list(TOGGLE_NAMES)


class ClusterSection(Section):
    PATH = "perfbench.cluster"

    nnodes: PositiveInt = Field(1, description="nodes one run spans (torchrun --nnodes); world_size = nnodes x "
                                "nproc_per_node")
    nproc_per_node: PositiveInt | None = Field(None, description="ranks per node (default world_size // nnodes)")
    node_rank: NonNegativeInt = Field(0, description="this node's rank in a plain multi-node launch (one "
                                      "`perfbench run` per node); node 0 hosts the rendezvous and writes the "
                                      "results")
    rdzv_endpoint: Text | None = Field(None, description="HOST:PORT of the c10d rendezvous, an address of node 0 "
                                       "every node reaches; needed when nnodes > 1 (the ray executor picks one "
                                       "itself)")

    @model_validator(mode="after")
    def _rank_and_endpoint(self) -> ClusterSection:
        if self.node_rank >= self.nnodes:
            raise ValueAt(f"must be below nnodes ({self.nnodes}), got {self.node_rank}", ".node_rank")
        if self.rdzv_endpoint is not None:
            host, sep, port = self.rdzv_endpoint.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueAt(f"must be HOST:PORT (e.g. 10.0.0.1:29400), got {self.rdzv_endpoint!r}",
                              ".rdzv_endpoint")
        return self


class PerfbenchSection(Section):
    PATH = "perfbench"

    name: Name | None = Field(None, description="scenario name in results and report (default: the file name)")
    device: Literal["auto", "cpu", "cuda", "npu"] = Field("auto", description="where runs execute; auto picks npu, "
                                                          "then cuda, then cpu")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights and activations (auto: float32 on cpu, bfloat16 elsewhere)")
    model: Text | None = Field(None, description=f"preset ({', '.join(PRESETS)}) or checkpoint folder "
                               f"(default model_config.model_path, else tiny)")
    num_layers: PositiveInt | None = Field(None, description="layer-count override (default "
                                           "model_config.custom_params.num_hidden_layers)")
    with_ckpt: bool | None = Field(None, description="load checkpoint weights (default model_config.with_ckpt; "
                                   "false for a preset: seeded dummy weights)")
    seed: int | None = Field(None, description="seed of weights and prompts (default data_config.seed, else 0)")
    toggles: ToggleRequest = Field(default_factory=dict, description="base request; missing toggles follow the "
                                   "recipe: its always-on fused ops on, graph_mode iff exe_mode != eager, "
                                   "mm_all_reduce iff enable_mm_all_reduce_base, moe_dispatch_combine on")
    workload: WorkloadSection = Field(default_factory=WorkloadSection, description="request shapes")
    measure: MeasureSection = Field(default_factory=MeasureSection, description="warm-up, iterations, limits")
    sweep: SweepSection = Field(default_factory=SweepSection, description="which toggle combinations to run")
    env: dict[str, Text] = Field(default_factory=dict, description="environment variables of every run (e.g. "
                                 "HCCL_DETERMINISTIC: \"true\")")
    cluster: ClusterSection = Field(default_factory=ClusterSection, description="nodes a run spans and how their "
                                    "torchruns meet")
    targets: TargetsSection = Field(default_factory=TargetsSection, description="latency targets of the report's "
                                    "capacity table (docs/capacity.md)")

    @model_validator(mode="after")
    def _db_export_needs_npu(self) -> PerfbenchSection:
        if self.measure.profile_export_type == "db" and self.device in ("cpu", "cuda"):
            raise ValueAt(f"db is the torch_npu profiler's export: only device npu (or auto on an NPU machine) "
                          f"writes it, got device {self.device}", ".measure.profile_export_type")
        return self


SECTIONS: dict[str, type[Section] | None] = {
    "model_config": ModelConfigSection, "parallel_config": None,  # model.parallel_config.ParallelConfig
    "scheduler_config": SchedulerSection, "data_config": DataSection, "perfbench": PerfbenchSection,
}


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
            "model_config": self.model_config.model_dump(),
            "parallel_config": self.parallel_config.as_dict(),
            "scheduler_config": self.scheduler_config.model_dump(),
            "data_config": self.data_config.model_dump(),
            "perfbench": self.perfbench.model_dump(),
        }

    def is_preset(self) -> bool:
        return self.perfbench.model in PRESETS

    def model_missing(self, weights: bool = True) -> str | None:
        """Why the model cannot be loaded on this machine (a one-line fix), or None when it can. `weights`:
        with with_ckpt, a folder without safetensors weights is missing too (the worker would fail on it)."""
        model = str(self.perfbench.model)
        path = Path(model).expanduser()
        if model in PRESETS:
            return None
        if (path / "config.json").is_file() or (model.endswith(".json") and path.is_file()):
            folder = path if path.is_dir() else path.parent
            if weights and self.perfbench.with_ckpt and not (
                    any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").is_file()):
                return (f"{self.model_key}: {model} has config.json but no *.safetensors weights and with_ckpt "
                        f"is true; add the weights, or run with --set perfbench.with_ckpt=false (seeded dummy "
                        f"weights)")
            return None
        what = "has no config.json" if path.is_dir() else "not found"
        return (f"{self.model_key}: {model} {what}; run with --set perfbench.model=tiny (a preset; presets "
                f"are {', '.join(PRESETS)}) or point it at a folder with config.json (with_ckpt: false uses "
                f"dummy weights)")

    def model_config_here(self, own: bool = False) -> Qwen3_5MoeTextConfig | None:
        """The model's config when it can be read on this machine, else None; `own`: before the layer
        override (the checkpoint's or preset's own layer count)."""
        if self.model_missing(weights=False):
            return None
        try:
            return load_config(Path(str(self.perfbench.model)).expanduser() if not self.is_preset()
                               else str(self.perfbench.model), None if own else self.perfbench.num_layers)
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
    workload = wl.model_copy(update={
        "batch_sizes": wl.batch_sizes if wl.batch_sizes is not None else [sched.batch_size],
        "input_lens": wl.input_lens if wl.input_lens is not None else [data.input_truncated_len],
        "output_len": wl.output_len if wl.output_len is not None else sched.max_new_tokens})
    for key in ("batch_sizes", "input_lens"):
        if not getattr(workload, key):
            raise UserError(f"perfbench.workload.{key}: needs at least one value, got []")
    profile = pb.measure.profile
    if profile is None:
        profile = mc.enable_profiler if mc.enable_profiler is not None else True
    sweep = pb.sweep
    if sweep.design == "cumulative" and sweep.order is None:
        sweep = sweep.model_copy(update={"order": sweep.varied()})
    filled = pb.model_copy(update={
        "name": pb.name or source_stem, "model": model, "with_ckpt": with_ckpt,
        "num_layers": pb.num_layers if pb.num_layers is not None else mc.custom_params.num_hidden_layers,
        "seed": pb.seed if pb.seed is not None else (data.seed if data.seed is not None else 0),
        "toggles": toggles, "workload": workload, "measure": pb.measure.model_copy(update={"profile": profile}),
        "sweep": sweep.model_copy(update={"toggles": sweep.varied() if sweep.toggles is None else sweep.toggles})})
    return filled, model_key


def build_scenario(raw: Any, source: str = "<dict>", name: str | None = None) -> Scenario:
    """Validate a parsed YAML document; every message is one line naming the key path."""
    if not isinstance(raw, dict):
        raise UserError(f"top level must be a mapping of sections ({', '.join(SECTIONS)}), "
                        f"got {type(raw).__name__}")
    unknown = [k for k in raw if k not in SECTIONS]
    if unknown:
        raise UserError(f"{unknown[0]}: unknown section; sections are {', '.join(SECTIONS)}")
    mc = ModelConfigSection.from_yaml(raw.get("model_config"))
    sched = SchedulerSection.from_yaml(raw.get("scheduler_config"))
    data = DataSection.from_yaml(raw.get("data_config"))
    pb = PerfbenchSection.from_yaml(raw.get("perfbench"))
    parallel_raw = raw.get("parallel_config")
    if parallel_raw is not None and not isinstance(parallel_raw, dict):
        raise UserError(f"parallel_config: must be a mapping, got {parallel_raw!r}")
    try:
        parallel = ParallelConfig.from_dict(parallel_raw)
    except ParallelConfigError as err:
        raise UserError(str(err)) from None
    layers_key = ("perfbench.num_layers" if pb.num_layers is not None
                  else "model_config.custom_params.num_hidden_layers")
    pb, model_key = _derive(pb, mc, sched, data, name or Path(source).stem)
    scenario = Scenario(name=str(pb.name), source=source, model_config=mc, parallel_config=parallel,
                        scheduler_config=sched, data_config=data, perfbench=pb, model_key=model_key)
    wl = pb.workload
    input_lens, output_len = list(wl.input_lens or ()), int(wl.output_len or 1)
    if wl.lengths:  # the distribution replaces both: its longest request must fit (a bad file fails here)
        requests = load_lengths(str(wl.lengths))
        input_lens, output_len = [max(r.input_len for r in requests)], max(r.output_len for r in requests)
    # absurd shapes first: no model needed, and nothing below has to handle a batch of 10**20
    too_big = check_shapes(wl.batch_sizes or (), input_lens, output_len)
    if too_big:
        raise UserError(too_big)
    own = scenario.model_config_here(own=True)
    if own is not None:
        beyond = check_model_limits(own, str(pb.model), input_lens, output_len, pb.num_layers, layers_key)
        if beyond:
            raise UserError(beyond)
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
    """A YAML path, or the name of a shipped scenario (scenarios/NAME.yaml; default: default_cpu)."""
    key = path_or_name or "default_cpu"
    path = Path(key).expanduser()
    if path.is_file():
        return path
    if path.is_dir():  # not "no such file": the path exists, it is just not a YAML file
        inside = sorted(p.name for p in path.glob("*.y*ml"))[:5]
        raise UserError(f"scenario {key!r}: is a directory, not a scenario YAML file; give a .yaml file"
                        + (f" (it holds {', '.join(inside)})" if inside else " (it holds no .yaml file)"))
    if path.exists():  # a device, FIFO or socket: reading it would block or never end
        raise UserError(f"scenario {key!r}: is not a regular file; give a scenario YAML file")
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
