"""communication.json / communication_matrix.json tables against the profiler's own totals and bandwidths."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from perfbench.profiling.ascend import parse_ascend_dir
from perfbench.profiling.communication import link_bandwidth, read_communication, read_communication_matrix

from .conftest import NPU_FIXTURES

LEVEL2 = "msinsight_st_qwen3_0.6b_level2"
LEVEL1 = "msinsight_pytorch_text_level1"
COMMUNICATION_FILES = sorted(NPU_FIXTURES.rglob("communication.json"))


def _profiler_total_mb(data: dict, step_key: str, kind: str) -> float:
    # The profiler's own per-step sum; SDMA already holds the HCCS/PCIE/SIO sub-links, RDMA is the rest.
    links = data[step_key][kind]["Total Op Info"]["Communication Bandwidth Info"]
    return float(links["RDMA"]["Transit Size(MB)"]) + float(links["SDMA"]["Transit Size(MB)"])


@pytest.mark.parametrize("path", COMMUNICATION_FILES, ids=lambda p: str(p.relative_to(NPU_FIXTURES)))
def test_transfer_size_per_step_and_kind_equals_total_op_info(path):
    data = json.loads(path.read_text())
    ops, _ = read_communication(path, rank=0)

    for step_key, kinds in data.items():
        step = int(step_key.removeprefix("step"))
        for kind, entries in kinds.items():
            if not entries:
                continue
            ours = ops[(ops["step"] == step) & (ops["kind"] == kind)]["transit_size_mb"].sum()
            assert ours == pytest.approx(_profiler_total_mb(data, step_key, kind), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("folder, total_mb", [(LEVEL2, 1766.55), (LEVEL1, 427.60)])
def test_rank0_transfer_size_is_counted_once(npu_fixtures, folder, total_mb):
    """The values "Total Op Info" gives for rank 0 (it was doubled when sub-links were added to SDMA)."""
    profile = parse_ascend_dir(npu_fixtures / folder)
    rank0 = profile.communication[profile.communication["rank"] == 0]
    assert rank0["transit_size_mb"].sum() == pytest.approx(total_mb, abs=0.01)


@pytest.mark.parametrize("path", COMMUNICATION_FILES, ids=lambda p: str(p.relative_to(NPU_FIXTURES)))
def test_link_bandwidth_equals_the_profilers_bandwidth(path):
    data = json.loads(path.read_text())
    _, links = read_communication(path, rank=0)
    checked = 0
    for step_key, kinds in data.items():
        for kind, entries in kinds.items():
            for op_key, info in entries.items():
                for link, values in info["Communication Bandwidth Info"].items():
                    if op_key == "Total Op Info" or not values.get("Bandwidth(GB/s)"):
                        continue
                    op_name, _, group = op_key.partition("@")
                    row = links[(links["step"] == int(step_key.removeprefix("step"))) & (links["kind"] == kind)
                                & (links["op_name"] == op_name) & (links["group"] == group)
                                & (links["link"] == link)]
                    assert row["bandwidth_gb_s"].iloc[0] == pytest.approx(values["Bandwidth(GB/s)"], abs=1e-4)
                    checked += 1
    assert checked > 0


def test_sub_links_are_marked_part_of_sdma_and_summed_per_rank(npu_fixtures):
    path = npu_fixtures / LEVEL1 / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    data = json.loads(path.read_text())
    _, links = read_communication(path, rank=0)
    totals = data["step50"]["collective"]["Total Op Info"]["Communication Bandwidth Info"]

    table = link_bandwidth(links).set_index("link")

    assert table.loc["HCCS", "part_of"] == "SDMA" and pd.isna(table.loc["SDMA", "part_of"])
    for link in ("HCCS", "SDMA"):
        assert table.loc[link, "transit_size_mb"] == pytest.approx(totals[link]["Transit Size(MB)"])
        assert table.loc[link, "transit_time_us"] == pytest.approx(totals[link]["Transit Time(ms)"] * 1000)
        assert table.loc[link, "bandwidth_gb_s"] == pytest.approx(
            totals[link]["Transit Size(MB)"] / totals[link]["Transit Time(ms)"])


def test_matrix_rows_keep_the_profilers_links(npu_fixtures):
    path = npu_fixtures / LEVEL1 / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    data = json.loads(path.read_text())
    expected = sum(len(pairs) for kinds in data.values() for ops in kinds.values() for pairs in ops.values())

    matrix = read_communication_matrix(path, rank=0)

    assert len(matrix) == expected
    top = matrix[(matrix["op"] == "allreduce-top1") & (matrix["src_rank"] == 0) & (matrix["dst_rank"] == 1)].iloc[0]
    pair = next(v for k, v in data["step50"]["collective"].items() if k.startswith("allreduce-top1@"))["0-1"]
    assert top["transport"] == pair["Transport Type"]
    assert top["bandwidth_gb_s"] == pytest.approx(pair["Bandwidth(GB/s)"], abs=1e-4)
