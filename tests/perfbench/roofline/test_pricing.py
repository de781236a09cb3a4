"""Roofline time of an op, and measured time next to roofline per (phase, category)."""

from __future__ import annotations

import pytest

from model.cost import OpCost
from perfbench.roofline.peaks import DevicePeaks
from perfbench.roofline.pricing import price_op


def fake_device() -> DevicePeaks:
    return DevicePeaks("fake", "fake", "cuda", flops={"bfloat16": 100e12}, memory_Bps=1e12, link_Bps=50e9)


def test_price_op_is_max_of_compute_and_memory_plus_comm() -> None:
    # 1 TFLOP at 100 TFLOP/s = 10 ms; 2 GB at 1 TB/s = 2 ms; 100 MB on a 50 GB/s link = 2 ms
    op = OpCost("prefill", "", "matmul", "x", flops=1e12, weight_bytes=1e9, act_bytes=1e9,
                comm={"all_reduce": 1e8}, wire={"all_reduce": 1e8})
    priced = price_op(op, fake_device(), "bfloat16")
    assert (priced.compute_s, priced.memory_s, priced.comm_s) == pytest.approx((0.01, 0.002, 0.002))
    assert priced.roofline_s == pytest.approx(0.012)
    assert priced.bound == "compute"
    op.overlap = True  # a fused matmul + all_reduce
    assert price_op(op, fake_device(), "bfloat16").roofline_s == pytest.approx(0.01)


def test_measured_next_to_roofline_per_phase_and_category() -> None:
    import pandas as pd

    from model.backend import Capabilities
    from model.optimizations import resolve_plan
    from model.parallel_config import ParallelConfig
    from perfbench.roofline.measured import roofline_table
    from tests.model.test_cost import micro

    plan = resolve_plan("none", Capabilities(device="cpu", device_name="cpu"), ParallelConfig(), micro())
    # 1 GFLOP/s and 1 GB/s: 1 FLOP or 1 byte = 1 ns
    peaks = DevicePeaks("slow", "slow", "cpu", flops={"bfloat16": 1e9}, memory_Bps=1e9)
    events = pd.DataFrame({
        "side": ["host"] * 4, "phase": ["prefill", "prefill", "prefill", "decode"],
        "category": ["attention", "attention", "matmul", "attention"], "dur_us": [1.0, 2.0, 5.0, 4.0]})
    table = roofline_table(events, micro(), ParallelConfig(), plan, [3, 3], 5, "bfloat16", peaks)
    row = table[(table.phase == "prefill") & (table.category == "attention")].iloc[0]
    # the attention layer's attention-category ops in prefill (6 rows, 2 heads of 4, 1 KV head, bf16):
    # KV write 48 elements read + written = 192 B; core 384 FLOP vs 288 B; output gate 96 FLOP vs 288 B
    assert row.roofline_us == pytest.approx((192 + 384 + 288) / 1000)
    assert row.measured_us == 3.0
    assert row.pct_of_roofline == pytest.approx(100 * 0.864 / 3.0)
    assert row.achieved_tflops == pytest.approx((384 + 96) / 3e-6 / 1e12)
    assert row.gap_us == pytest.approx(3.0 - 0.864)
    decode = table[(table.phase == "decode") & (table.category == "attention")].iloc[0]
    assert decode.steps == 4  # output_len 5: four decode steps after the prefill's token
    total = table[(table.phase == "prefill") & (table.category == "(all)")].iloc[0]
    assert total.measured_us == 8.0
    assert set(table.category) >= {"gdn", "moe-experts", "norm", "rope", "matmul"}




def test_cost_categories_are_the_profiler_categories() -> None:
    """Estimates and measurements join on category names: model/cost.py cannot import perfbench, so its copy
    must stay equal to the profiler's."""
    from model.cost import CATEGORIES
    from perfbench.profiling.categories import CATEGORIES as PROFILER_CATEGORIES

    assert CATEGORIES == PROFILER_CATEGORIES
