"""Device peaks (every figure sourced), roofline pricing, the CPU peak cache and `perfbench estimate`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from model.cost import OpCost
from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.roofline import peaks as peaks_mod
from perfbench.roofline.peaks import PEAK_KEYS, DevicePeaks, device_peaks, load_peaks, parse_overrides, raw_entries
from perfbench.roofline.pricing import price_op

# plans per scenario: 7 swept toggles + the reference plan; in the 397B one_at_a_time sweep "+graph_mode"
# alone is the baseline plan (graph_mode needs grouped_moe), so the two merge
NPU_SCENARIOS = {"qwen3_5_35b_ep8": 8, "qwen3_5_122b_tp8": 8, "qwen3_5_397b_tp16": 7}


def test_every_peak_names_a_public_source() -> None:
    entries = raw_entries()
    assert {"a100-sxm-80gb", "h100-sxm", "h200-sxm", "ascend910_93"} <= set(entries)
    for name, entry in entries.items():
        values = [k for k in PEAK_KEYS if k in entry]
        assert values, f"{name}: no figure at all"
        for key in values:
            item = entry[key]
            assert float(item["value"]) > 0, f"{name}.{key}"
            assert str(item.get("source", "")).strip(), f"{name}.{key} has no source"
        if "devices_per_package" in entry:
            assert str(entry.get("devices_per_package_source", "")).strip(), name


def test_package_figures_are_split_per_device_and_links_per_direction() -> None:
    a3 = load_peaks()["ascend910_93"]
    raw = raw_entries()["ascend910_93"]
    assert a3.flops["bfloat16"] == pytest.approx(raw["bfloat16_tflops"]["value"] * 1e12 / 2)
    assert a3.memory_Bps == pytest.approx(raw["memory_GBps"]["value"] * 1e9 / 2)
    h100 = load_peaks()["h100-sxm"]
    assert h100.link_Bps == pytest.approx(900e9 / 2)  # 900 GB/s is the sum of both directions


def test_unknown_device_and_bad_override_are_user_errors() -> None:
    with pytest.raises(UserError, match="unknown device 'nope'"):
        device_peaks("nope")
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_overrides(["speed=3"])
    with pytest.raises(UserError, match="not a number"):
        parse_overrides(["memory_GBps=fast"])
    with pytest.raises(UserError, match="no sourced bfloat16 peak"):
        load_peaks()["ascend950dt"].flops_for("bfloat16")
    given = device_peaks("ascend950dt", parse_overrides(["bfloat16_tflops=500"]))
    assert given.flops_for("bfloat16") == 500e12
    assert given.sources["bfloat16_tflops"].startswith("given on the command line")


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


def test_cpu_peaks_are_measured_once_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setenv("PERFBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(peaks_mod, "matmul_flops", lambda reps=5, n=2048, dtype="float32": calls.append(dtype) or 1e9)
    monkeypatch.setattr(peaks_mod, "read_bandwidth", lambda reps=5: calls.append("bw") or 2e9)
    first = peaks_mod.cpu_peaks()
    assert first.measured and first.memory_Bps == 2e9 and first.flops["float32"] == 1e9
    assert sorted(calls) == ["bfloat16", "bw", "float32"]
    second = peaks_mod.cpu_peaks()
    assert second.memory_Bps == 2e9 and len(calls) == 3  # read from the cache file
    assert len(list(tmp_path.glob("cpu_peaks-*.json"))) == 1
    peaks_mod.cpu_peaks(refresh=True)
    assert len(calls) == 6


@pytest.mark.parametrize("scenario", NPU_SCENARIOS)
def test_estimate_on_the_npu_scenarios(scenario: str, tmp_path: Path) -> None:
    plans = NPU_SCENARIOS[scenario]
    result = CliRunner().invoke(main, ["estimate", scenario, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"scenario {scenario} on ascend910_93" in result.output
    with (tmp_path / "estimate.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == plans
    for row in rows:
        assert float(row["ttft_ms"]) > 0 and float(row["tpot_ms"]) > 0
        assert row["plan"] in result.output
    # dropping chunk_gdr must cost prefill time: the token recurrence re-reads the state every token
    by_plan = {r["plan"]: r for r in rows}
    with_gdr = next(r for r in rows if "gdr" in r["toggles"].split("+"))
    without = next(r for r in by_plan.values() if "gdr" not in r["toggles"].split("+"))
    assert float(without["ttft_ms"]) > float(with_gdr["ttft_ms"])
    cats = list(csv.DictReader((tmp_path / "estimate_categories.csv").open()))
    assert {"prefill", "decode"} == {c["phase"] for c in cats}
    assert (tmp_path / "estimate_toggles.csv").is_file()


def test_estimate_bad_input_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_device = runner.invoke(main, ["estimate", "qwen3_5_35b_ep8", "--device", "tpu9", "--out", str(tmp_path)])
    assert bad_device.exit_code == 2
    assert bad_device.output.strip().count("\n") == 0 and "unknown device 'tpu9'" in bad_device.output
    bad_scenario = runner.invoke(main, ["estimate", "no_such_scenario", "--out", str(tmp_path)])
    assert bad_scenario.exit_code == 2 and bad_scenario.output.strip().count("\n") == 0
    unsourced = runner.invoke(main, ["estimate", "qwen3_5_35b_ep8", "--device", "ascend950dt", "--out",
                                     str(tmp_path)])
    assert unsourced.exit_code == 2 and "bfloat16" in unsourced.output


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


def test_peaks_for_run_picks_the_documented_device() -> None:
    from perfbench.roofline.measured import peaks_for_run

    assert peaks_for_run("cuda", "NVIDIA H100 80GB HBM3").name == "h100-sxm"
    assert peaks_for_run("npu", "Ascend910_9392", "A3").name == "ascend910_93"
    assert peaks_for_run("cuda", "NVIDIA GeForce GTX 1080") is None
