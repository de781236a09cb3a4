from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from model.tracing_names import scope_name
from perfbench.profiling.scopes import (
    EMPTY_SCOPE,
    OP,
    RANGE,
    SCOPE,
    Scope,
    is_context_range,
    scope_update,
    sweep,
)


def test_scope_update_reads_pb_names_and_profiler_steps():
    assert scope_update(scope_name(phase="decode", step=3)) == Scope(phase="decode", step=3)
    assert scope_update(scope_name(layer=7, layer_type="full_attention", module="attn")) == Scope(
        layer=7, layer_type="full_attention", module="attn")
    assert scope_update("ProfilerStep#12") == Scope(step=12)
    assert scope_update("pb|layer=x") == Scope()  # a non-integer layer is ignored, not an error
    assert scope_update("aten::mm") is None
    assert is_context_range("pb|phase=prefill") and is_context_range("ProfilerStep#0")
    assert not is_context_range("ProfilerStep#x") and not is_context_range("Optimizer.step#SGD.step")


def _run(events):
    """events: (thread, start, dur, kind, name) tuples."""
    thread, start, dur, kind, names = zip(*events)
    return sweep(np.array(thread), np.array(start), np.array(dur), np.array(kind), list(names))


def test_innermost_range_wins_per_key_and_threads_do_not_mix():
    scopes, self_ns = _run([
        (0, 0, 100, SCOPE, scope_name(phase="decode", step=1, module="moe")),
        (0, 10, 50, SCOPE, scope_name(layer=2, module="experts")),
        (0, 20, 10, OP, "aten::mm"),
        (0, 70, 10, OP, "aten::add"),
        (1, 20, 10, OP, "aten::mul"),  # another thread at the same time
    ])
    assert scopes[2] == Scope(phase="decode", layer=2, module="experts", step=1)
    assert scopes[3] == Scope(phase="decode", module="moe", step=1)
    assert scopes[4] == EMPTY_SCOPE
    assert self_ns.tolist() == [0, 0, 10, 10, 10]


def test_self_time_subtracts_direct_children_through_transparent_ranges():
    _, self_ns = _run([
        (0, 0, 100, OP, "parent"),
        (0, 10, 30, RANGE, "[annotation]"),
        (0, 15, 20, OP, "child"),
        (0, 16, 4, OP, "grandchild"),
        (0, 100, 5, OP, "next"),  # starts where parent ends: a sibling, not a child
    ])
    assert self_ns.tolist() == [80, 0, 16, 4, 5]


def test_annotation_with_the_same_span_as_its_op_still_encloses_it():
    scopes, _ = _run([(0, 5, 10, OP, "aten::mm"), (0, 5, 10, SCOPE, scope_name(module="router"))])
    assert scopes[0].module == "router"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), min_size=1, max_size=40))
def test_self_times_of_a_properly_nested_tree_add_up_to_the_root(shape):
    """Build a random nested tree (depth, width pairs) inside one root; exclusive times always sum to the
    root's inclusive duration because children tile their parents without overlap."""
    events = [(0, 0, 0, OP, "root")]
    stack = [(0, 0)]  # (index, cursor)
    cursor = 0
    for depth, width in shape:
        while len(stack) > depth + 1:
            idx, _ = stack.pop()
            events[idx] = (*events[idx][:2], cursor - events[idx][1], *events[idx][3:])
        cursor += 1
        events.append((0, cursor, 0, OP, "op"))
        stack.append((len(events) - 1, cursor))
        cursor += width
    while stack:
        idx, _ = stack.pop()
        cursor += 1
        events[idx] = (*events[idx][:2], cursor - events[idx][1], *events[idx][3:])
    _, self_ns = _run(events)
    assert (self_ns >= 0).all()
    assert int(self_ns.sum()) == events[0][2]
