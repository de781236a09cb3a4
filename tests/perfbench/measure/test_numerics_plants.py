"""Plant the fault before trusting the check: a fused kernel that is off by 3 % (inside the 2-5 % a real kernel bug
tends to be) is caught in bf16 by the harness's own numerics step, in every single-process op family, graph mode
included; the same family computed one precision up (the same math, rounded differently) passes.

Each case builds the tiny model (4 layers: three gated delta net layers and one attention layer) and runs
`numerics_against_reference` against one all-off reference, as a run does after timing. The margins behind the
bound (docs/numerics.md): on this shape, legit toggles and rounding-only changes stay under 1.2e-2 in bf16 and a 2 %
plant is over 1.6e-2; the bound is 1.4e-2, and a 3 % plant lands over 2.4e-2.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from model.backend import detect_capabilities
from perfbench.measure import failure_kinds
from perfbench.measure.iteration import make_workload
from perfbench.measure.run_steps import (
    PreparedRun,
    Reference,
    _decode_reference,
    build_model,
    numerics_against_reference,
)
from perfbench.results import RunResult, RunSpec
from tests.planted_faults import planted
from tests.records_kit import run_result

pytestmark = pytest.mark.slow

EAGER = ["fused_rmsnorm", "fused_rope", "fused_attention", "chunk_gdr", "grouped_moe", "merged_projections"]


def spec(toggles: dict[str, bool]) -> RunSpec:
    return RunSpec(run_id="r", scenario="plants", dtype="bfloat16", num_layers=4, batch_size=2, input_len=64,
                   output_len=6, toggles=toggles, profile=False)


@pytest.fixture(scope="module")
def reference() -> Reference:
    s = spec({})
    return _decode_reference(s, detect_capabilities("cpu"), make_workload(s, 4096))


def checked(reference: Reference, toggles: dict[str, bool], tmp_path: Path) -> RunResult:
    s = spec(toggles)
    caps = detect_capabilities("cpu")
    model = build_model(s, caps, toggles)
    assert all(model.plan.on(t) for t in toggles), model.plan
    workload = make_workload(s, model.config.vocab_size)
    ids, seq_lens = model.pad_prompts(workload.prompts)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + workload.output_len)
    result = run_result("r", spec=s)
    run = PreparedRun(s, tmp_path, caps, model, workload, ids, seq_lens, cache, reference, result,
                      time.perf_counter())
    result.numerics = numerics_against_reference(run)
    return result


GRAPH_MODE = {"grouped_moe": True, "graph_mode": True}
CASES = [(family, {family: True}) for family in EAGER] + [("graph_mode", GRAPH_MODE)]


@pytest.mark.parametrize(("family", "toggles"), CASES, ids=[c[0] for c in CASES])
def test_a_three_percent_kernel_fault_is_caught_in_bf16(reference, tmp_path, family, toggles) -> None:
    with planted(family, 1.03):
        result = checked(reference, toggles, tmp_path)
    reason = failure_kinds.numerics_failure(result)
    assert reason.startswith("relative error"), (family, result.numerics)
    assert result.numerics.compared == 2 * 6 and result.numerics.worst_branch in ("mixer", "moe", "logits")


@pytest.mark.parametrize("family", EAGER)
def test_the_same_family_rounded_differently_passes(reference, tmp_path, family) -> None:
    with planted(family, None):
        result = checked(reference, {family: True}, tmp_path)
    assert failure_kinds.numerics_failure(result) == "", result.numerics
    assert result.numerics.max_rel_error is not None


def checked_counting_graphs(reference: Reference, toggles: dict[str, bool], tmp_path: Path) -> tuple[RunResult, int]:
    """`checked`, and how many graphs dynamo compiled for it. The model is new and only the numerics iteration
    runs, so in graph mode every compiled graph is the replay's own decode step (fullgraph: no partial graphs)."""
    torch._dynamo.reset()  # a graph an earlier test left in dynamo's cache is not this replay's
    before = counters["stats"]["unique_graphs"]
    result = checked(reference, toggles, tmp_path)
    return result, counters["stats"]["unique_graphs"] - before


def test_graph_mode_without_a_fault_passes_and_replays_inside_the_compiled_step(reference, tmp_path) -> None:
    result, graphs = checked_counting_graphs(reference, GRAPH_MODE, tmp_path)
    assert failure_kinds.numerics_failure(result) == "", result.numerics
    # one graph: the replay's decode steps (expert ids and layer tap as graph inputs) share it, none ran eager
    assert graphs == 1


def test_a_replay_that_falls_back_to_eager_compiles_no_graph(reference, tmp_path, monkeypatch) -> None:
    """The plant for the test above: a compile that hands the decode step back uncompiled. The numerics still
    pass (they checked the eager kernels), so only the graph count tells."""
    monkeypatch.setattr(torch, "compile", lambda fn, **options: fn)
    result, graphs = checked_counting_graphs(reference, GRAPH_MODE, tmp_path)
    assert failure_kinds.numerics_failure(result) == "", result.numerics
    assert graphs == 0
