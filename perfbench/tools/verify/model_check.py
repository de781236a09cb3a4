"""Item 3, model: each model under test with each toggle and with all of them on, eager and in graph mode (GE;
npugraph_ex where the plan allows it), against the all-off model: a run's replay numerics and bound, every layer
and the logits (numerics.py), the free greedy tokens (recorded), graph capture and recompiles.

--quick runs all on, eager and ge_graph; the full run adds each toggle alone, eager and with graph mode, and all
on but fused_attention under npugraph_ex (which cannot capture FIA's host lengths). When a case's logits
disagree, each toggle is tried alone (eager) to name the toggle, and so the ops, that break them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from model.optimizations import TOGGLE_NAMES, TOGGLES
from perfbench.tools.verify.context import DTYPE, ModelUnderTest, Reference, VerifyContext, all_on, release
from perfbench.tools.verify.failures import NpuCallRecorder, failed_check, is_capture_failure, named_op
from perfbench.tools.verify.numerics import NEW_TOKENS, PROMPTS, agreement, forced_pass
from perfbench.tools.verify.summary import FAIL, PASS, SKIPPED, Check

MULTI_RANK = ("mm_all_reduce", "moe_dispatch_combine")  # inactive at world size 1: the parallel item's
BACKENDS = {"ge_graph": ("torchair GE backend", "torchair.get_npu_backend(compiler_config=config)"),
            "npugraph_ex": ("npugraph_ex backend", "'npugraph_ex'")}


@dataclass(frozen=True)
class Case:
    name: str
    toggles: dict[str, bool]
    exe_mode: str  # "eager", "ge_graph" or "npugraph_ex"
    focus: str | None = None  # the toggle the case is about: skipped when the plan leaves it inactive

    @property
    def graph(self) -> bool:
        return self.exe_mode != "eager"


def model_cases(quick: bool) -> list[Case]:
    cases = []
    if not quick:
        for toggle in TOGGLE_NAMES:
            if toggle != "graph_mode":
                cases.append(Case(toggle, {toggle: True}, "eager", toggle))
                # graph mode needs grouped_moe (the expert loop syncs with the host)
                cases.append(Case(f"{toggle} + ge_graph", {toggle: True, "graph_mode": True, "grouped_moe": True},
                                  "ge_graph", toggle))
    cases += [Case("all on", all_on(graph=False), "eager"),
              Case("all on, ge_graph", all_on(graph=True), "ge_graph", "graph_mode")]
    if not quick:
        cases.append(Case("all on but fused_attention, npugraph_ex", all_on(graph=True, without=("fused_attention",)),
                          "npugraph_ex", "graph_mode"))
    return cases


def unique_graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def capture_failure(case: Case, exc: BaseException) -> tuple[str, str]:
    """(op, call) of a graph case whose capture failed: the op the error names, else the graph backend."""
    backend, argument = BACKENDS[case.exe_mode]
    call = f"torch.compile(Qwen3_5MoeForCausalLM._decode_step, backend={argument}, dynamic=False, fullgraph=True)"
    return named_op(str(exc)) or backend, call


def run_case(ctx: VerifyContext, model: ModelUnderTest, case: Case, ref: Reference, log: list[str],
             free_run: bool = True) -> Check:
    """One case against the reference; `free_run` also decodes greedily on its own (the tokens, recompiles)."""
    name = f"{model.name}/{case.name}"
    recorder = NpuCallRecorder() if not case.graph else None
    if case.graph:
        torch._dynamo.reset()  # each case captures afresh: no cache limit, recompiles counted from zero
    built = None
    try:
        built = ctx.build(model, case.toggles, "ge_graph" if case.exe_mode == "eager" else case.exe_mode)
        plan = built.plan
        if case.focus and not plan.on(case.focus):
            decision = plan.decisions[case.focus]
            where = "; the parallel item runs it" if case.focus in MULTI_RANK else ""
            return Check(name, SKIPPED, f"{case.focus} {decision.state}: {decision.reason}{where}")
        before = unique_graphs()
        with recorder or contextlib.nullcontext():
            got = forced_pass(built, ref.tokens, routing=ref.routing, layer_inputs=ref.forced.inputs)
            captured = unique_graphs() - before
            # the free run's decode step takes no replayed experts: a graph of its own, captured once
            tokens = built.generate(PROMPTS, max_new_tokens=NEW_TOKENS).tokens if free_run else None
            free_graphs = unique_graphs() - before - captured
        recompiles = max(captured - 1, 0) + max(free_graphs - 1, 0)
    except Exception as exc:  # noqa: BLE001 - every case reports, the next one runs
        op, call = capture_failure(case, exc) if case.graph and is_capture_failure(exc) else ("", "")
        detail = "graph capture failed" if call else "the model did not run"
        return failed_check(name, exc, log, recorder, op=op, call=call, detail=detail)
    finally:
        del built
        release()
    on = sorted(t for t, d in plan.decisions.items() if d.on)
    inactive = {t: d.reason for t, d in plan.decisions.items() if d.requested and not d.on}
    a = agreement(got, ref.forced, str(DTYPE).removeprefix("torch."))
    tokens_match = tokens == ref.tokens if free_run else None
    data = {"plan": {t: d.state for t, d in plan.decisions.items()}, "inactive": inactive, **a.to_dict(),
            "tokens_match": tokens_match,
            "graphs_captured": captured if case.graph else None, "recompiles": recompiles if case.graph else None}
    problems = [] if a.ok else [f"outside the run's numerics bound against the all-off model: {a.line()}"]
    if case.graph and captured < 1:
        problems.append("no decode graph was captured")
    if case.graph and recompiles:
        problems.append(f"the decode graph was recompiled {recompiles} times")
    graph = f"; {captured} graph captured, {recompiles} recompiles" if case.graph else ""
    greedy = {True: "; greedy tokens match", False: "; greedy tokens differ", None: ""}[tokens_match]
    off = "".join(f"; {t} inactive ({why})" for t, why in inactive.items() if t not in MULTI_RANK)
    detail = f"on: {', '.join(on) or 'none'}{off}; {a.line()}{greedy}"
    if problems:
        return Check(name, FAIL, detail + graph, error="; ".join(problems), data=data)
    return Check(name, PASS, detail + graph, data=data)


def localize(ctx: VerifyContext, model: ModelUnderTest, ref: Reference, log: list[str]) -> list[str]:
    """The toggles whose eager model alone disagrees with the all-off model."""
    culprits = []
    for toggle in TOGGLE_NAMES:
        if toggle in (*MULTI_RANK, "graph_mode"):
            continue
        check = run_case(ctx, model, Case(toggle, {toggle: True}, "eager", toggle), ref, log, free_run=False)
        if check.status == FAIL:
            culprits.append(toggle)
    return culprits


def check_model(ctx: VerifyContext, log: list[str]) -> list[Check]:
    checks = []
    for model in ctx.models:
        try:
            ref = ctx.reference(model)
        except Exception as exc:  # noqa: BLE001 - without a reference no case can be compared
            checks.append(failed_check(f"{model.name}/all off (reference)", exc, log, detail="the all-off model"))
            continue
        cases = model_cases(ctx.options.quick)
        results = [run_case(ctx, model, case, ref, log) for case in cases]
        numerics = [c for c in results if c.status == FAIL and c.data.get("ok") is False]
        if numerics:  # name the toggles (and ops) that break the logits: the full run has single-toggle cases
            culprits = localize(ctx, model, ref, log) if ctx.options.quick else [
                case.focus for case, c in zip(cases, results)
                if case.focus and case.exe_mode == "eager" and c in numerics]
            for c in numerics:
                c.op = ", ".join(op for t in culprits for op in TOGGLES[t].npu_ops)
                c.error += f"; alone, {', '.join(culprits)} disagree" if culprits else "; no toggle alone disagrees"
        checks += results
    return checks

