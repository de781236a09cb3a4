"""Host-bound view on a hand-built decode step: two layers, kernels with gaps, host launches."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfbench.profiling.events import events_from_columns
from perfbench.profiling.host_bound import host_bound, union_by_group
from perfbench.profiling.tables import union_us


def _step(step: int) -> pd.DataFrame:
    # layer 0 (gdn): host ops at 0-2 and 2-4 launch kernels at 1-3 and 6-7 (device busy 3, free 3 over 1..7)
    # layer 1 (attn): host op at 8-9 launches a kernel at 10-14 (busy 4, free 0)
    return events_from_columns({
        "name": ["h0", "h1", "k0", "k1", "h2", "k2"],
        "category": ["other"] * 6,
        "phase": ["decode"] * 6,
        "layer": [0, 0, 0, 0, 1, 1],
        "layer_type": ["linear_attention"] * 4 + ["full_attention"] * 2,
        "step": [step] * 6,
        "side": ["host", "host", "device", "device", "host", "device"],
        "start_us": [100.0 * step + t for t in (0, 2, 1, 6, 8, 10)],
        "dur_us": [2.0, 2.0, 2.0, 1.0, 1.0, 4.0],
    })


def test_device_busy_and_free_and_host_time_per_launch():
    table = host_bound(pd.concat([_step(0), _step(1)], ignore_index=True)).set_index("layer_type")

    gdn, attn, whole = table.loc["linear_attention"], table.loc["full_attention"], table.loc["(all)"]
    assert (gdn["steps"], gdn["device_busy_us"], gdn["device_free_us"]) == (2, 3.0, 3.0)
    assert (gdn["host_busy_us"], gdn["host_span_us"], gdn["launches"]) == (4.0, 4.0, 2.0)
    assert gdn["host_us_per_launch"] == pytest.approx(2.0)
    assert (attn["device_busy_us"], attn["device_free_us"], attn["launches"]) == (7 - 3.0, 0.0, 1.0)
    # whole step: kernels span 1..14 with 7 busy; host ops span 0..9
    assert (whole["device_busy_us"], whole["device_free_us"], whole["host_span_us"]) == (7.0, 6.0, 9.0)
    assert whole["host_us_per_launch"] == pytest.approx(3.0)


def test_no_decode_steps_gives_an_empty_table():
    prefill = _step(0).assign(phase="prefill")
    assert host_bound(prefill).empty


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 10)), min_size=1, max_size=40))
def test_union_per_group_equals_the_union_of_each_group(intervals):
    group = np.array([g for g, _, _ in intervals])
    start = np.array([s for _, s, _ in intervals], dtype=float)
    end = start + np.array([d for _, _, d in intervals], dtype=float)

    unions = union_by_group(group, start, end)

    for g in np.unique(group):
        assert unions[g] == union_us(start[group == g], end[group == g])
