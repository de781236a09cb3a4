"""The report's "ops that moved" section of an `ab --ops` folder: the branches, then the op groups that moved
(on one side only first), each with its interval, its word, whether it is a cost shift, and what it could detect."""

from __future__ import annotations

from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.results.op_ab_record import OpABRecord, OpVerdict

CALL_TEXT = {"moved": "moved", "shift": "cost shift (branch same)", "": ""}


def _row(r: OpVerdict) -> dict[str, object]:
    return {"run": r.run_id, "what": r.group or f"{r.branch} (branch)", "present": r.present,
            "base_us": round(r.base_us, 1), "head_us": round(r.head_us, 1), "ratio": r.ratio, "lo": r.ci_low,
            "hi": r.ci_high, "verdict": r.verdict + (" (regression)" if r.regression else ""),
            "call": CALL_TEXT[r.call], "epochs": r.epochs,
            "detectable": "" if r.detectable is None else f"+-{r.detectable:.1%}"}


def ops_section(ops: OpABRecord | None) -> Section | None:
    """None for a job run without --ops."""
    if ops is None:
        return None
    section = Section("Ops that moved")
    if not ops.epochs:
        section.blocks.append(Text(ops.note))
        return section
    overhead = "unknown" if ops.profiler_overhead is None else f"{ops.profiler_overhead:+.0%}"
    section.blocks.append(Text(
        f"{ops.epochs} op epochs, each one profiled iteration of every run and arm after a timed epoch; the "
        f"profiler costs {overhead} of an unprofiled iteration (same process). Groups: op family, phase and layer "
        f"type under their branch; a group that moved while its branch stayed same is a cost shift (time moved "
        f"between the ops of one branch), never a regression. Groups under {ops.small_share:.0%} of a run's op "
        f"time are pooled per branch."))
    columns = [Column("run"), Column("what", "branch / group", wrap=True), Column("present"),
               Column("base_us", "base µs"), Column("head_us", "head µs"),
               Column("ratio", "head / base", ci=("lo", "hi"), suffix="x"), Column("verdict", mark_key="verdict"),
               Column("call"), Column("epochs"), Column("detectable", "detects")]
    one_sided = [r for r in ops.groups if r.present != "both"]
    moved = [r for r in ops.groups if r.call and r.present == "both"]
    section.blocks.append(Table("ab_ops_moved", columns, [_row(r) for r in [*one_sided, *ops.branches, *moved]],
                                caption="Ops on one side only, the branches, then the groups that moved; intervals at "
                                        "the family level (Bonferroni over the groups, or over the branches); "
                                        "detects: the smallest change the group's own spread could have called"))
    section.blocks.append(Table("ab_ops_all", columns, [_row(r) for r in ops.groups],
                                caption="Every group", collapsed=True))
    return section
