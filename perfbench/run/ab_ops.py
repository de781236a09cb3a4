"""`perfbench ab --ops`: the parent's side of the op epochs, their record and their table.

After each timed epoch of a one-process job the parent asks the worker for one op epoch (perfbench/measure/
op_epochs.py: one profiled iteration of every (run, arm) in a seeded order) and keeps its `OpPair`s. At the end
they are judged per op group and per branch (perfbench/analysis/op_ab.py) into ab.json's `ops`
(perfbench/results/op_ab_record.py), and a short table is printed. The op epochs add to each epoch's wall time,
so the looks of the timed verdicts plan with it; the timed verdicts and the exit code are the job's, never the
ops'. Two processes cannot profile both arms in one process: the record says so and holds no op epochs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from perfbench.analysis.op_ab import op_verdicts
from perfbench.analysis.sequential import DecisionRule
from perfbench.results.op_ab_record import OpABRecord, OpPair, OpVerdict

TWO_PROCESSES_NOTE = "no op epochs: --ops profiles both arms in one process, and this job ran in two"
SHOWN_GROUPS = 12  # group rows in the printed table (ab.json holds them all)


def op_seed(epoch_seed: int) -> int:
    """The op epoch's order seed, drawn from its timed epoch's seed (a replay draws the same)."""
    return random.Random(f"ops-{epoch_seed}").randrange(2**31)


def op_epoch(send: Callable[[dict[str, Any]], object], answer: Callable[[], dict[str, Any]], index: int,
             epoch_seed: int) -> list[OpPair]:
    """Ask the worker for op epoch `index` and collect its pairs (`answer` raises on an error or the deadline)."""
    send({"op_epoch": {"index": index, "seed": op_seed(epoch_seed)}})
    pairs = []
    while "op_epoch_done" not in (line := answer()):
        pairs.append(OpPair.model_validate(line["op_pair"]))
    return pairs


def ops_record(pairs: list[OpPair], rule: DecisionRule, note: str = "") -> OpABRecord:
    if not pairs:
        return OpABRecord(note=note or "no op epoch finished before the job stopped")
    return op_verdicts(pairs, rule).model_copy(update={"note": note})


def _ratio(row: OpVerdict) -> str:
    if row.ratio is None:
        return f"{row.present:>21}"
    low, high = row.ci_low or 0.0, row.ci_high if row.ci_high is not None else math.inf
    return f"{row.ratio:6.3f}x [{low:.3f}, {high:.3f}]"


def _line(row: OpVerdict, run_width: int) -> str:
    name = row.group or f"{row.branch} (branch)"
    detect = f"+-{row.detectable:.1%}" if row.detectable is not None else "-"
    call = {"shift": "cost shift", "moved": "moved", "": ""}[row.call]
    flag = " REGRESSION" if row.regression else ""
    return (f"  {row.run_id:<{run_width}}  {name:<58} {row.base_us:10.1f} {row.head_us:10.1f}  {_ratio(row)}  "
            f"{row.verdict:<12} {call:<10} {detect:>8}{flag}")


def ops_table(record: OpABRecord) -> list[str]:
    """The printed table: the groups on one side only, the branches, then the groups called, then the largest
    others."""
    if not record.epochs:
        return [f"ops: {record.note}"]
    overhead = f"{record.profiler_overhead:+.0%}" if record.profiler_overhead is not None else "unknown"
    width = max([3, *(len(r.run_id) for r in record.branches), *(len(r.run_id) for r in record.groups)])
    levels = sorted({r.level for r in [*record.branches, *record.groups] if r.level is not None})
    lines = [f"ops: {record.epochs} op epochs (one profiled iteration of every run and arm each); profiler "
             f"overhead {overhead} of an unprofiled iteration; intervals at the family level "
             f"({', '.join(f'{x:.2%}' for x in levels) or 'none'}); groups under {record.small_share:.0%} of a "
             f"run's op time pooled per branch",
             f"  {'run':<{width}}  {'branch / group (branch | op | phase | layer type)':<58} {'base us':>10} "
             f"{'head us':>10}  {'head/base [interval]':<21}  {'word':<12} {'call':<10} {'detects':>8}"]
    one_sided = [r for r in record.groups if r.present != "both"]
    called = [r for r in record.groups if r.present == "both" and r.call]
    rest = [r for r in record.groups if r.present == "both" and not r.call]
    shown = [*one_sided, *called][:SHOWN_GROUPS]
    lines += [_line(r, width) for r in one_sided if r in shown]  # ops on one side only first
    lines += [_line(r, width) for r in record.branches]
    lines += [_line(r, width) for r in shown if r not in one_sided]
    lines += [_line(r, width) for r in rest[:max(SHOWN_GROUPS - len(shown), 0)]]
    if len(record.groups) > SHOWN_GROUPS:
        lines.append(f"  ... {len(record.groups) - SHOWN_GROUPS} more groups in ab.json (ops.groups)")
    return lines
