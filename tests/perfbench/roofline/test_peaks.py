"""Device peaks: every documented figure names its public source; per-device and per-direction splits;
overrides; the CPU peak cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbench.errors import UserError
from perfbench.roofline import peaks as peaks_mod
from perfbench.roofline.peaks import PEAK_KEYS, device_peaks, load_peaks, parse_overrides, raw_entries


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


def test_peaks_for_run_picks_the_documented_device() -> None:
    from perfbench.roofline.measured import peaks_for_run

    assert peaks_for_run("cuda", "NVIDIA H100 80GB HBM3").name == "h100-sxm"
    assert peaks_for_run("npu", "Ascend910_9392", "A3").name == "ascend910_93"
    assert peaks_for_run("cuda", "NVIDIA GeForce GTX 1080") is None
