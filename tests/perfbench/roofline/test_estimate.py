"""`perfbench estimate` on the shipped NPU scenarios, and its one-line errors."""

from __future__ import annotations

import csv
import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main

# plans per scenario: 7 swept toggles + the reference plan; in the 397B one_at_a_time sweep "+graph_mode"
# alone is the baseline plan (graph_mode needs grouped_moe), so the two merge
NPU_SCENARIOS = {"qwen3_5_35b_ep8": 8, "qwen3_5_122b_tp8": 8, "qwen3_5_397b_tp16": 7}


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
        assert float(row["mem_weights_bytes"]) > 0 and float(row["mem_state_bytes"]) > 0
        assert float(row["mem_activations_bytes"]) > 0
    # every plan holds the same weights (the toggles change kernels, not parameters)
    assert len({row["mem_weights_bytes"] for row in rows}) == 1
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




def test_estimate_out_is_checked_first_and_a_full_disk_keeps_the_previous_csvs(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("x")
    under_a_file = CliRunner().invoke(main, ["estimate", "qwen3_5_35b_ep8", "--out", str(tmp_path / "file" / "o")])
    assert under_a_file.exit_code == 2 and under_a_file.stderr.startswith("error: --out ")
    assert len(under_a_file.stderr.strip().splitlines()) == 1 and "is a file, not a folder" in under_a_file.stderr
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["estimate", "qwen3_5_35b_ep8", "--out", str(out)]).exit_code == 0
    before = {p: p.read_bytes() for p in out.glob("*.csv")}
    assert len(before) == 3

    def fsync(fd: int) -> None:  # every atomic write fails at its last step, as on a full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    full = CliRunner().invoke(main, ["estimate", "qwen3_5_35b_ep8", "--out", str(out)])
    assert full.exit_code == 2 and "No space left on device" in full.stderr and "Traceback" not in full.output
    assert {p: p.read_bytes() for p in out.glob("*.csv")} == before and not list(out.glob(".*.tmp"))
