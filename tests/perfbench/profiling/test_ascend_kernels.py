from __future__ import annotations

import pandas as pd
import pytest

from perfbench.errors import UserError
from perfbench.profiling.ascend import parse_ascend_dir
from perfbench.profiling.ascend_kernels import kernel_events, op_time_by_shape, read_kernel_details
from perfbench.profiling.events import ALL_COLUMNS
from perfbench.profiling.scopes import Scope

from .conftest import NPU_FIXTURES, require
from .synthetic import KERNELS, V3, VARIANTS, write_kernel_details

FIRST_NS = 1736408883704643212


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_header_variant_gives_the_same_events(tmp_path, variant):
    details = read_kernel_details(write_kernel_details(tmp_path / "kernel_details.csv", VARIANTS[variant]))
    events = kernel_events(details, rank=0, origin_ns=FIRST_NS)

    assert list(events.columns) == list(ALL_COLUMNS)
    assert events["name"].tolist() == [k["Name"] for k in KERNELS]
    assert events["category"].tolist() == ["matmul", "norm", "communication"]
    assert events["dur_us"].tolist() == [100.5, 10.25, 50.0]
    # exact ns from "...643.212\t": relative starts are exact differences of the written timestamps
    assert events["start_us"].tolist() == [0.0, 200.001, 256.788]
    assert events["step"].tolist() == [7, 7, 7]
    assert set(events["side"]) == {"device"}


@pytest.mark.parametrize("variant", ["V1", "V2", "V3", "V4", "BlockNum"])
def test_block_dim_and_step_id_aliases_become_the_current_names(tmp_path, variant):
    details = read_kernel_details(write_kernel_details(tmp_path / "kernel_details.csv", VARIANTS[variant]))

    assert "Block Num" in details.table.columns and "Block Dim" not in details.table.columns
    assert details.table["Block Num"].tolist() == [20, 40, 0]
    assert "Step Id" in details.table.columns and "Step ID" not in details.table.columns


def test_na_cells_are_null_and_quoted_shapes_are_unquoted(tmp_path):
    details = read_kernel_details(write_kernel_details(tmp_path / "kernel_details.csv", VARIANTS["V4"]))
    table = details.table

    assert table["Input Shapes"].tolist()[:2] == ["1,4096;4096,1024", "1,4096;4096"]
    assert pd.isna(table["Input Shapes"].iloc[2]) and pd.isna(table["Task ID"]).all()
    assert table["start_ns"].iloc[0] == FIRST_NS
    events = kernel_events(details, rank=0, origin_ns=FIRST_NS)
    assert events["stream"].tolist() == ["2", "2", ""]


def test_level0_na_types_fall_back_to_names_and_missing_stream_is_reported(tmp_path):
    details = read_kernel_details(write_kernel_details(tmp_path / "kernel_details.csv", V3, level0=True))
    events = kernel_events(details, rank=0, origin_ns=FIRST_NS)

    assert details.missing_columns == ["Stream ID"]
    assert details.all_na_columns == []  # the HCCL row keeps its Type
    assert events["category"].tolist() == ["matmul", "norm", "communication"]
    assert events["stream"].tolist() == ["", "", ""]


def test_all_na_type_column_is_reported(tmp_path):
    compute_only = [k for k in KERNELS if k["Accelerator Core"] != "HCCL"]
    path = write_kernel_details(tmp_path / "kernel_details.csv", V3, compute_only, level0=True)

    assert read_kernel_details(path).all_na_columns == ["Type", "Accelerator Core"]


def test_missing_required_column_is_a_user_error(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text("Name,Type,Duration(us)\nMatMul,MatMul,1.0\n")

    with pytest.raises(UserError, match="Start Time"):
        read_kernel_details(path)


def test_rows_without_duration_are_dropped_and_counted(tmp_path):
    kernels = [dict(KERNELS[0]), dict(KERNELS[1], **{"Duration(us)": "N/A"})]
    path = write_kernel_details(tmp_path / "kernel_details.csv", VARIANTS["V2"], kernels)
    details = read_kernel_details(path)

    assert len(details.table) == 1 and details.dropped_rows == 1


def test_annotation_context_joins_on_start_with_one_ns_tolerance(tmp_path):
    details = read_kernel_details(write_kernel_details(tmp_path / "kernel_details.csv", VARIANTS["V2"]))
    scopes = {
        FIRST_NS: Scope(phase="decode", layer=1, layer_type="linear_attention", module="gdn", step=4),
        1736408883704899999: Scope(phase="decode", module="moe", step=4),  # the collective, 1 ns earlier
    }
    events = kernel_events(details, rank=2, origin_ns=FIRST_NS, scopes=scopes)

    assert events["module"].tolist()[0] == "gdn" and events["module"].tolist()[2] == "moe"
    assert events["category"].tolist() == ["matmul", "norm", "communication"]  # a gdn matmul stays matmul
    assert events["step"].tolist() == [4, 7, 4]  # the annotation's step wins over Step Id
    assert events["layer"].tolist()[0] == 1 and pd.isna(events["layer"].iloc[1])
    assert events["rank"].tolist() == [2, 2, 2]


@pytest.mark.parametrize("relative", [
    "msinsight_pytorch_text_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "msinsight_st_qwen3_0.6b_level2/rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "msprof_analyze_ut/compute_advice/kernel_details.csv",
    "msprof_analyze_ut/advisor_backend_compute_advice/kernel_details.csv",
])
def test_real_kernel_details_parse_without_loss(relative):
    path = require(NPU_FIXTURES / relative)
    details = read_kernel_details(path)
    raw_rows = len(pd.read_csv(path, dtype=str))

    assert len(details.table) == raw_rows and details.dropped_rows == 0
    assert details.missing_columns == []
    events = kernel_events(details, rank=0, origin_ns=int(details.table["start_ns"].min()))
    assert events["start_us"].min() == 0.0
    assert (events["dur_us"] > 0).all()
    assert events["step"].notna().all()



def test_op_time_by_shape_adds_up_to_the_profilers_op_statistic():
    """Per op Type, the shape rows sum to op_statistic.csv's Count and Total Time (the profiler's own table)."""
    run = require(NPU_FIXTURES / "msinsight_st_qwen3_0.6b_level2" / "rank_0_ascend_pt")
    ours = op_time_by_shape(parse_ascend_dir(run).kernels)
    theirs = pd.read_csv(run / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv").groupby("OP Type").agg(
        count=("Count", "sum"), total=("Total Time(us)", "sum"))

    per_op = ours.groupby("op").agg(count=("count", "sum"), total=("total_us", "sum"))
    assert len(per_op) > 10
    for op, row in per_op.iterrows():
        assert row["count"] == theirs.loc[op, "count"], op
        assert row["total"] == pytest.approx(theirs.loc[op, "total"], abs=0.01), op
