"""The one place tests build result records: a run's result (RunResult), its trace record (TraceRecord), and an
`perfbench ab` job's record and verdicts (ABRecord, ABVerdict, ABPair).

Each builder takes the record's fields as keywords and leaves out what a test does not name, so the record's own
defaults hold; a dict where a record part is expected is validated into that part, as RunResult itself does.
tests/test_records_kit.py fails when a test builds one of these records by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from perfbench.results import RunPlan, RunResult, RunSpec
from perfbench.results.ab_record import ABPair, ABRecord, ABTimed, ABVerdict
from perfbench.results.records import (
    BlockPlacement,
    Environment,
    ExpertLoad,
    Failure,
    ModeCheckLine,
    Numerics,
    PlanCheckLine,
    Stability,
    StageSeconds,
    Status,
    Summary,
    TraceRecord,
)

# the dict a record part is validated from (a part itself is also taken)
PartFields = Mapping[str, Any]


def run_result(run_id: str = "r1", *, status: Status = "ok", spec: RunSpec | None = None,
               plan: RunPlan | None = None, error: str | None = None, samples: dict[str, list[float]] | None = None,
               summary: Summary | PartFields | None = None, numerics: Numerics | PartFields | None = None,
               trace: TraceRecord | PartFields | None = None, env: Environment | PartFields | None = None,
               started_at: str = "", wall_s: float = 0.0, stop_reason: str = "",
               stability: Stability | PartFields | None = None, expert_load: ExpertLoad | PartFields | None = None,
               blocks: BlockPlacement | PartFields | None = None, failure: Failure | PartFields | None = None,
               stages: StageSeconds | PartFields | None = None) -> RunResult:
    """A run's result; `spec` defaults to RunSpec(run_id=run_id, scenario="s"), every other part to empty."""
    parts = {"summary": summary, "numerics": numerics, "trace": trace, "env": env, "stability": stability,
             "expert_load": expert_load, "blocks": blocks, "failure": failure, "stages": stages}
    return RunResult(run_id=run_id, status=status, spec=spec if spec is not None else RunSpec(run_id=run_id,
                                                                                             scenario="s"),
                     plan=plan if plan is not None else RunPlan(), error=error, samples=samples or {},
                     started_at=started_at, wall_s=wall_s, stop_reason=stop_reason,
                     **{name: part for name, part in parts.items() if part is not None})


def trace_record(*, decode_ops_per_step: float | None = None,
                 op_counts_per_decode_step: dict[str, float] | None = None,
                 plan_mismatches: list[str] | None = None, plan_check: list[PlanCheckLine] | None = None,
                 mode_check: ModeCheckLine | PartFields | None = None, mode: str | None = None,
                 **more: Any) -> TraceRecord:
    """A run's trace record with the fields tests set most named; `more`: any other TraceRecord field."""
    fields: dict[str, Any] = {"decode_ops_per_step": decode_ops_per_step, "mode": mode, "mode_check": mode_check,
                              "op_counts_per_decode_step": op_counts_per_decode_step,
                              "plan_mismatches": plan_mismatches, "plan_check": plan_check}
    return TraceRecord.model_validate({**{k: v for k, v in fields.items() if v is not None}, **more})


def ab_verdict(ratio: float, verdict: Literal["slower", "faster", "same", "inconclusive"], *,
               ci_low: float | None = None, ci_high: float | None = None, pairs: int = 0, clusters: int = 0,
               band: float = 0.05, margin: float = 0.0, level: float = 0.95, method: str = "bootstrap",
               p_slower: float | None = None, regression: bool = False) -> ABVerdict:
    """One (run, metric) verdict of an ab job; the interval defaults to the ratio alone."""
    return ABVerdict(ratio=ratio, ci_low=ratio if ci_low is None else ci_low,
                     ci_high=ratio if ci_high is None else ci_high, pairs=pairs, clusters=clusters, band=band,
                     margin=margin, level=level, method=method, verdict=verdict, p_slower=p_slower,
                     regression=regression)


def ab_pair(run_id: str, cluster: int, index: int, *, base: ABTimed | PartFields, head: ABTimed | PartFields,
            base_first: bool = True) -> ABPair:
    """One base/head pair of an ab job."""
    return ABPair.model_validate({"run_id": run_id, "cluster": cluster, "index": index, "base_first": base_first,
                                  "base": base, "head": head})


def ab_record(*, verdicts: Mapping[str, Mapping[str, ABVerdict]] | None = None,
              mode: Literal["one process", "two processes"] = "two processes", scenario: str = "",
              status: Literal["ok", "error", "interrupted"] = "ok", pairs: list[ABPair] | None = None,
              **more: Any) -> ABRecord:
    """An ab job's record; `more`: any other ABRecord field."""
    return ABRecord.model_validate({"verdicts": {run: dict(per) for run, per in (verdicts or {}).items()},
                                    "mode": mode, "scenario": scenario, "status": status, "pairs": pairs or [],
                                    **more})
