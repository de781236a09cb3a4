"""Item 5, profile: one profiled iteration per plan through the run's own profiled step
(perfbench/measure/profiled.py): the trace is parsed into tables and every toggle's trace signature is checked
against its state in the plan (perfbench/profiling/plan_check.py).

--quick profiles all on (eager) and all on (ge_graph); the full run adds each toggle alone and the npugraph_ex
plan. The trimmed traces and their tables go into the bundle's traces/<model>-<plan>/.
"""

from __future__ import annotations

import re
from typing import Any, cast

from model.optimizations import TOGGLE_NAMES, TOGGLES
from perfbench.measure.iteration import Workload, run_iteration
from perfbench.measure.profiled import profile_iteration
from perfbench.results import RunSpec
from perfbench.tools.verify.context import ModelUnderTest, VerifyContext, all_on, release
from perfbench.tools.verify.failures import failed_check, is_capture_failure, named_op
from perfbench.tools.verify.model_check import MULTI_RANK, Case, capture_failure
from perfbench.tools.verify.numerics import NEW_TOKENS, PROMPTS
from perfbench.tools.verify.summary import FAIL, PASS, SKIPPED, Check
from perfbench.tools.verify.traces import trim_folder


def profile_cases(quick: bool) -> list[Case]:
    cases = [] if quick else [Case(t, {t: True}, "eager", t) for t in TOGGLE_NAMES
                              if t not in (*MULTI_RANK, "graph_mode")]
    cases += [Case("all on", all_on(graph=False), "eager"),
              Case("all on, ge_graph", all_on(graph=True), "ge_graph", "graph_mode")]
    if not quick:
        cases.append(Case("all on but fused_attention, npugraph_ex", all_on(graph=True, without=("fused_attention",)),
                          "npugraph_ex", "graph_mode"))
    return cases


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _spec(model: ModelUnderTest, case: Case, run_id: str) -> RunSpec:
    lengths = [len(p) for p in PROMPTS]
    return RunSpec(run_id=run_id, scenario="verify", device="npu", dtype="bfloat16", model=str(model.path),
                   batch_size=len(PROMPTS), input_len=max(lengths), output_len=NEW_TOKENS, ragged=True,
                   toggles=case.toggles, exe_mode="ge_graph" if case.exe_mode == "eager" else case.exe_mode,
                   warmup=1, iterations=0)


def profile_case(ctx: VerifyContext, model: ModelUnderTest, case: Case, log: list[str]) -> Check:
    name = f"{model.name}/{case.name}"
    run_id = f"{model.name}-{slug(case.name)}"
    run_dir = ctx.work_dir / "profile" / run_id
    spec = _spec(model, case, run_id)
    built = None
    try:
        built = ctx.build(model, case.toggles, spec.exe_mode)
        if case.focus and not built.plan.on(case.focus):
            decision = built.plan.decisions[case.focus]
            return Check(name, SKIPPED, f"{case.focus} {decision.state}: {decision.reason}")
        ids, seq_lens = built.pad_prompts(PROMPTS)
        cache = built.new_cache(ids.shape[0], ids.shape[1] + NEW_TOKENS)
        run_iteration(built, ids, seq_lens, cache, NEW_TOKENS)  # untimed: graph capture happens here
        record = profile_iteration(built, ids, seq_lens, cache, Workload(PROMPTS, NEW_TOKENS), run_dir, spec,
                                   ctx.caps)
    except Exception as exc:  # noqa: BLE001 - every plan reports, the next one runs
        op, call = capture_failure(case, exc) if case.graph and is_capture_failure(exc) else ("", "")
        return failed_check(name, exc, log, op=op, call=call, detail="the profiled iteration did not run")
    finally:
        del built
        release()
    if run_dir.is_dir():
        notes = trim_folder(run_dir, ctx.out_dir / "traces" / run_id)
        log += [f"{run_id}: {note}" for note in notes]
    if "error" in record:
        trace_back = str(record["error"]).strip()
        log.append(f"--- {name}: the profiled iteration failed\n{trace_back}")
        error = trace_back.splitlines()[-1]
        return Check(name, FAIL, "the profiled iteration failed", op=named_op(trace_back), error=error,
                     data={"trace": record})
    plan_check = cast(list[dict[str, Any]], record.get("plan_check", []))
    matched = sum(1 for c in plan_check if c["ok"] is True)
    unchecked = [c["line"] for c in plan_check if c["ok"] is None]
    mismatched = [c for c in plan_check if c["ok"] is False]
    data = {"plan_check": plan_check, "decode_ops_per_step": record.get("decode_ops_per_step"),
            "tables": record.get("tables", []), "bundle_dir": f"traces/{run_id}"}
    detail = f"{matched} toggles match their trace signatures, {len(unchecked)} not checked"
    if mismatched:
        ops = ", ".join(op for c in mismatched for op in TOGGLES[c["toggle"]].npu_ops)
        return Check(name, FAIL, detail, op=ops, error="; ".join(c["line"] for c in mismatched), data=data)
    return Check(name, PASS, detail, data=data)


def check_profile(ctx: VerifyContext, log: list[str]) -> list[Check]:
    return [profile_case(ctx, model, case, log) for model in ctx.models
            for case in profile_cases(ctx.options.quick)]

