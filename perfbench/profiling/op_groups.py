"""Op time of one profiled iteration, grouped the way `perfbench diff` groups it, each group under its branch.

A *group* is an op family (`tables.op_family`) in a phase and a layer type: the keys of `perfbench diff --by
phase,layer_type` (perfbench/profiling/diff.py), on the trace's primary side only (device kernel time where the
trace has any, else host self time: `events.primary_side`). Each group also sits under one *branch* of the layer,
named (perfbench/results/op_group.py) from the innermost module annotation (the model's `pb|module=...` ranges,
model/layers/decoder.py):

  attention       attn (full attention)
  linear_attention  gdn (the gated delta rule layers)
  moe             moe, router, experts
  norm            norm, final_norm
  embed_head      embed, lm_head
  other           anything else, and every op where no module range encloses it (a compiled decode graph runs
                  without layer ranges: its ops all land in "other")

Time is conserved within a branch when a fusion moves it between ops (a fused RMSNorm replaces pow/mean/rsqrt/mul
with one op, inside "norm"), which is why `perfbench ab --ops` judges the branches too (perfbench/analysis/op_ab.py).
"""

from __future__ import annotations

import pandas as pd

from perfbench.profiling.events import NONE_LABEL, check_events, primary_side
from perfbench.profiling.tables import op_family
from perfbench.results.op_group import ATTENTION, EMBED_HEAD, LINEAR_ATTENTION, MOE, NORM, OTHER, OpGroup

MODULE_BRANCH = {"attn": ATTENTION, "gdn": LINEAR_ATTENTION, "moe": MOE, "router": MOE, "experts": MOE,
                 "norm": NORM, "final_norm": NORM, "embed": EMBED_HEAD, "lm_head": EMBED_HEAD}


def branch_of(module: object) -> str:
    """The branch an op belongs to, from its innermost module annotation (None / missing: "other")."""
    return MODULE_BRANCH.get(module, OTHER) if isinstance(module, str) else OTHER


def group_times(events: pd.DataFrame) -> dict[str, float]:
    """Group label -> total µs of one profiled iteration's events table, on the table's primary side."""
    check_events(events)
    if events.empty:
        return {}
    rows = events[events["side"] == primary_side(events)]
    names = rows["name"]
    families = names.map({n: op_family(str(n)) for n in pd.unique(names)})
    module = rows["module"] if "module" in rows else pd.Series(None, index=rows.index, dtype="object")
    branches = module.map(branch_of)

    def labelled(column: str) -> pd.Series:
        values = rows[column].astype(object)
        return values.where(values.notna(), NONE_LABEL).astype(str)

    frame = pd.DataFrame({"branch": branches, "op": families, "phase": labelled("phase"),
                          "layer_type": labelled("layer_type"), "dur_us": rows["dur_us"].astype(float)})
    totals = frame.groupby(["branch", "op", "phase", "layer_type"], sort=True)["dur_us"].sum()
    return {OpGroup(*(str(k) for k in key)).label: float(us) for key, us in totals.items()}
