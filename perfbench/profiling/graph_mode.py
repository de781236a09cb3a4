"""Graph-mode honesty in a trace: did the profiled decode steps replay the captured graph the plan says they
ran, which mode a trace shows (its run's record, else its decode steps), and the per-layer tables of a
graph-mode trace replaced by what the graph hides (perfbench/config/execution_mode.py).

The replay markers are host events that a graph replay leaves in each decode step:

  inductor      `## Call CompiledFxGraph ...` / `Torch-Compiled Region` holding at least half of the step's host
                self time (`WHOLE_STEP_SHARE`): eager plans call compiled kernels too (fused RMSNorm, RoPE), each
                a small part of the step; the compiled decode step runs its kernels inside one call (perfbench's
                CPU traces: 95% in graph mode, 19-28% for the eager fused plan)
  cuda_graphs   `cudaGraphLaunch` (the runtime call that replays a CUDA graph)
  ge_graph,     `Torch-Compiled Region` (dynamo's range around the compiled step). torchair's cached graphs
  npugraph_ex   (cache_compile) may run without dynamo, so on NPU a missing marker is "not checked", not a
                contradiction; a marker in some decode steps and not in others still is one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from perfbench.config.execution_mode import (
    EAGER,
    MODES,
    NPU_GRAPH_MODES,
    hidden_note,
    is_graph_mode,
    mode_text,
    result_mode,
)
from perfbench.profiling.events import check_events
from perfbench.profiling.signatures import COMPILED_GRAPH
from perfbench.results import RunResult

CUDA_GRAPH_LAUNCH = r"^cudaGraphLaunch"
DYNAMO_REGION = r"^Torch-Compiled Region"
REPLAY_MARKERS = {"inductor": COMPILED_GRAPH, "cuda_graphs": CUDA_GRAPH_LAUNCH,
                  **dict.fromkeys(NPU_GRAPH_MODES, DYNAMO_REGION)}
ALL_LAYERS = "(all)"  # host_bound's and idle's whole-step / whole-phase rows
WHOLE_STEP_SHARE = 0.5


@dataclass(frozen=True)
class ModeCheck:
    """The profiled iteration's decode steps against the planned mode: ok True (a replay in every step), False
    (`line` says which steps ran without one), None (not checked: eager, no decode steps, or no marker on NPU)."""

    mode: str
    ok: bool | None
    line: str
    decode_steps: int = 0
    replay_steps: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _steps_with(events: pd.DataFrame, pattern: str, share: float = 0.0) -> tuple[int, int]:
    """(decode steps, decode steps whose host events matching `pattern` are there and hold more than `share` of
    the step's host self time), counted per rank."""
    decode = events[(events["phase"] == "decode") & events["step"].notna() & (events["side"] == "host")]
    keys = ["rank", "step"]
    total = decode.groupby(keys)["dur_us"].sum()
    matched = decode[decode["name"].str.contains(pattern, regex=True)].groupby(keys)["dur_us"].sum()
    held = matched / total.reindex(matched.index)
    return len(total), int((held >= share).sum()) if share > 0 else len(matched)


def _replay_steps(events: pd.DataFrame, mode: str) -> tuple[int, int]:
    return _steps_with(events, REPLAY_MARKERS[mode], WHOLE_STEP_SHARE if mode == "inductor" else 0.0)


def check_mode(events: pd.DataFrame, mode: str) -> ModeCheck:
    """Did the trace's decode steps run in `mode`? (see ModeCheck)"""
    check_events(events)
    if not is_graph_mode(mode):
        return ModeCheck(mode, None, f"{mode}: no replay to look for")
    steps, replays = _replay_steps(events, mode)
    if steps == 0:
        return ModeCheck(mode, None, f"graph mode ({mode}): not checked (no decode steps in the trace)")
    if replays == steps:
        return ModeCheck(mode, True, f"graph mode ({mode}): a captured graph replayed in each of the {steps} "
                                     "profiled decode steps", steps, replays)
    if replays == 0 and mode in NPU_GRAPH_MODES:
        return ModeCheck(mode, None, f"graph mode ({mode}): not checked (no dynamo region in the decode steps; "
                                     "torchair's cached graphs may run without one)", steps, 0)
    return ModeCheck(mode, False, f"graph mode ({mode}) planned, but {steps - replays} of {steps} profiled decode "
                                  "steps replayed no captured graph (they ran eagerly)", steps, replays)


def detect_mode(events: pd.DataFrame) -> str | None:
    """The mode a trace shows without its plan: cuda_graphs (a CUDA graph launch in every decode step), inductor
    (a compiled call holding most of every decode step), eager (decode steps otherwise); None without annotated
    decode steps (a trace from elsewhere) or for a whole-step dynamo region without inductor's call and without
    layer annotations (an NPU graph, whose flavour the trace does not tell)."""
    check_events(events)
    steps, launches = _steps_with(events, CUDA_GRAPH_LAUNCH)
    if steps == 0:
        return None
    if launches == steps:
        return "cuda_graphs"
    if _replay_steps(events, "inductor")[1] == steps:
        return "inductor"
    decode = events[(events["phase"] == "decode") & events["step"].notna()]
    if not decode["layer"].notna().any() and _steps_with(events, DYNAMO_REGION)[1] == steps:
        return None  # every step in a dynamo region without inductor's call: an NPU graph (or another backend)
    return EAGER


def hide_per_layer(tables: dict[str, pd.DataFrame], mode: str, emulation: str | None = None
                   ) -> dict[str, pd.DataFrame]:
    """`tables` (stem -> table, as write_tables builds them) for a graph-mode trace: per_layer_type becomes the
    note; host_bound and idle keep only their whole-step / whole-phase rows (layer_type "(all)"), with the note,
    and host_bound's host time per launch is blanked (the graph launches its kernels, not one host op each)."""
    if not is_graph_mode(mode):
        return tables
    note = hidden_note(mode, emulation)
    out = dict(tables)
    out["per_layer_type"] = pd.DataFrame({"mode": [mode], "emulation": [emulation or ""], "note": [note]})
    for stem in ("host_bound", "idle"):
        table = tables.get(stem)
        if table is None:
            continue
        kept = table[table["layer_type"] == ALL_LAYERS].copy()
        if stem == "host_bound":
            kept["host_us_per_launch"] = float("nan")
        kept["note"] = note
        out[stem] = kept.reset_index(drop=True)
    return out


EMULATED_NOTE = "EMULATED.txt"  # the NPU emulator's note in its *_ascend_pt folder (emulation/npu/profiler.py)


@dataclass(frozen=True)
class TraceMode:
    """The execution mode `perfbench trace` reports for a trace, and where it comes from."""

    mode: str | None
    source: str
    emulation: str | None = None

    def line(self) -> str:
        if self.mode is None:
            return f"mode: unknown; {self.source}" + (f" ({self.emulation}, CPU timings)" if self.emulation else "")
        return f"mode: {mode_text(self.mode, self.emulation)}; {self.source}"


def emulation_near(path: Path) -> str | None:
    """"emulated npu (910b)" when `path` is (or holds, or sits in) the NPU emulator's profiler output."""
    path = Path(path)
    folders = [path, *path.resolve().parents][:3]
    if path.is_dir():
        folders += [p for p in path.iterdir() if p.is_dir() and p.name.endswith("_ascend_pt")]
    for folder in folders:
        note = Path(folder) / EMULATED_NOTE
        if note.is_file():
            try:
                first = note.read_text().split(":", 1)[0].strip()
            except OSError:
                continue
            return first or "emulated npu"
    return None


def trace_mode(events: pd.DataFrame, path: Path, result: RunResult | None = None) -> TraceMode:
    """The mode of a trace: what its run recorded (`result`, from the run's result.json: its trace's `mode`,
    else its plan on its device), else what the trace shows (`detect_mode`)."""
    emulation = (result.env.emulation if result is not None else None) or emulation_near(path)
    if result is not None and result.plan:
        source = "recorded by the run" if result.trace.mode in MODES else "the run's plan"
        return TraceMode(result_mode(result), f"{source}, result.json", emulation)
    detected = detect_mode(events)
    if detected is None:
        return TraceMode(None, "no perfbench decode-step annotations, or an NPU graph whose flavour the trace does "
                               "not tell", emulation)
    return TraceMode(detected, "detected from the trace's decode steps", emulation)
