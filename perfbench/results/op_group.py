"""An op group's name: the branch of the layer it runs in, its op family, phase and layer type.

The grouping itself (a profiled iteration's events -> µs per group) is perfbench/profiling/op_groups.py; the
name lives here, below every stage, because the op-level A/B record (op_ab_record.py), its judgement
(perfbench/analysis/op_ab.py) and its readers (gate, bisect, report) all read the branch back from the name.
"""

from __future__ import annotations

from dataclasses import dataclass

NONE_LABEL = "(none)"  # what the trace did not say (no phase, no layer type): events.NONE_LABEL's text
ATTENTION, LINEAR_ATTENTION, MOE, NORM, EMBED_HEAD, OTHER = (
    "attention", "linear_attention", "moe", "norm", "embed_head", "other")
BRANCHES = (ATTENTION, LINEAR_ATTENTION, MOE, NORM, EMBED_HEAD, OTHER)
SMALL_OPS = "(small ops)"  # the op of a branch's pooled small groups (perfbench/analysis/op_ab.py)
SEPARATOR = " | "


@dataclass(frozen=True, order=True)
class OpGroup:
    """One group: its branch, op family, phase and layer type ("(none)" where the trace did not say)."""

    branch: str
    op: str
    phase: str = NONE_LABEL
    layer_type: str = NONE_LABEL

    @property
    def label(self) -> str:
        """The group as one string (a key in records): branch | op | phase | layer_type."""
        return SEPARATOR.join((self.branch, self.op, self.phase, self.layer_type))

    @classmethod
    def from_label(cls, label: str) -> OpGroup:
        parts = label.split(SEPARATOR)
        if len(parts) != 4:
            raise ValueError(f"not an op group label: {label!r}")
        return cls(*parts)

    @classmethod
    def small_ops(cls, branch: str) -> OpGroup:
        """A branch's pooled small groups."""
        return cls(branch, SMALL_OPS)
