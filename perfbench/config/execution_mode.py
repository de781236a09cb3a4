"""The execution mode a run measured, derived from its plan: eager, or the graph capture its device's graph_mode
uses (model/ops/graph.py):

    eager         graph_mode off or inactive: every op dispatched from Python
    inductor      CPU: torch.compile (inductor, static shapes, C++ wrapper)
    cuda_graphs   CUDA: torch.compile mode reduce-overhead (inductor kernels replayed through CUDA graphs)
    ge_graph      NPU: a torchair GE graph
    npugraph_ex   NPU: an npugraph_ex (aclgraph) capture

graph_mode captures the decode step only; prefill runs eagerly in every mode. The profiled iteration of a graph
mode plan runs the same compiled decode step as the timed iterations, without layer annotations (a layer range
inside the captured graph would force a recompile), so a graph-mode trace cannot say which layer an op belongs
to, and the host ops inside the graph are not dispatched one by one: its per-layer tables say so
(`hidden_note`) instead of attributing time. Torch-free: the report and `perfbench trace` read it offline.
"""

from __future__ import annotations

from perfbench.results import RunResult

EAGER = "eager"
MODES = (EAGER, "ge_graph", "npugraph_ex", "cuda_graphs", "inductor")
_GRAPH_BY_DEVICE = {"cpu": "inductor", "cuda": "cuda_graphs"}  # npu: the plan's exe_mode
NPU_GRAPH_MODES = ("ge_graph", "npugraph_ex")


def execution_mode(device: str, graph_on: bool, exe_mode: str = "ge_graph") -> str:
    """The mode a plan on `device` runs its decode step in (one of MODES)."""
    if not graph_on:
        return EAGER
    kind = device.split(":", 1)[0].lower()
    if kind == "npu":
        return exe_mode if exe_mode in NPU_GRAPH_MODES else "ge_graph"
    return _GRAPH_BY_DEVICE.get(kind, "inductor")


def is_graph_mode(mode: str | None) -> bool:
    return mode is not None and mode != EAGER


def planned_mode(result: RunResult) -> str:
    """The mode of a run's plan: its graph_mode decision on its device (on NPU the flavour its implementation
    names, "torchair ge_graph", else the spec's exe_mode)."""
    decision = result.plan.decisions.get("graph_mode")
    on = decision is not None and decision.on
    exe_mode = result.spec.exe_mode
    if decision is not None and on and decision.impl.startswith("torchair "):
        exe_mode = decision.impl.split()[-1]
    return execution_mode(result.spec.device, on, exe_mode)


def result_mode(result: RunResult) -> str:
    """The mode a run's trace recorded (`trace.mode`), else the one its plan gives (records from before the trace
    recorded it)."""
    recorded = result.trace.mode
    return recorded if isinstance(recorded, str) and recorded in MODES else planned_mode(result)


def mode_text(mode: str, emulation: str | None = None) -> str:
    """"eager", "inductor (graph mode)", "ge_graph (graph mode; emulated npu (910b), CPU timings)"."""
    parts = ["graph mode"] if is_graph_mode(mode) else []
    if emulation:
        parts.append(f"{emulation}, CPU timings")
    return f"{mode} ({'; '.join(parts)})" if parts else mode


def hidden_note(mode: str, emulation: str | None = None) -> str:
    """What a graph-mode trace cannot attribute, for the tables that would otherwise attribute it."""
    label = f"{mode}, {emulation}" if emulation else mode
    return (f"graph mode ({label}): per-layer attribution is hidden by the captured graph (the profiled iteration "
            "carries no layer annotations, and the decode step's host ops run inside the graph, not one launch "
            "per op); per-phase and per-op times stand")
