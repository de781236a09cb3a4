from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfbench.profiling.events import COLUMNS, events_from_columns
from perfbench.profiling.tables import (
    ALL_OPS,
    compute_vs_communication,
    op_counts_per_decode_step,
    op_family,
    per_category,
    per_layer_type,
    per_op,
    per_phase,
    union_us,
    write_tables,
)


def _events(rows: list[dict]) -> pd.DataFrame:
    keys = COLUMNS
    defaults = {"side": "device", "rank": 0, "stream": "0"}
    return events_from_columns({k: [r.get(k, defaults.get(k)) for r in rows] for k in keys})


# Two decode steps on the device: per step a matmul (10 µs), a norm (5 µs) overlapping the matmul by 2 µs,
# and an all-reduce (8 µs) overlapping the norm by 3 µs; one host op that must never mix with device time.
DECODE = _events([
    row
    for step, t0 in ((0, 0.0), (1, 100.0))
    for row in (
        {"name": "aten::mm", "category": "matmul", "phase": "decode", "step": step, "layer": 0,
         "layer_type": "linear_attention", "start_us": t0, "dur_us": 10.0},
        {"name": "rms", "category": "norm", "phase": "decode", "step": step, "layer": 1,
         "layer_type": "full_attention", "start_us": t0 + 8, "dur_us": 5.0},
        {"name": "hcom_allReduce__1_0_1", "category": "communication", "phase": "decode", "step": step,
         "start_us": t0 + 10, "dur_us": 8.0, "stream": "hccl"},
    )
] + [{"name": "aten::add", "category": "other", "side": "host", "start_us": 0.0, "dur_us": 1000.0}])


def test_per_category_totals_and_shares_stay_within_a_side():
    table = per_category(DECODE).set_index(["side", "category"])

    assert table.loc[("device", "matmul"), "total_us"] == 20.0
    assert table.loc[("device", "communication"), "count"] == 2
    assert table.loc[("host", "other"), "share_pct"] == 100.0
    assert table.xs("device")["share_pct"].sum() == pytest.approx(100.0)
    assert table.loc[("device", "matmul"), "share_pct"] == pytest.approx(100 * 20 / 46)


def test_per_op_groups_collective_instances_and_sorts_largest_first():
    table = per_op(DECODE)
    device = table[table["side"] == "device"]

    assert device["name"].tolist() == ["aten::mm", "hcom_allReduce", "rms"]
    stats = device.iloc[0][["count", "total_us", "mean_us", "min_us", "max_us"]].tolist()
    assert stats == [2, 20.0, 10.0, 10, 10]
    assert op_family("hcom_batchSendRecv__128_3_1") == "hcom_batchSendRecv"
    assert op_family("aten::mm") == "aten::mm"


def test_per_phase_and_layer_type_label_missing_annotations():
    phases = per_phase(DECODE).set_index(["side", "phase"])
    assert phases.loc[("device", "decode"), "total_us"] == 46.0
    assert phases.loc[("host", "(none)"), "total_us"] == 1000.0

    layers = per_layer_type(DECODE).set_index(["side", "layer_type"])
    linear = layers.loc[("device", "linear_attention"), ["layers", "total_us", "mean_us_per_layer"]]
    assert linear.tolist() == [1, 20.0, 20.0]
    assert layers.loc[("device", "(none)"), "layers"] == 0


def test_compute_vs_communication_on_device_intervals():
    table = compute_vs_communication(DECODE)

    assert table["step"].tolist() == [0, 1] and set(table["side"]) == {"device"}
    first = table.iloc[0]
    assert first["compute_us"] == pytest.approx(13.0)  # union of [0,10) and [8,13)
    assert first["communication_us"] == pytest.approx(8.0)
    assert first["overlapped_us"] == pytest.approx(3.0)  # [10,13)
    assert first["communication_not_overlapped_us"] == pytest.approx(5.0)
    assert first["wall_us"] == pytest.approx(18.0) and first["free_us"] == pytest.approx(0.0)
    assert first["communication_share_pct"] == pytest.approx(100 * 8 / 21)


def test_compute_vs_communication_host_only_sums_self_times():
    host = _events([
        {"name": "aten::mm", "category": "matmul", "side": "host", "start_us": 0.0, "dur_us": 4.0},
        {"name": "gloo:all_reduce", "category": "communication", "side": "host", "start_us": 1.0,
         "dur_us": 6.0},
        {"name": "aten::add", "category": "other", "side": "host", "start_us": 2.0, "dur_us": 1.0},
    ])
    row = compute_vs_communication(host).iloc[0]

    assert (row["side"], row["compute_us"], row["communication_us"]) == ("host", 5.0, 6.0)
    assert math.isnan(row["overlapped_us"])


def test_op_counts_per_decode_step():
    counts = op_counts_per_decode_step(DECODE)

    assert counts == {ALL_OPS: 3.0, "aten::mm": 1.0, "rms": 1.0, "hcom_allReduce": 1.0}
    assert op_counts_per_decode_step(DECODE.assign(phase="prefill")) == {}


def test_write_tables_writes_one_csv_per_table(tmp_path):
    paths = write_tables(DECODE, tmp_path / "tables")

    assert sorted(p.name for p in paths) == sorted([
        "per_op.csv", "per_category.csv", "per_phase.csv", "per_layer_type.csv",
        "compute_vs_communication.csv", "op_counts_per_decode_step.csv", "host_bound.csv", "idle.csv"])
    per_cat = pd.read_csv(tmp_path / "tables" / "per_category.csv")
    assert {"total_us", "count", "mean_us", "share_pct"} <= set(per_cat.columns)
    counts = pd.read_csv(tmp_path / "tables" / "op_counts_per_decode_step.csv")
    assert counts.set_index("op").loc[ALL_OPS, "count_per_step"] == 3.0


def test_tables_of_an_empty_trace_are_empty(tmp_path):
    empty = DECODE.iloc[0:0]
    assert per_category(empty).empty and compute_vs_communication(empty).empty
    assert op_counts_per_decode_step(empty) == {}
    assert len(write_tables(empty, tmp_path)) == 8


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=0, max_size=30))
def test_union_matches_a_unit_grid(intervals):
    starts = np.array([s for s, _ in intervals], dtype=float)
    ends = np.array([s + d for s, d in intervals], dtype=float)
    covered = {t for s, d in intervals for t in range(s, s + d)}
    assert union_us(starts, ends) == len(covered)


def test_op_family_drops_per_call_ids_and_graph_hashes():
    from perfbench.profiling.tables import op_family

    assert op_family("hcom_allReduce__586_0_1") == "hcom_allReduce"
    assert op_family("## Call CompiledFxGraph fu2sdyv2n5xpeu3mfuwc ##") == "## Call CompiledFxGraph ##"
    assert op_family("Torch-Compiled Region: 3/1") == "Torch-Compiled Region"
    assert op_family("aten::mm") == "aten::mm"
