"""Findings first: documented rules over a folder's results and its runs' trace tables. A finding is a rule id, a
severity, one line with its evidence (the numbers) and where to look (table, file, layer). docs/advisor.md
describes every rule: what triggers it, its threshold and why.

    folder_findings(results, tables_by_run, slower)  # the folder analysis's findings (tables: stem -> DataFrame)
    trace_findings(TraceFacts(...)) + run_findings(result)    # `perfbench trace` on a trace (and its run)

Tables are read by the column names their writers give them (perfbench/profiling/idle.py,
tables.compute_vs_communication, across_ranks.link_pairs), so this stage needs neither torch nor the profiler parsers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from perfbench.analysis.slowest import slowest
from perfbench.analysis.speedup import SLOWER, Marginal, ShapeBaseline, Speedup, plan_label
from perfbench.results import RunResult, layer_loads

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

# thresholds (docs/advisor.md says why each is where it is)
HOST_BOUND_FREE_PCT = 30.0  # device free share (host only: dispatch share) of the decode span
MOE_IMBALANCE = 2.0  # max / mean assignments per expert in one layer
MOE_MIN_MEAN = 32.0  # ... in a layer with at least this many assignments per expert on average
SLOWEST_RANK_PCT = 10.0  # the slowest rank's steps this much longer than the median rank's
SLOWEST_LINK_PCT = 20.0  # the slowest link's bandwidth this much below the median link's
EXPOSED_COMMUNICATION_PCT = 10.0  # communication not overlapped with compute, share of the step span
# AI CPU: msprof-analyze's AicpuChecker (advisor/analyzer/computation/aicpu/aicpu_checker.py) fires on AI_CPU
# tasks once a task lasts 20 µs (`_MIN_TASK_DURATION`); its predecessor (asight) on a 20% share of the total
# task time (`_MIN_TOTAL_DURATION_RATIO = 0.2`). Either fires here.
AICPU_MIN_TASK_US = 20.0
AICPU_SHARE_PCT = 20.0
COMMUNICATION_TASK_TYPES = frozenset({"HCCL", "COMMUNICATION"})
FIRST_CALL_FACTOR = 3.0  # the first (untimed) prefill or decode step this many times the timed median
TAIL_SPIKE_FACTOR = 3.0  # one timed decode step this many times the median step
PER_RULE = 3  # findings shown per rule in a folder; the rest become one "and N more" line

ALL_LAYERS = "(all)"  # the whole-phase rows of idle.csv


@dataclass(frozen=True)
class Rule:
    """One documented rule: `trigger` is what makes it fire, with its threshold."""

    id: str
    severity: Severity
    trigger: str


RULES: dict[str, Rule] = {rule.id: rule for rule in (
    Rule("trace-contradicts-plan", "error",
         "the profiled trace contradicts the run's plan: a toggle's trace signature broke, or a graph mode's decode "
         "steps replayed no captured graph"),
    Rule("toggle-inactive", "warning", "a requested toggle resolved to inactive (the plan says why)"),
    Rule("toggle-slower", "warning",
         "a toggle measured slower than its fallback: its plan (alone on the baseline, or added to another plan) "
         "has the verdict 'slower' on TTFT or TPOT"),
    Rule("host-bound-decode", "warning",
         f"decode's device free share (CPU: dispatch share) is at least {HOST_BOUND_FREE_PCT:g}% of its span"),
    Rule("moe-imbalance", "warning",
         f"a MoE layer's busiest expert gets at least {MOE_IMBALANCE:g}x the mean load, in a layer with at least "
         f"{MOE_MIN_MEAN:g} assignments per expert"),
    Rule("communication-not-overlapped", "warning",
         f"communication not overlapped with compute takes at least {EXPOSED_COMMUNICATION_PCT:g}% of the steps"),
    Rule("slowest-rank", "warning",
         f"the slowest rank's steps are at least {SLOWEST_RANK_PCT:g}% longer than the median rank's"),
    Rule("slowest-link", "warning",
         f"the slowest link's bandwidth is at least {SLOWEST_LINK_PCT:g}% below the median link's"),
    Rule("aicpu-fallback", "warning",
         f"AI CPU tasks take at least {AICPU_SHARE_PCT:g}% of device compute time, or one lasts at least "
         f"{AICPU_MIN_TASK_US:g} µs"),
    Rule("tail-spike", "warning",
         f"a timed decode step takes at least {TAIL_SPIKE_FACTOR:g}x the run's median decode step"),
    Rule("first-call-compile", "info",
         f"the first (untimed) prefill or decode step takes at least {FIRST_CALL_FACTOR:g}x the timed median"),
)}


@dataclass(frozen=True)
class Finding:
    rule: str
    message: str  # one line, with the numbers behind it
    where: str  # the table, file or layer to look at
    weight: float = 0.0  # how strong the evidence is, to order findings of one rule (not shown)

    @property
    def severity(self) -> Severity:
        return RULES[self.rule].severity if self.rule in RULES else "info"

    def line(self) -> str:
        return f"{self.severity} [{self.rule}] {self.message} (see {self.where})"

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "rule": self.rule, "message": self.message, "where": self.where}


@dataclass
class TraceFacts:
    """What the trace rules read from one trace: its tables by CSV stem (`idle`, `compute_vs_communication`),
    the multi-rank record (`across_ranks.cluster_record`), the links of a communication matrix
    (`across_ranks.link_pairs`), and how to name where they are (`label`: "run r1: " or ""; `tables_dir`:
    "runs/r1/tables/")."""

    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    cluster: Mapping[str, Any] | None = None
    links: pd.DataFrame | None = None
    label: str = ""
    tables_dir: str = ""


def _us(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    return f"{value / 1e3:.2f} ms" if abs(value) >= 1e3 else f"{value:.1f} µs"


def _steps(count: int) -> str:
    return f"{count} step{'s' if count != 1 else ''}"


def _number(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


# ---- trace rules -------------------------------------------------------------------------------------------

def host_bound_decode(facts: TraceFacts) -> list[Finding]:
    """Decode's free share of the span (idle.csv's decode "(all)" rows) at or above HOST_BOUND_FREE_PCT; the
    worst rank, and its worst layer where the trace has layer rows."""
    table = facts.tables.get("idle")
    if table is None or table.empty or "free_share_pct" not in table:
        return []
    decode = table[table["phase"].astype(str) == "decode"]
    whole = decode[decode["layer_type"].astype(str) == ALL_LAYERS]
    whole = whole[whole["free_share_pct"].astype(float) >= HOST_BOUND_FREE_PCT]
    if whole.empty:
        return []
    worst = whole.loc[whole["free_share_pct"].astype(float).idxmax()]
    share, rank = float(worst["free_share_pct"]), worst["rank"]
    ranks = f" (and {len(whole) - 1} more ranks)" if len(whole) > 1 else ""
    steps = int(_number(worst["windows"]))
    span = f"{_us(_number(worst['free_us']))} of {_us(_number(worst['span_us']))} over {_steps(steps)}"
    if str(worst["side"]) == "device":
        delay = _number(worst.get("launch_delay_mean_us"))
        launch = f"; mean launch delay {_us(delay)}" if delay == delay else ""
        message = (f"{facts.label}decode is host-bound on rank {rank}{ranks}: the device ran no kernel for "
                   f"{share:.1f}% of the decode span ({span}{launch})")
    else:
        idle_part = _number(worst.get("no_op_us"))
        no_op = f", {_us(idle_part)} of it with no op running" if idle_part == idle_part else ""
        message = (f"{facts.label}decode is dispatch-bound on rank {rank}{ranks}: {share:.1f}% of the host's "
                   f"decode span is outside compute ops ({span}{no_op}; the trace has no device kernels)")
    where = f"{facts.tables_dir}idle.csv, decode rows"
    layers = decode[(decode["layer_type"].astype(str) != ALL_LAYERS) & (decode["rank"] == rank)]
    if len(layers):
        top = layers.loc[layers["free_share_pct"].astype(float).idxmax()]
        where += (f"; freest layer {int(_number(top['layer']))} ({top['layer_type']}, "
                  f"{float(top['free_share_pct']):.1f}%)")
    return [Finding("host-bound-decode", message, where, share)]


def communication_not_overlapped(facts: TraceFacts) -> list[Finding]:
    """Per rank, device communication not overlapped with compute over the steps' spans, at or above
    EXPOSED_COMMUNICATION_PCT (host-only traces have no overlap figures: silent)."""
    table = facts.tables.get("compute_vs_communication")
    if table is None or table.empty or "communication_not_overlapped_us" not in table:
        return []
    device = table[table["side"].astype(str) == "device"]
    out = []
    for rank, rows in device.groupby("rank", sort=True):
        exposed = rows["communication_not_overlapped_us"].astype(float).sum()
        wall = rows["wall_us"].astype(float).sum()
        if not wall > 0:
            continue
        share = 100.0 * exposed / wall
        if share >= EXPOSED_COMMUNICATION_PCT:
            out.append(Finding(
                "communication-not-overlapped",
                f"{facts.label}communication not overlapped with compute takes {share:.1f}% of rank {rank}'s step "
                f"time ({_us(exposed)} of {_us(wall)} over {_steps(len(rows))})",
                f"{facts.tables_dir}compute_vs_communication.csv, rank {rank}", share))
    return out


def slowest_rank(cluster: Mapping[str, Any] | None, label: str = "", where: str = "per_rank_steps.csv"
                 ) -> list[Finding]:
    """The cluster record's slowest rank, when its steps are SLOWEST_RANK_PCT longer than the median rank's."""
    if not cluster or cluster.get("slowest_rank") is None:
        return []
    pct = _number(cluster.get("slowest_rank_over_median_pct"))
    if not pct >= SLOWEST_RANK_PCT:
        return []
    rank = cluster["slowest_rank"]
    row: Mapping[str, Any] = next((r for r in cluster.get("per_rank") or [] if r.get("rank") == rank), {})
    detail = ""
    if row:
        times = {key: _us(_number(row.get(f"{key}_us"))) for key in ("step", "compute", "communication", "wait")}
        detail = (f" (step {times['step']}: compute {times['compute']}, communication {times['communication']}, "
                  f"wait {times['wait']})")
    ranks = len(cluster.get("per_rank") or [])
    return [Finding("slowest-rank", f"{label}rank {rank}'s steps are {pct:.1f}% longer than the median rank's of "
                                    f"{ranks}{detail}", where, pct)]


def slowest_link(links: pd.DataFrame | None, label: str = "", where: str = "communication_matrix.json"
                 ) -> list[Finding]:
    """The slowest link of a communication matrix (`link`, `bandwidth_gb_s`), SLOWEST_LINK_PCT below the
    median link's bandwidth."""
    if links is None or len(links) < 2 or "bandwidth_gb_s" not in links:
        return []
    link, pct = slowest(links.reset_index(drop=True), "link", "bandwidth_gb_s", higher_is_slower=False)
    if link is None or not pct >= SLOWEST_LINK_PCT:
        return []
    bandwidth = links["bandwidth_gb_s"].astype(float)
    worst = float(bandwidth[links["link"] == link].iloc[0])
    return [Finding("slowest-link", f"{label}link {link} moves {worst:.2f} GB/s, {pct:.1f}% below the median "
                                    f"link's {float(bandwidth.median()):.2f} GB/s ({len(links)} links)", where, pct)]


def aicpu_fallback(facts: TraceFacts, origins: Mapping[str, str] | None = None) -> list[Finding]:
    """Per rank, AI CPU tasks (`ascend_task_types`: kernel time per task type, ascend_kernels.py) at or above
    AICPU_SHARE_PCT of device compute time (communication tasks left out), or one of them lasting
    AICPU_MIN_TASK_US or more; names the ops, and for each the plan it first shows in (`origins`: op -> text)."""
    table = facts.tables.get("ascend_task_types")
    if table is None or table.empty or "task_type" not in table:
        return []
    out = []
    for rank, rows in table.groupby("rank", sort=True):
        types = rows["task_type"].astype(str)
        ai = rows[types == "AI_CPU"]
        if ai.empty:
            continue
        compute_us = rows.loc[~types.isin(COMMUNICATION_TASK_TYPES), "total_us"].astype(float).sum()
        ai_us = ai["total_us"].astype(float).sum()
        share = 100.0 * ai_us / compute_us if compute_us > 0 else 100.0
        longest = ai.loc[ai["max_us"].astype(float).idxmax()]
        if share < AICPU_SHARE_PCT and float(longest["max_us"]) < AICPU_MIN_TASK_US:
            continue
        by_op = (ai.groupby("op", sort=False).agg(tasks=("count", "sum"), total_us=("total_us", "sum"))
                 .sort_values("total_us", ascending=False))
        ops = "; ".join(f"{op} ({int(row.tasks)} tasks, {_us(float(row.total_us))}"
                        + (f", {origins[str(op)]}" if origins and str(op) in origins else "") + ")"
                        for op, row in by_op.head(3).iterrows())
        more = f"; and {len(by_op) - 3} more ops" if len(by_op) > 3 else ""
        out.append(Finding(
            "aicpu-fallback",
            f"{facts.label}AI CPU ran {int(ai['count'].sum())} tasks on rank {rank}: {_us(ai_us)}, {share:.1f}% "
            f"of device compute time, the longest {_us(float(longest['max_us']))} ({longest['name']}); ops: "
            f"{ops}{more}",
            f"{facts.tables_dir}ascend_task_types.csv, task_type AI_CPU", share))
    return out


def trace_findings(facts: TraceFacts) -> list[Finding]:
    """The rules that read one trace's tables, cluster record and links."""
    return [*host_bound_decode(facts), *communication_not_overlapped(facts), *aicpu_fallback(facts),
            *slowest_rank(facts.cluster, facts.label, f"{facts.tables_dir}per_rank_steps.csv"),
            *slowest_link(facts.links, facts.label, f"{facts.tables_dir}ascend_communication_matrix.csv")]


# ---- result rules ------------------------------------------------------------------------------------------

def moe_imbalance(result: RunResult, where: str = "results.jsonl expert_load (report: Expert load)"
                  ) -> list[Finding]:
    """The most imbalanced MoE layer of the run (max / mean per expert), among layers with MOE_MIN_MEAN
    assignments per expert or more, at or above MOE_IMBALANCE."""
    loads = [load for load in layer_loads(result.expert_load)
             if load.imbalance is not None and load.mean_per_expert >= MOE_MIN_MEAN]
    if not loads:
        return []
    worst = max(loads, key=lambda load: load.imbalance or 0.0)
    if (worst.imbalance or 0.0) < MOE_IMBALANCE:
        return []
    ranks = f"; per EP rank {', '.join(map(str, worst.rank_totals))}" if len(worst.rank_totals) > 1 else ""
    return [Finding("moe-imbalance",
                    f"run {result.run_id}: MoE imbalance {worst.imbalance:.2f}x in {worst.phase} layer {worst.layer}: "
                    f"expert {worst.hottest_expert} got {worst.max_per_expert} of {worst.assignments} assignments, "
                    f"the mean is {worst.mean_per_expert:.1f} per expert{ranks}",
                    f"{where}, {worst.phase} layer {worst.layer}", worst.imbalance or 0.0)]


def toggles_inactive(results: Iterable[RunResult], where: str = "results.jsonl plan (report: Plan)"
                     ) -> list[Finding]:
    """Each requested toggle that resolved to inactive, once per (toggle, reason), with how many runs."""
    runs: dict[tuple[str, str], list[str]] = {}
    for result in results:
        for name, decision in result.plan.decisions.items():
            if decision.requested and decision.state == "inactive":
                runs.setdefault((name, decision.reason), []).append(result.run_id)
    out = []
    for (name, reason), ids in runs.items():
        which = f"run {ids[0]}" if len(ids) == 1 else f"{len(ids)} runs ({ids[0]}, ...)"
        out.append(Finding("toggle-inactive",
                           f"{name} was requested but is inactive in {which}: {reason or 'no reason given'}",
                           where, float(len(ids))))
    return out


def trace_contradicts_plan(result: RunResult, where: str | None = None) -> list[Finding]:
    """The run's trace-vs-plan mismatches (`trace.plan_mismatches`) and a graph mode whose profiled decode
    steps replayed no captured graph (`trace.mode_check` ok False), unless a graph_mode mismatch says it."""
    lines = list(result.trace.plan_mismatches)
    check = result.trace.mode_check
    if check is not None and check.ok is False and not any(line.startswith("graph_mode") for line in lines):
        lines.append(check.line)
    where = where or f"runs/{result.run_id}/result.json trace.plan_check (report: Time breakdown)"
    return [Finding("trace-contradicts-plan", f"run {result.run_id}: {line}", where, 1.0) for line in lines]


def first_call_compile(result: RunResult) -> list[Finding]:
    """The first, untimed iteration's prefill (`summary.first_ttft_ms`) or first decode step (the timed median
    step + `summary.compile_s`, the first step's excess) at FIRST_CALL_FACTOR times the timed median or more."""
    summary, parts = result.summary, []
    weight = 0.0
    ttft = summary.ttft_ms_median
    if summary.first_ttft_ms is not None and ttft and summary.first_ttft_ms >= FIRST_CALL_FACTOR * ttft:
        parts.append(f"the first prefill took {summary.first_ttft_ms:.1f} ms, {summary.first_ttft_ms / ttft:.1f}x "
                     f"the timed median TTFT {ttft:.1f} ms")
        weight = summary.first_ttft_ms / ttft
    tpot = summary.tpot_ms_median
    if summary.compile_s is not None and tpot:
        first_step = tpot + summary.compile_s * 1e3
        if first_step >= FIRST_CALL_FACTOR * tpot:
            parts.append(f"the first decode step took {first_step:.1f} ms, {first_step / tpot:.1f}x the timed median "
                         f"step {tpot:.1f} ms (graph compile {summary.compile_s:.2f} s)")
            weight = max(weight, first_step / tpot)
    if not parts:
        return []
    return [Finding("first-call-compile", f"run {result.run_id} ({plan_label(result)}): cold start: "
                    f"{'; '.join(parts)}", f"runs/{result.run_id}/result.json summary (report: Cold start and tail)",
                    weight)]


def tail_spike(result: RunResult) -> list[Finding]:
    """The slowest timed decode step (`samples.tpot_steps_ms`) at TAIL_SPIKE_FACTOR times the median step or more,
    named by iteration and step (a graph recompile in the timed steps shows here)."""
    steps = result.finite_samples("tpot_steps_ms")
    if len(steps) < 2:
        return []
    median = float(pd.Series(steps).median())
    worst = max(range(len(steps)), key=steps.__getitem__)
    if not median > 0 or steps[worst] < TAIL_SPIKE_FACTOR * median:
        return []
    per_iteration = result.spec.output_len - 1
    iterations = len(result.finite_samples("tpot_ms"))
    if per_iteration > 0 and iterations * per_iteration == len(steps):
        which = f"timed iteration {worst // per_iteration + 1}, decode step {worst % per_iteration + 1}"
    else:
        which = f"decode step #{worst + 1} of {len(steps)}"
    spikes = sum(s >= TAIL_SPIKE_FACTOR * median for s in steps)
    also = (f" ({spikes - 1} more step{'s' if spikes > 2 else ''} at {TAIL_SPIKE_FACTOR:g}x or more)"
            if spikes > 1 else "")
    mode = " (graph mode: a recompile?)" if "graph_mode" in result.ran_on() else ""
    return [Finding("tail-spike", f"run {result.run_id} ({plan_label(result)}): {which} took {steps[worst]:.2f} ms, "
                    f"{steps[worst] / median:.1f}x the median decode step {median:.2f} ms{also}{mode}",
                    f"runs/{result.run_id}/result.json samples.tpot_steps_ms (report: Cold start and tail)",
                    steps[worst] / median)]


def run_findings(result: RunResult) -> list[Finding]:
    """The rules that read one run's record (plan, trace record, expert load, cold start, decode steps); its
    cluster record is the trace rules' (`TraceFacts.cluster`)."""
    where = f"runs/{result.run_id}/result.json"
    return [*trace_contradicts_plan(result), *toggles_inactive([result], f"{where} plan"),
            *moe_imbalance(result, f"{where} expert_load"), *first_call_compile(result), *tail_spike(result)]


def _slower(gains: Mapping[str, Speedup | None]) -> list[tuple[str, Speedup]]:
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
    return [(names[key], gain) for key, gain in gains.items() if gain is not None and gain.verdict == SLOWER]


def toggles_slower(merged: Sequence[RunResult], by_shape: Sequence[ShapeBaseline],
                   on_top: Sequence[Marginal]) -> list[Finding]:
    """Toggles measured slower than their fallback: a plan of one toggle on the all-off baseline of its workload
    shape (`by_shape`), or a toggle added to another measured plan of the same shape (`on_top`, the
    marginals), with the verdict "slower". The speed-ups are the folder analysis's; nothing is measured here."""
    merged = [r for r in merged if r.status == "ok"]
    out = []
    for entry in by_shape:
        for r in (m for m in merged if m.shape() == entry.shape and len(m.ran_on()) == 1):
            (toggle,) = r.ran_on()
            for metric, gain in _slower(entry.gains.get(r.spec.combination_id, {})):
                out.append(Finding("toggle-slower",
                                   f"{toggle} measured slower than its fallback: {metric} speed-up {gain.text()} "
                                   f"against {plan_label(entry.baseline)} ({gain.basis}, n={gain.n}; "
                                   f"{entry.shape.label()})",
                                   f"report: Headline, plan '{plan_label(r)}'", 1.0 / gain.value))
    by_id = {r.spec.combination_id: r for r in merged}
    for m in on_top:
        for metric, gain in _slower(m.gains):
            out.append(Finding("toggle-slower",
                               f"{m.toggle} added to {plan_label(by_id[m.without])} measured slower: {metric} "
                               f"speed-up {gain.text()} ({gain.basis}, n={gain.n}; {by_id[m.with_].shape().label()})",
                               f"report: Headline, 'toggle added to a plan' +{plan_label(by_id[m.with_])}",
                               1.0 / gain.value))
    return out


# ---- a folder ----------------------------------------------------------------------------------------------

def ordered(findings: Iterable[Finding], per_rule: int | None = None) -> list[Finding]:
    """By severity, then rule (RULES order), strongest evidence first; past `per_rule` findings of one rule,
    one line says how many more there are."""
    order = {rule: i for i, rule in enumerate(RULES)}
    items = sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), order.get(f.rule, len(order)),
                                            -f.weight))
    if per_rule is None:
        return items
    out: list[Finding] = []
    for rule in dict.fromkeys(f.rule for f in items):
        group = [f for f in items if f.rule == rule]
        out += group[:per_rule]
        if len(group) > per_rule:
            out.append(Finding(rule, f"and {len(group) - per_rule} more like these", group[per_rule].where,
                               -math.inf))
    return out


def folder_findings(results: list[RunResult], tables_by_run: Mapping[str, Mapping[str, pd.DataFrame]],
                    slower: Sequence[Finding], per_rule: int | None = PER_RULE) -> list[Finding]:
    """Every rule over a result folder: its runs (ok ones; the first round's trace and expert load, as the
    report shows them), their trace tables (run_id -> stem -> table) and `slower`, the toggle-slower findings
    of the folder's speed-ups (`toggles_slower`)."""
    ok = [r for r in results if r.status == "ok"]
    first_round = [r for r in ok if r.spec.round <= 1]
    findings: list[Finding] = [*toggles_inactive(ok), *slower]
    per_run: list[Callable[[RunResult], list[Finding]]] = [
        trace_contradicts_plan, moe_imbalance, first_call_compile, tail_spike,
        lambda r: slowest_rank(r.trace.cluster or None, f"run {r.run_id}: ",
                               f"runs/{r.run_id}/tables/per_rank_steps.csv")]
    for r in first_round:
        for rule in per_run:
            findings += rule(r)
        tables = tables_by_run.get(r.run_id)
        if tables:
            facts = TraceFacts(tables=tables, label=f"run {r.run_id} ({plan_label(r)}): ",
                               tables_dir=f"runs/{r.run_id}/tables/")
            findings += host_bound_decode(facts) + communication_not_overlapped(facts)
            findings += aicpu_fallback(facts, aicpu_origins(first_round, tables_by_run))
    return ordered(findings, per_rule)


def aicpu_origins(runs: list[RunResult], tables_by_run: Mapping[str, Mapping[str, pd.DataFrame]]
                  ) -> dict[str, str]:
    """Each AI CPU op of the folder's traces -> which plan brings it: the plan with the fewest toggles on whose
    trace has it (one toggle: "from <toggle>'s plan"; none: "already in the all-off plan")."""
    first: dict[str, RunResult] = {}
    for run in sorted(runs, key=lambda r: len(r.ran_on())):
        table = (tables_by_run.get(run.run_id) or {}).get("ascend_task_types")
        if table is None or table.empty or "task_type" not in table:
            continue
        for op in table.loc[table["task_type"].astype(str) == "AI_CPU", "op"].astype(str):
            first.setdefault(op, run)
    texts = {}
    for op, run in first.items():
        on = sorted(run.ran_on())
        texts[op] = ("already in the all-off plan" if not on else f"from {on[0]}'s plan" if len(on) == 1
                     else f"first in plan '{plan_label(run)}'")
    return texts
