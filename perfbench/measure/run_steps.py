"""Inside one run, as protocol steps that both timing modes use (a run on its own, or a block group:
perfbench/measure/blocks.py):

1. `prepare_run`: the reference (when `numerics_check`, the all-off model with the same weights decodes the
   workload first; its logits are kept, cached per sweep, and the model freed so the measured model's peak memory
   is not doubled); the build (the model's own plan checked against the runner's); `warm_up` (untimed
   iterations: the first decode step of a graph_mode plan compiles, reported as `compile_s`, and `compile_warm_s`
   from the warm cache when enable_cache_compile is on; the first prefill builds the plan's compiled CPU
   kernels, reported as `first_ttft_ms`).
2. Timing: `time_iterations` until the stopping rule says enough (perfbench/measure/stopping.py), one iteration
   (perfbench/measure/iteration.py) at a time with the host probe before each; or blocks. One sample per iteration
   is the statistical unit (TTFT; TPOT = the mean of that iteration's decode steps; every step kept apart).
   `record_timings` writes samples, summary, stability verdicts (perfbench/analysis/stability.py) and numerics
   (one untimed iteration with its routing logged, against the reference: `numerics_against_reference`).
3. `finish_run`: the MoE routing counts of one untimed iteration (round 1 only; perfbench/analysis/expert_load.py)
   and the profiled iteration (perfbench/measure/profiled.py).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from model.backend import (
    Capabilities,
    detect_capabilities,
    reset_peak_memory,
    synchronize,
)
from model.cache import Qwen3_5MoeCache
from model.config import load_config
from model.modeling import Qwen3_5MoeForCausalLM
from model.replay import Capture, LayerTap, Replay
from model.routing_log import RoutedCall
from perfbench.analysis import stability, stats
from perfbench.analysis.expert_load import load_record
from perfbench.analysis.tail import decode_step_summary
from perfbench.emulation.npu.runtime import tensor_device
from perfbench.measure import failure_kinds, host_load, host_signals
from perfbench.measure.code_origin import gather_code_origins
from perfbench.measure.compile_cache import compile_cache_root
from perfbench.measure.host_probe import HostProbe, speed_change
from perfbench.measure.iteration import Iteration, Workload, make_workload, run_iteration
from perfbench.measure.memory_split import memory_split
from perfbench.measure.numerics import compare_replayed
from perfbench.measure.profiled import profile_iteration
from perfbench.measure.routing_flips import rounding_flips, routing_from_tensors, routing_to_tensors
from perfbench.measure.stopping import StoppingRule
from perfbench.results import ExpertLoad, Numerics, RunPlan, RunResult, RunSpec, Stability, TraceRecord
from perfbench.results.timestamps import utc_timestamp

if TYPE_CHECKING:
    pass

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_model(spec: RunSpec, caps: Capabilities, toggles: dict[str, bool] | str,
                compile_cache_dir: Path | None = None) -> Qwen3_5MoeForCausalLM:
    return Qwen3_5MoeForCausalLM.from_pretrained(
        spec.model, dtype=DTYPES[spec.dtype], device=tensor_device(caps.device), optimizations=toggles,
        parallel_config=spec.parallel, num_layers=spec.num_layers, dummy_weights=not spec.with_ckpt,
        seed=spec.seed, exe_mode=spec.exe_mode, caps=caps, compile_cache_dir=compile_cache_dir)


def reference_key(spec: RunSpec) -> str:
    """Runs that share weights and workload share the all-off reference logits."""
    parts = (spec.model, spec.num_layers, spec.with_ckpt, spec.seed, spec.dtype, spec.device, spec.batch_size,
             spec.input_len, spec.output_len, spec.ragged, sorted(spec.parallel.items()))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Reference:
    """The all-off model's logits for a workload [B, steps, V], its routing log (model/routing_log.py) and each
    forward's layer tap (every layer's inputs and branch outputs, model/replay.py): what a run replays."""

    logits: torch.Tensor
    routing: list[RoutedCall]
    taps: list[LayerTap]
    source: str = ""  # the cached file it was read from ("" when decoded in this run)
    note: str = ""  # why a cached file was not used, when it was decoded anew


def _new_file_mode() -> int:
    """The mode a new file of this process gets: 0666 less the umask (read without changing it)."""
    status = Path("/proc/self/status")
    text = status.read_text() if status.is_file() else ""
    line = next((x for x in text.splitlines() if x.startswith("Umask:")), "")
    mask = int(line.split()[1], 8) if line else 0o022
    return 0o666 & ~mask


def _cached_reference(path: Path, workload: Workload, vocab: int) -> Reference:
    """The reference cached at `path`, its keys and logits checked against the workload; anything wrong is a
    RuntimeError naming the file (damaged, cut short or edited by hand)."""
    from safetensors.torch import load_file

    def broken(why: str) -> RuntimeError:
        return RuntimeError(f"the cached reference {path} cannot be used ({why})")

    try:
        tensors = load_file(str(path))
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types for a damaged file
        raise broken(f"{type(err).__name__}: {' '.join(str(err).split())[:200]}") from None
    logits = tensors.get("logits")
    want = (len(workload.prompts), workload.output_len, vocab)
    if logits is None or not logits.is_floating_point() or tuple(logits.shape) != want:
        got = "no logits" if logits is None else f"logits {tuple(logits.shape)} {logits.dtype}"
        raise broken(f"{got}, where this workload needs floating-point logits {want}")
    count = tensors.get("tap.count")
    taps = []
    if count is not None:
        if count.numel() != 1 or not 0 <= int(count) <= sum(k.startswith("tap.") for k in tensors):
            raise broken(f"tap.count {count.flatten()[:1].tolist()} does not match its taps")
        missing = [k for i in range(int(count)) for k in (f"tap.{i}.inputs", f"tap.{i}.outputs") if k not in tensors]
        if missing:
            raise broken(f"{missing[0]} is missing")
        taps = [LayerTap(tensors[f"tap.{i}.inputs"], tensors[f"tap.{i}.outputs"], force=False)
                for i in range(int(count))]
    try:
        routing = routing_from_tensors(tensors)
    except (KeyError, ValueError, RuntimeError) as err:
        raise broken(f"its routing log: {type(err).__name__}: {err}") from None
    return Reference(logits, routing, taps, source=str(path))


def all_off_reference(spec: RunSpec, caps: Capabilities, workload: Workload, cache_dir: Path | None,
                      vocab: int) -> Reference:
    """The all-off model's logits, routing and layer taps for this workload, computed once per sweep (kept as
    safetensors beside the runs, so later runs of the same shape load them instead of decoding the slow unfused
    model again)."""
    from safetensors.torch import save_file

    path = cache_dir / f"{reference_key(spec)}.safetensors" if cache_dir is not None else None
    note = ""
    if path is not None and path.is_file():
        try:
            return _cached_reference(path, workload, vocab)
        except RuntimeError as err:  # a cache: decoded anew and replaced, and the numerics record say so
            note = f"{err}: decoded anew, and the file replaced"
            print(f"perfbench: {note}", file=sys.stderr, flush=True)
    reference = _decode_reference(spec, caps, workload)
    if note:
        reference = dataclasses.replace(reference, note=note)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # runs in parallel (ray executor) may race here
        tap_tensors = {f"tap.{i}.{part}": getattr(t, part).contiguous() for i, t in enumerate(reference.taps)
                       for part in ("inputs", "outputs")}
        save_file({"logits": reference.logits.contiguous(), **routing_to_tensors(reference.routing), **tap_tensors,
                   "tap.count": torch.tensor(len(reference.taps))}, str(tmp))
        tmp.chmod(_new_file_mode())  # safetensors writes 0600; the folder's other files are as the umask gives
        tmp.replace(path)
    return reference


def _decode_reference(spec: RunSpec, caps: Capabilities, workload: Workload) -> Reference:
    model = build_model(spec, caps, "none")
    ids, seq_lens = model.pad_prompts(workload.prompts)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + workload.output_len)
    capture = Capture()
    with model.routing_log.recording() as log:
        it = run_iteration(model, ids, seq_lens, cache, workload.output_len, keep_logits=True, capture=capture)
    assert it.logits is not None
    reference = Reference(it.logits, log.calls, [LayerTap(t.inputs.cpu(), t.outputs.cpu(), force=False)
                                                 for t in capture.taps])
    del model, cache
    gc.collect()
    return reference


def numerics_against_reference(run: PreparedRun) -> Numerics:
    """One untimed iteration that replays the reference's greedy tokens, expert choices and layer inputs, its
    layer outputs and logits compared with the reference's at every layer, row and step
    (perfbench/measure/numerics.py); the run's own routing, logged in the same iteration, is compared with the
    reference's as information. A reference that cannot be replayed gives numerics that say why (`not_compared`),
    which the gate fails."""
    assert run.reference is not None
    reference = run.reference
    described = ("all toggles off, same weights, same process; the run replays its greedy tokens, expert choices "
                 "and layer inputs" + (f" ({reference.note})" if reference.note else ""))
    try:
        if not reference.taps:
            raise ValueError("it recorded no layer inputs (a reference file from an older perfbench)")
        replay = Replay.of(reference.logits.argmax(-1), reference.routing, run.model.config.num_hidden_layers,
                           run.model.device, layer_inputs=[t.inputs for t in reference.taps])
    except ValueError as err:
        where = f" (the cached {reference.source}: delete it and measure again into a new --out)" \
            if reference.source else ""
        return Numerics(not_compared=f"the reference cannot be replayed: {err}{where}", reference=described)
    capture = Capture()
    try:
        with run.model.routing_log.recording() as log:
            it = run_iteration(run.model, run.ids, run.seq_lens, run.cache, run.workload.output_len,
                               keep_logits=True, replay=replay, capture=capture)
        assert it.logits is not None
        agreement = compare_replayed([t.outputs for t in capture.taps], [t.outputs for t in reference.taps],
                                     it.logits, reference.logits, run.seq_lens)
        flips = rounding_flips(reference.routing, log.calls)
    except (RuntimeError, IndexError, ValueError) as err:
        if not reference.source:  # decoded in this process: a bug of the run, with its traceback
            raise
        # a cached file whose shapes or expert ids do not fit this model (damaged or edited)
        why = " ".join(f"{type(err).__name__}: {err}".split())[:200]
        return Numerics(not_compared=f"the cached reference {reference.source} cannot be replayed ({why}); delete "
                                     "it and measure again into a new --out", reference=described)
    return Numerics(max_rel_error=agreement.max_rel_error, worst_phase=agreement.phase,
                    worst_layer=agreement.layer, worst_branch=agreement.branch,
                    max_rel_logit_error=agreement.max_rel_logit_error,
                    max_abs_logit_diff=agreement.max_abs_logit_diff, top1_agreement=agreement.top1_agreement,
                    tokens_match=agreement.first_mismatch_step is None,
                    first_mismatch_step=agreement.first_mismatch_step, compared=agreement.compared,
                    routing_flips=flips.flips, routing_flip_step=flips.first_step,
                    routing_flip_margin=flips.widest_margin, reference=described)


def stopping_rule(spec: RunSpec) -> StoppingRule:
    if spec.max_iterations is None:
        return StoppingRule.fixed(spec.iterations)
    return StoppingRule(spec.iterations, max(spec.iterations, spec.max_iterations), spec.max_time_s,
                        spec.target_rel_ci)


def compile_cache_dir(spec: RunSpec, run_dir: Path) -> Path | None:
    """Where the decode graph's compile cache lives: one per sweep (beside runs/), so a kernel compiles once.

    Inductor (CPU, CUDA) keys its FX-graph cache by the graph, so every run shares one folder (the runner also
    points TORCHINDUCTOR_CACHE_DIR there for the plan's other compiled kernels). The torchair/npugraph_ex
    cache holds one compiled function, so on NPU the rounds of one combination share a folder.
    """
    if not spec.enable_cache_compile:
        return None
    root = compile_cache_root(run_dir.parent.parent)  # a path the compiler's command line takes (compile_cache.py)
    return root / "graph" / spec.combination_id if spec.device == "npu" else root / "inductor"


def summarize(ttft_ms: list[float], tpot_ms: list[float], workload: Workload) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, values in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        for label, p in (("median", 50.0), ("p90", 90.0), ("p99", 99.0)):
            out[f"{name}_{label}"] = stats.percentile(values, p) if values else None
    ttft = out["ttft_ms_median"]
    tpot = out["tpot_ms_median"]
    out["prefill_tok_s"] = workload.prompt_tokens / (ttft / 1e3) if ttft else None
    out["decode_tok_s"] = len(workload.prompts) / (tpot / 1e3) if tpot else None
    return out


class PlanMismatchError(RuntimeError):
    """The model's plan is not the one the runner resolved and labelled the run with."""

    def __init__(self, message: str, plan: RunPlan) -> None:
        super().__init__(message)
        self.plan = plan  # the worker's own, recorded with the error


def check_plan(spec: RunSpec, plan: RunPlan) -> None:
    mismatch = spec.plan_mismatch(plan)
    if mismatch:
        raise PlanMismatchError(mismatch, plan)


@dataclass
class PreparedRun:
    """A run built and warmed up, ready for timed iterations (protocol steps 1-2)."""

    spec: RunSpec
    run_dir: Path
    caps: Capabilities
    model: Qwen3_5MoeForCausalLM
    workload: Workload
    ids: torch.Tensor
    seq_lens: torch.Tensor
    cache: Qwen3_5MoeCache
    reference: Reference | None
    result: RunResult  # filled in as the steps go
    started: float  # perf_counter at the start, for wall_s

    def iterate(self) -> Iteration:
        """One timed iteration (the numerics come from an untimed one after timing: `numerics_against_reference`)."""
        return run_iteration(self.model, self.ids, self.seq_lens, self.cache, self.workload.output_len)


@dataclass
class Timings:
    """The timed iterations of one run: one value per iteration (TTFT; TPOT = the mean of that iteration's
    decode steps), every decode step apart, and the host probe readings taken around them."""

    ttft_ms: list[float]
    tpot_ms: list[float]
    tpot_steps_ms: list[float]
    probe_ms: list[float]

    @classmethod
    def empty(cls) -> Timings:
        return cls([], [], [], [])

    def add(self, it: Iteration) -> None:
        self.ttft_ms.append(it.ttft_ms)
        if (tpot := it.tpot_ms) is not None:
            self.tpot_ms.append(tpot)
            self.tpot_steps_ms.extend(s * 1e3 for s in it.step_s)

    def watched(self) -> dict[str, list[float]]:
        return {"ttft_ms": self.ttft_ms, **({"tpot_ms": self.tpot_ms} if self.tpot_ms else {})}


@dataclass
class HostWatch:
    """Host signals read before timing, to judge the timing window when it ends (perfbench/analysis/stability.py)."""

    signals: host_signals.HostSignals
    load: host_load.CpuSnapshot | None

    @classmethod
    def start(cls) -> HostWatch:
        return cls(host_signals.read_signals(), host_load.snapshot())

    def summary(self, device: str) -> dict[str, float | None]:
        threads = _run_threads(device)
        out: dict[str, float | None] = {}
        load = host_load.host_load(self.load, host_load.snapshot(), run_threads=threads)
        if load is not None:
            out.update(load.as_summary())
        out.update(host_signals.signals_summary(self.signals, host_signals.read_signals(), threads))
        return out


def prepare_run(spec: RunSpec, run_dir: Path) -> PreparedRun:
    """Steps 1-2: the reference logits, the measured model (its plan checked), warm-up and compile."""
    started = utc_timestamp()
    t0 = time.perf_counter()
    from perfbench.measure.environment import collect_environment

    torch.manual_seed(spec.seed)
    caps = detect_capabilities(spec.device)
    result = RunResult(run_id=spec.run_id, status="ok", spec=spec, started_at=started,
                       env=collect_environment(caps.device))
    reference = None
    if spec.numerics_check:
        vocab = load_config(spec.model, spec.num_layers).vocab_size
        # every rank must decode the reference (collectives), so only single-process runs share a cached one
        shared = run_dir.parent.parent / "reference" if spec.world_size == 1 else None
        began = time.perf_counter()
        reference = all_off_reference(spec, caps, make_workload(spec, vocab), shared, vocab)
        result.stages.reference_s = round(time.perf_counter() - began, 3)
    reset_peak_memory(caps.device)  # the measured model's peak, not the reference's or an earlier run's
    cache_dir = compile_cache_dir(spec, run_dir)
    # torchair's graph cache (NPU): warm when an earlier round of this combination filled its folder
    cache_warm = any(cache_dir.iterdir()) if spec.device == "npu" and cache_dir and cache_dir.is_dir() else None
    inductor_before = _inductor_cache_counts()
    began = time.perf_counter()
    model = build_model(spec, caps, spec.toggles, cache_dir)
    result.stages.build_s = round(time.perf_counter() - began, 3)
    if spec.world_size > 1:  # every rank's code, now that the process group is up (a collective)
        result.env.code = gather_code_origins()
    result.plan = RunPlan.of(model.plan)
    check_plan(spec, result.plan)
    workload = make_workload(spec, model.config.vocab_size)
    ids, seq_lens = model.pad_prompts(workload.prompts)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + workload.output_len)
    prepared = PreparedRun(spec, run_dir, caps, model, workload, ids, seq_lens, cache, reference, result, t0)
    began = time.perf_counter()
    warm_up(prepared, inductor_before, cache_warm)
    result.stages.warmup_s = round(time.perf_counter() - began, 3)
    return prepared


def _compile_seconds(it: Iteration) -> float:
    """The first decode step's excess over the steady steps: what compiling the decode graph cost."""
    steady = stats.median(it.step_s[1:]) if len(it.step_s) > 1 else 0.0
    return it.step_s[0] - steady


def warm_up(run: PreparedRun, inductor_before: tuple[int, int], cache_warm: bool | None) -> None:
    """Untimed iterations. The first decode call compiles under graph_mode (`compile_s`; `compile_warm_s`: a
    second compile after a dynamo reset, from the warm cache, when enable_cache_compile is on); the first
    prefill builds the plan's compiled CPU kernels (`first_ttft_ms`)."""
    spec, model, summary = run.spec, run.model, run.result.summary
    compile_s = first_ttft_ms = compile_warm_s = None
    for i in range(max(spec.warmup, 1)):
        it = run_iteration(model, run.ids, run.seq_lens, run.cache, run.workload.output_len)
        if i == 0:
            first_ttft_ms = it.ttft_s * 1e3
            if model.plan.on("graph_mode") and it.step_s:
                compile_s = _compile_seconds(it)
    if spec.device != "npu":
        cache_warm = _inductor_cache_warm(inductor_before, _inductor_cache_counts())
    if compile_s is not None and spec.enable_cache_compile:
        model.reset_graph()
        compile_warm_s = _compile_seconds(run_iteration(model, run.ids, run.seq_lens, run.cache,
                                                        run.workload.output_len))
    summary.compile_cache_warm = None if cache_warm is None else float(cache_warm)
    summary.compile_s = compile_s
    summary.compile_warm_s = compile_warm_s
    summary.first_ttft_ms = first_ttft_ms


def host_probe_for(run: PreparedRun) -> HostProbe | None:
    """The host-speed probe, where the model's kernels run on the CPU (host_probe.py)."""
    return HostProbe(run.spec.seed) if run.model.device.type == "cpu" else None


def time_iterations(run: PreparedRun) -> tuple[Timings, str, dict[str, float | None]]:
    """Step 3 for a run timed on its own: iterations until the stopping rule says enough. Returns the timings,
    the stop reason and the host signals of the window."""
    timings = Timings.empty()
    rule = stopping_rule(run.spec)
    probe = host_probe_for(run)
    watch = HostWatch.start()
    timing_start = time.perf_counter()
    stop_reason = None
    while stop_reason is None:
        if probe is not None:
            timings.probe_ms.append(probe())
        timings.add(run.iterate())
        stop_reason = rule.stop_reason(timings.watched(), time.perf_counter() - timing_start)
    synchronize(run.caps.device)
    return timings, stop_reason, watch.summary(run.caps.device)


def record_timings(run: PreparedRun, timings: Timings, stop_reason: str, host: dict[str, float | None]) -> None:
    """The timed samples into the result: summary, stability verdicts, numerics of the last iteration."""
    result = run.result
    result.samples = {"ttft_ms": timings.ttft_ms, "tpot_ms": timings.tpot_ms,
                      "tpot_steps_ms": timings.tpot_steps_ms,
                      **({stability.PROBE_SAMPLES: timings.probe_ms} if timings.probe_ms else {})}
    result.stop_reason = stop_reason
    result.summary.update(summarize(timings.ttft_ms, timings.tpot_ms, run.workload))
    result.summary.update(decode_step_summary(timings.tpot_steps_ms))
    result.summary.iterations = float(len(timings.ttft_ms))
    result.summary.update(memory_split(run.caps.device, run.model, run.cache.tensors()))
    result.summary.host_speed_change = speed_change(timings.probe_ms)
    result.summary.update(host)
    verdict, per_metric = stability.run_stability(result.summary, result.samples)
    result.stability = Stability.model_validate(
        {**verdict.to_dict(), "metrics": {k: v.to_dict() for k, v in per_metric.items()}})
    if run.reference is not None:
        began = time.perf_counter()
        result.numerics = numerics_against_reference(run)
        result.stages.numerics_s = round(time.perf_counter() - began, 3)


def finish_run(run: PreparedRun) -> RunResult:
    """Steps 4-5 after timing: the MoE expert load and the profiled iteration (round 1 only)."""
    result, spec = run.result, run.spec
    if spec.round <= 1:  # a combination's merged result reports round 1's load (analysis/rounds.py)
        began = time.perf_counter()
        result.expert_load = expert_load(run.model, run.ids, run.seq_lens, run.cache, run.workload)
        result.stages.expert_load_s = round(time.perf_counter() - began, 3)
    if spec.profile:
        began = time.perf_counter()
        result.trace = TraceRecord.model_validate(
            profile_iteration(run.model, run.ids, run.seq_lens, run.cache, run.workload, run.run_dir, spec, run.caps))
        result.stages.profile_s = round(time.perf_counter() - began, 3)
    result.wall_s = time.perf_counter() - run.started
    return result


def measure_run(spec: RunSpec, run_dir: Path) -> RunResult:
    """One run timed on its own: prepare, time, record, finish."""
    with failure_kinds.stage(failure_kinds.STARTUP):
        run = prepare_run(spec, run_dir)
    try:
        with failure_kinds.stage(failure_kinds.BENCHMARK):
            began = time.perf_counter()
            timings, stop_reason, host = time_iterations(run)
            run.result.stages.timing_s = round(time.perf_counter() - began, 3)
            record_timings(run, timings, stop_reason, host)
            return finish_run(run)
    except Exception as err:
        # the worker records the plan that was built
        err.plan = run.result.plan  # type: ignore[attr-defined]
        raise


def _inductor_cache_counts() -> tuple[int, int]:
    """(hits, misses) of inductor's FX-graph cache so far in this process."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def _inductor_cache_warm(before: tuple[int, int], after: tuple[int, int]) -> bool | None:
    """Did every graph inductor compiled during the warm-up come from the cache? None when none compiled (no
    compiled kernel in the plan, or this process had compiled them for an earlier run)."""
    hits, misses = after[0] - before[0], after[1] - before[1]
    if misses:
        return False
    return True if hits else None


COUNTED = "one untimed iteration after timing (each timed iteration routes the same greedy workload)"


def expert_load(model: Qwen3_5MoeForCausalLM, ids: torch.Tensor, seq_lens: torch.Tensor, cache: Qwen3_5MoeCache,
                workload: Workload) -> ExpertLoad:
    """Per-expert routing counts of every MoE layer over one iteration (analysis/expert_load.py). Prefill counts
    include the padding positions of a ragged batch: they are routed and computed too. A compiled decode step
    records nothing (model/expert_counts.py), so graph_mode runs have prefill counts only."""
    with model.expert_counts.recording():
        run_iteration(model, ids, seq_lens, cache, workload.output_len)
    totals = model.expert_counts.totals()  # a collective under EP: every rank calls it
    not_recorded = {}
    if "decode" not in totals and workload.output_len > 1:
        not_recorded["decode"] = ("graph_mode: the compiled decode step carries no recording" if
                                  model.plan.on("graph_mode") else "no decode step recorded")
    return ExpertLoad.model_validate(
        load_record(totals, num_experts=model.config.num_experts, top_k=model.config.num_experts_per_tok,
                    ep_size=model.groups.layout.size("moe_ep"), counted=COUNTED, not_recorded=not_recorded))


def _run_threads(device: str) -> int:
    """CPU threads this run keeps busy on this host: its intra-op threads on CPU (one host thread per rank on an
    accelerator), times the ranks started here."""
    per_rank = torch.get_num_threads() if device == "cpu" else 1
    return per_rank * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
