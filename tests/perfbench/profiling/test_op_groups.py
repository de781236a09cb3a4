"""Op groups of a profiled iteration: the keys `perfbench diff` groups by, each under its branch."""

from __future__ import annotations

import pytest

from perfbench.profiling.events import empty_events, events_from_columns
from perfbench.profiling.op_groups import branch_of, group_times
from perfbench.results.op_group import OpGroup


def test_ops_are_grouped_by_branch_op_phase_and_layer_type_on_the_primary_side() -> None:
    events = events_from_columns({
        "name": ["aten::mm", "aten::mm", "aten::mm", "gemm_kernel", "aten::pow", "aten::add"],
        "category": ["compute"] * 6, "phase": ["decode", "decode", "prefill", "decode", "decode", None],
        "layer_type": ["full_attention", "full_attention", "full_attention", "full_attention",
                       "linear_attention", None],
        "module": ["attn", "moe", "attn", "attn", "norm", None],
        "side": ["host", "host", "host", "device", "host", "host"],
        "start_us": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "dur_us": [10.0, 20.0, 30.0, 5.0, 2.0, 1.0]})
    # a trace with device rows: their time is what the model costs, the host rows are left out
    assert group_times(events) == {OpGroup("attention", "gemm_kernel", "decode", "full_attention").label: 5.0}
    host = group_times(events[events["side"] == "host"])
    assert host == {OpGroup("attention", "aten::mm", "decode", "full_attention").label: 10.0,
                    OpGroup("moe", "aten::mm", "decode", "full_attention").label: 20.0,
                    OpGroup("attention", "aten::mm", "prefill", "full_attention").label: 30.0,
                    OpGroup("norm", "aten::pow", "decode", "linear_attention").label: 2.0,
                    OpGroup("other", "aten::add").label: 1.0}


def test_a_compiled_graph_call_is_one_group_whatever_its_hash() -> None:
    events = events_from_columns({"name": ["## Call CompiledFxGraph fabc123 ##", "## Call CompiledFxGraph f999 ##"],
                                  "category": ["compute"] * 2, "side": ["host"] * 2, "start_us": [0.0, 1.0],
                                  "dur_us": [3.0, 4.0]})
    assert group_times(events) == {OpGroup("other", "## Call CompiledFxGraph ##").label: 7.0}


@pytest.mark.parametrize(("module", "branch"), [("attn", "attention"), ("gdn", "linear_attention"),
                                                ("moe", "moe"), ("final_norm", "norm"), ("lm_head", "embed_head"),
                                                ("embed", "embed_head"), (None, "other"), ("something", "other")])
def test_each_module_has_its_branch(module: str | None, branch: str) -> None:
    assert branch_of(module) == branch


def test_a_label_reads_back_and_a_wrong_one_is_refused() -> None:
    group = OpGroup("moe", "aten::mm", "decode", "full_attention")
    assert OpGroup.from_label(group.label) == group
    with pytest.raises(ValueError, match="not an op group label"):
        OpGroup.from_label("moe | aten::mm")
    assert group_times(empty_events()) == {}
