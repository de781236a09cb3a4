"""Which op moved: the op epochs of `perfbench ab --ops` judged per op group and per branch.

Input: one `OpPair` per (run, op epoch), each arm's µs per op group of one profiled iteration
(perfbench/results/op_ab_record.py). The epoch is the cluster, as for the timed pairs: each group's per-epoch
log ratio head / base is a cluster estimate, and the groups of the job are one family judged by
`sequential.judge` (each at the family level, Bonferroni over the groups; Holm for the regressions), so the words
of all the groups hold jointly. The branches (attention, linear attention, MoE, norm, embedding / lm head, other:
perfbench/results/op_group.py) are a second family, judged the same way on their summed time.

- Small groups (under `SMALL_SHARE` of the run's op time, both arms' mean) that both arms ran are pooled per
  branch into one "(small ops)" group: a few hundred tiny ops would each take a share of the family's error rate.
- A group on one side only (a fused op that replaced several, or the several it replaced) is listed first;
  its word is "slower" (only head) or "faster" (only base), and its time stays in its branch.
- Cost shift: a group that moved (or is on one side only) while its branch is "same" is a *shift*: a fusion
  moved time between the ops of the branch, where time is conserved. A shift is never a regression.
- Each group's `detectable`: the smallest change its own spread could have called at the family level, the
  margin plus the interval's half-width (t * se on the log scale).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfbench.analysis import paired
from perfbench.analysis.sequential import DecisionRule, Judgement, judge
from perfbench.results.op_ab_record import Call, OpABRecord, OpPair, OpVerdict, Present
from perfbench.results.op_group import OpGroup
from perfbench.results.verdicts import FASTER, SAME, SLOWER, Verdict

SMALL_SHARE = 0.01
Key = tuple[str, str]  # (run_id, group label or branch)
Times = dict[Key, tuple[list[float], list[float]]]  # key -> (base µs, head µs), one entry per op epoch


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _pooled(pairs: Sequence[OpPair], small_share: float) -> dict[str, dict[str, str]]:
    """run_id -> group label -> the label it is judged under: itself, or its branch's small ops when it is under
    `small_share` of the run's op time and both arms ran it (an op on one side only is never pooled)."""
    totals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for p in pairs:
        for side, arm in enumerate((p.base, p.head)):
            for label, us in arm.groups.items():
                totals[p.run_id][label][side] += us
    out: dict[str, dict[str, str]] = {}
    for rid, per in totals.items():
        whole = sum(sum(us) for us in per.values()) / 2
        out[rid] = {label: (OpGroup.small_ops(OpGroup.from_label(label).branch).label
                            if sum(us) / 2 < small_share * whole and min(us) > 0 else label)
                    for label, us in per.items()}
    return out


def _summed(groups: dict[str, float], key: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for label, us in groups.items():
        out[key[label]] += us
    return out


def _present(base: Sequence[float], head: Sequence[float]) -> Present:
    if not any(head):
        return "only base"
    if not any(base):
        return "only head"
    return "both"


def _detectable(low: float, high: float, margin: float) -> float | None:
    if not (0 < low <= high < math.inf):
        return None
    return math.expm1(math.log1p(margin) + (math.log(high) - math.log(low)) / 2)


def _estimates(times: Times) -> dict[Key, list[float]]:
    """Each key present on both sides: one log ratio per epoch where both ran it."""
    out: dict[Key, list[float]] = {}
    for key, (b, h) in times.items():
        if _present(b, h) == "both":
            logs = paired.log_ratios(b, h)
            if logs.size:
                out[key] = [float(x) for x in logs]
    return out


@dataclass(frozen=True)
class OpJudgement:
    """The groups' family and the branches' family, judged at the end of a job (`ab --ops`, or a simulated one)."""

    groups: Judgement[Key]
    branches: Judgement[Key]

    def branch_word(self, key: Key) -> Verdict | None:
        """The verdict of the branch a group key (run_id, label) sits in."""
        found = self.branches.ratios.get((key[0], OpGroup.from_label(key[1]).branch))
        return found.verdict if found is not None else None

    def call(self, key: Key, verdict: Verdict) -> Call:
        """A group's call: "shift" when it moved and its branch is "same", "moved" when its branch is not."""
        if verdict not in (SLOWER, FASTER):
            return ""
        return "shift" if self.branch_word(key) == SAME else "moved"

    def named(self) -> set[Key]:
        """Every group and branch called slower or faster (a branch as (run_id, branch))."""
        return {key for family in (self.groups, self.branches) for key, r in family.ratios.items()
                if r.verdict in (SLOWER, FASTER)}


def judge_ops(groups: Mapping[Key, Sequence[float]], branches: Mapping[Key, Sequence[float]],
              rule: DecisionRule) -> OpJudgement:
    """Each family's per-epoch log ratios judged at the end (`sequential.judge`, final, the family's own size)."""
    def family(estimates: Mapping[Key, Sequence[float]]) -> Judgement[Key]:
        return judge(estimates, {k: len(v) for k, v in estimates.items()}, rule, len(estimates), final=True)

    return OpJudgement(family(groups), family(branches))


def _rows(times: Times, judgement: Judgement[Key],
          group: bool) -> list[OpVerdict]:
    rows = []
    for key, (b, h) in times.items():
        rid, name = key
        branch = OpGroup.from_label(name).branch if group else name
        base_us, head_us = _mean(b), _mean(h)
        present = _present(b, h)
        one_side: dict[str, Verdict] = {"only base": FASTER, "only head": SLOWER}
        if present != "both":
            rows.append(OpVerdict(run_id=rid, branch=branch, group=name if group else None, present=present,
                                  base_us=base_us, head_us=head_us, epochs=len(b), verdict=one_side[present]))
            continue
        r = judgement.ratios.get(key)
        if r is None:
            continue
        rows.append(OpVerdict(run_id=rid, branch=branch, group=name if group else None, base_us=base_us,
                              head_us=head_us, ratio=r.value, ci_low=r.low, ci_high=r.high, level=r.level,
                              epochs=r.clusters, verdict=r.verdict, regression=judgement.regressions[key],
                              detectable=_detectable(r.low, r.high, r.margin)))
    return rows


def _order(row: OpVerdict) -> tuple[int, int, float, str]:
    moved = abs(math.log(row.ratio)) if row.ratio and math.isfinite(row.ratio) and row.ratio > 0 else math.inf
    rank = {"moved": 0, "shift": 1, "": 2}[row.call]
    return (0 if row.present != "both" else 1, rank, -moved if row.call else -max(row.base_us, row.head_us),
            row.group or row.branch)


def family_times(pairs: Sequence[OpPair], small_share: float = SMALL_SHARE) -> tuple[Times, Times]:
    """(groups, branches): per key, both arms' µs in every op epoch, in the order of `pairs` (small groups pooled)."""
    pooled = _pooled(pairs, small_share)
    groups: Times = {}
    branches: Times = {}
    for p in pairs:
        key = pooled[p.run_id]
        labels = sorted(set(key.values()))
        base, head = _summed(p.base.groups, key), _summed(p.head.groups, key)
        for label in labels:
            b, h = groups.setdefault((p.run_id, label), ([], []))
            b.append(base.get(label, 0.0))
            h.append(head.get(label, 0.0))
        for branch in sorted({OpGroup.from_label(label).branch for label in labels}):
            b, h = branches.setdefault((p.run_id, branch), ([], []))
            b.append(sum(us for label, us in base.items() if OpGroup.from_label(label).branch == branch))
            h.append(sum(us for label, us in head.items() if OpGroup.from_label(label).branch == branch))
    return groups, branches


def op_verdicts(pairs: Sequence[OpPair], rule: DecisionRule, small_share: float = SMALL_SHARE) -> OpABRecord:
    """The groups and branches of the op epochs `pairs`, judged (see the module docstring)."""
    groups, branches = family_times(pairs, small_share)
    judged = judge_ops(_estimates(groups), _estimates(branches), rule)
    branch_rows = _rows(branches, judged.branches, group=False)
    for r in branch_rows:
        r.call = "moved" if r.verdict in (SLOWER, FASTER) else ""
    group_rows = _rows(groups, judged.groups, group=True)
    for r in group_rows:
        r.call = judged.call((r.run_id, r.group or ""), r.verdict)
        r.regression = r.regression and r.call == "moved"
    overheads = [arm.profiled_ms / arm.plain_ms - 1 for p in pairs for arm in (p.base, p.head) if arm.plain_ms > 0]
    return OpABRecord(epochs=len({p.epoch for p in pairs}),
                      profiler_overhead=statistics.median(overheads) if overheads else None,
                      small_share=small_share, groups=sorted(group_rows, key=_order),
                      branches=sorted(branch_rows, key=_order), pairs=list(pairs))
