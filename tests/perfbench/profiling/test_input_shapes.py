"""The optional `input_shapes` column: Kineto `Input Dims`, Ascend `Input Shapes`, kept through concatenation."""

from __future__ import annotations

import json

import pandas as pd

from perfbench.profiling.ascend_kernels import kernel_events, read_kernel_details
from perfbench.profiling.chrome import parse_chrome_trace
from perfbench.profiling.events import check_events, concat_events, events_from_columns
from perfbench.profiling.shapes import input_dims_text

from .conftest import TORCH_FIXTURES, require
from .synthetic import V2, V3, write_kernel_details


def test_kineto_input_dims_become_shape_text():
    assert input_dims_text([[10, 10], [10, 10], []]) == "10,10;10,10;"
    assert input_dims_text([[[2, 3], [4]], [5]]) == "[2,3][4];5"  # a TensorList input
    assert input_dims_text([]) is None and input_dims_text(None) is None and input_dims_text("x") is None


def test_chrome_host_ops_carry_their_input_dims_and_kernels_their_launchers():
    path = require(TORCH_FIXTURES / "hta_tests" / "mi250_minitoy_train_ROCm6_2_kineto.json")
    raw = json.loads(path.read_text())["traceEvents"]
    dims_by_external = {e["args"]["External id"]: e["args"]["Input Dims"] for e in raw
                        if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})}
    kernels = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launched = [e for e in kernels if e["args"].get("External id") in dims_by_external]

    events = parse_chrome_trace(path)
    host = events[(events["side"] == "host") & events["input_shapes"].notna()]
    device = events[events["side"] == "device"]

    assert len(host) == len(dims_by_external) > 0
    assert device["input_shapes"].notna().sum() == len(launched) > 0
    first = launched[0]
    dims = dims_by_external[first["args"]["External id"]]
    expected = ";".join(",".join(str(d) for d in shape) for shape in dims)
    assert device.loc[device["name"] == first["name"], "input_shapes"].iloc[0] == expected


def test_kernel_details_input_shapes_without_quotes(tmp_path):
    details = read_kernel_details(write_kernel_details(tmp_path / "kernel_details.csv", V2))
    events = kernel_events(details, rank=0, origin_ns=0)
    assert events["input_shapes"].tolist() == ["1,4096;4096,1024", "1,4096;4096", None]

    level0 = read_kernel_details(write_kernel_details(tmp_path / "l0" / "kernel_details.csv", V3))
    assert kernel_events(level0, rank=0, origin_ns=0)["input_shapes"].isna().all()  # no shape column


def test_one_dimensional_shapes_stay_text(tmp_path):
    kernels = [{"Name": "k", "Type": "Add", "Accelerator Core": "AI_CORE", "Start Time(us)": "1.0",
                "Duration(us)": "2", "Stream ID": "2", "Block": "1", "Input Shapes": '"64"'}]
    details = read_kernel_details(write_kernel_details(tmp_path / "kernel_details.csv", V2, kernels))
    assert kernel_events(details, rank=0, origin_ns=0)["input_shapes"].tolist() == ["64"]


def test_the_column_is_optional_and_survives_concatenation():
    with_shapes = events_from_columns({"name": ["a"], "side": ["device"], "dur_us": [1.0], "start_us": [0.0],
                                       "input_shapes": ["2,3"]})
    by_hand = with_shapes.drop(columns=["input_shapes"])
    check_events(by_hand)  # a table built without it is still an events table
    both = concat_events([with_shapes, by_hand])
    assert both["input_shapes"].tolist()[0] == "2,3" and pd.isna(both["input_shapes"].tolist()[1])
    assert "input_shapes" in concat_events([by_hand]).columns
