"""Report sections about the runs themselves: environment and scenario, the effective plans, numerics,
failures."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from model.toggles import TOGGLE_NAMES
from perfbench.analysis.attribution import combo_label
from perfbench.bounded_files import METADATA_BYTES, load_json
from perfbench.config.execution_mode import mode_text, result_mode
from perfbench.errors import UserError
from perfbench.pages.page import Preformatted, Section, Text
from perfbench.pages.table import Column, Table
from perfbench.results import REL_ERROR_TOLERANCE, RunResult
from perfbench.results.env_allowlist import masked_values


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; lists become JSON text (a table cell holds one value)."""
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(obj, (list, tuple)):
        return {prefix: json.dumps(obj, default=str)}
    return {prefix: obj}


def _is_date(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def environment_rows(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """One row per environment key that some run knows: its one value, or its distinct values each with how many
    runs had it, or (dates and times) the range from the first to the last. `runs`: the runs that know it. A
    key no run knows (cann and torch_npu on a CPU host) is left out."""
    per_key: dict[str, dict[str, int]] = {}
    for r in results:
        for key, value in flatten(r.env.to_dict()).items():
            if value is None or value == "" or value == "[]":
                continue
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            per_key.setdefault(key, {})
            per_key[key][text] = per_key[key].get(text, 0) + 1
    rows: list[dict[str, Any]] = []
    for key in sorted(per_key):
        counts = per_key[key]
        known = sum(counts.values())
        if len(counts) == 1:
            value = next(iter(counts))
        elif all(_is_date(text) for text in counts):
            ordered = sorted(counts, key=datetime.fromisoformat)
            value = f"{ordered[0]} .. {ordered[-1]} ({len(counts)} values)"
        else:
            value = "; ".join(f"{text} ({n} run{'s' * (n != 1)})" for text, n in sorted(counts.items()))
        rows.append({"key": key, "value": value, "runs": known})
    return rows


def read_scenario(folder: Path) -> tuple[dict[str, Any] | None, str]:
    """scenario.json of the folder, or None and why (missing is normal; unreadable is shown, not fatal)."""
    path = folder / "scenario.json"
    if not path.is_file():
        return None, "No scenario.json in this folder."
    try:
        raw = load_json(path, METADATA_BYTES)
    except UserError as err:
        return None, f"scenario.json could not be read: {err}"
    if not isinstance(raw, dict):
        return None, "scenario.json does not hold a JSON object."
    return masked_values(raw), ""  # a folder written before the masking rule shows no credential either


def environment_section(folder: Path, results: Sequence[RunResult]) -> Section:
    section = Section("Environment and scenario")
    ok = sum(r.status == "ok" for r in results)
    scenarios = sorted({r.spec.scenario for r in results} - {""})
    summary = f"{len(results)} runs ({ok} ok, {len(results) - ok} not ok)"
    if scenarios:
        summary += f" from scenario {', '.join(scenarios)}"
    section.blocks.append(Text(summary + "."))
    rows = environment_rows(results)
    if rows:
        section.blocks.append(Table("environment", [Column("key"), Column("value", wrap=True), Column("runs")], rows,
                                    caption="Environment recorded by the runs (keys no run knows are left out)"))
    else:
        section.blocks.append(Text("The runs carry no environment metadata.", note=True))
    scenario, why_not = read_scenario(folder)
    if scenario is None:
        section.blocks.append(Text(why_not, note=True))
    else:
        rows = [{"key": k, "value": v} for k, v in flatten(scenario).items()]
        section.blocks.append(Table("scenario", [Column("key"), Column("value", wrap=True)], rows,
                                    caption="Scenario (scenario.json)", collapsed=True))
    return section


def plan_section(results: Sequence[RunResult]) -> Section:
    section = Section("Effective plan")
    section.blocks.append(Text("What actually ran: on, off, or inactive (requested but not possible here). "
                               "Hover a cell for the implementation or the reason. mode: the execution mode the "
                               "run measured (eager, or graph_mode's capture on its device), emulation included.",
                               note=True))
    columns = [Column("run_id"), Column("status"), Column("shape"), Column("mode")]
    columns += [Column(t, title_key=f"{t}.why", mark_key=t) for t in TOGGLE_NAMES]
    rows = []
    for r in results:
        row: dict[str, Any] = {"run_id": r.run_id, "status": r.status, "shape": r.shape().label(),
                               "mode": mode_text(result_mode(r), r.env.emulation)}
        for t in TOGGLE_NAMES:
            decision = r.plan.decisions.get(t)
            row[t] = decision.state if decision else ""
            row[f"{t}.why"] = (decision.impl if decision.state == "on" else decision.reason) if decision else None
        rows.append(row)
    if rows:
        section.blocks.append(Table("plan", columns, rows))
    else:
        section.blocks.append(Text("No runs in this folder.", note=True))
    return section


def numerics_section(results: Sequence[RunResult]) -> Section:
    """Each ok run's replayed comparison with the all-off reference: the largest relative error and where, the
    bound of its dtype, and a run that asked for numerics and has none named loudly (docs/numerics.md)."""
    section = Section("Numerics")
    ok = [r for r in results if r.status == "ok"]
    asked = [r for r in ok if r.spec.numerics_check]
    if not ok:
        section.blocks.append(Text("No run recorded a numerics check against the all-off reference.", note=True))
        return section
    if not asked:
        section.blocks.append(Text("No run asked for a numerics check (perfbench.measure.numerics_check=false).",
                                   note=True))
        return section
    section.blocks.append(Text(
        "Each run replays the all-off reference's tokens, expert choices and layer inputs; the largest relative "
        "error of one layer branch (or the logits) decides, against the bound of its dtype.", note=True))
    missing = [r.run_id for r in asked if r.numerics.max_rel_error is None]
    if missing:
        section.blocks.append(Text(f"NOT COMPARED ({len(missing)} runs, a gate FAIL): {', '.join(missing)}"))
    columns = [Column("run_id"), Column("toggles_on"), Column("dtype"), Column("max_rel_error"), Column("bound"),
               Column("where"), Column("top1_agreement"), Column("routing_flips"), Column("max_abs_logit_diff"),
               Column("verdict")]
    rows = []
    for r in asked:
        n = r.numerics
        failed = numerics_verdict(r)
        rows.append({"run_id": r.run_id, "toggles_on": combo_label(r.effective_on()), "dtype": r.spec.dtype,
                     "max_rel_error": n.max_rel_error, "bound": REL_ERROR_TOLERANCE.get(r.spec.dtype),
                     "where": n.where if n.max_rel_error is not None else n.not_compared or "nothing recorded",
                     "top1_agreement": n.top1_agreement, "routing_flips": n.routing_flips,
                     "max_abs_logit_diff": n.max_abs_logit_diff, "verdict": failed})
    section.blocks.append(Table("numerics", columns, rows))
    return section


def numerics_verdict(r: RunResult) -> str:
    """"pass", "FAIL" (past the dtype's bound) or "NOT COMPARED"."""
    error, bound = r.numerics.max_rel_error, REL_ERROR_TOLERANCE.get(r.spec.dtype)
    if error is None:
        return "NOT COMPARED"
    return "pass" if bound is None or error <= bound else "FAIL"


def failures_section(results: Sequence[RunResult]) -> Section:
    section = Section("Failures")
    failed = [r for r in results if r.status != "ok" or r.failure]
    if not results:
        section.blocks.append(Text("No runs in this folder.", note=True))
        return section
    if not failed:
        section.blocks.append(Text(f"All {len(results)} runs finished ok and measured what they were asked."))
        return section
    section.blocks.append(Text(
        "Kinds: startup_fail (import, build, plan check or compile), plan_refused (a requested toggle never took "
        "effect; an ok run's numbers were measured without it), benchmark_fail (timing or profiling, or the "
        "process died), timeout, oom, numerics_fail (logits outside the dtype's tolerance or tokens differ).",
        note=True))
    rows = []
    for r in failed:
        error = (r.error or "").strip()
        reason = r.failure.reason or (error.splitlines()[-1] if error else "(no error text)")
        rows.append({"run_id": r.run_id, "status": r.status, "kind": r.failure.kind or "(not recorded)",
                     "shape": r.shape().label(), "requested_on": combo_label(r.spec.requested_on()),
                     "reason": reason, "full_error": error or reason})
    columns = [Column("run_id"), Column("status"), Column("kind"), Column("shape"), Column("requested_on"),
               Column("reason", title_key="full_error")]
    section.blocks.append(Table("failures", columns, rows))
    for row in rows:
        if "\n" in row["full_error"]:
            section.blocks.append(Preformatted(f"{row['run_id']}: full error", row["full_error"]))
    return section
