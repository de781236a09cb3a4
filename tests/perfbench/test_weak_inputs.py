"""The weak cases of hostile input: a huge text field is not copied whole into every output table, a checkpoint
that is not a Qwen3.5-MoE one (or has a NaN epsilon) is refused naming the field, and a diff of traces from two
devices says so."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from model.config import ConfigError, load_config
from perfbench.cli import main
from perfbench.results.cells import MAX_CELL_CHARS, cell_text
from tests.cli_helpers import one_error_line
from tests.model.test_checkpoint_errors import small_config
from tests.perfbench.profiling.synthetic import V2, npu_trace_view, write_json, write_kernel_details


def chrome(path: Path, names: list[str]) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": name, "ts": 10 * i, "dur": 5, "pid": 1, "tid": 1}
              for i, name in enumerate(names)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


class TestWeakCases:
    def test_a_huge_op_name_is_shortened_in_the_tables(self, tmp_path: Path):
        huge = "aten::" + "x" * 5_000_000
        path = chrome(tmp_path / "t.json", [huge, "aten::mm"])
        result = CliRunner().invoke(main, ["trace", str(path), "--out", str(tmp_path / "tables")])
        assert result.exit_code == 0, result.output[-2000:]
        assert len(result.output) < 100_000
        for table in (tmp_path / "tables").glob("*.csv"):
            assert table.stat().st_size < 100_000, table
        csv.field_size_limit(10**7)
        with open(tmp_path / "tables" / "per_op.csv") as handle:
            names = [row["name"] for row in csv.DictReader(handle)]
        assert cell_text(huge) in names and "aten::mm" in names

    def test_cell_text_says_how_much_was_cut(self):
        assert cell_text("abc", 5) == "abc"
        assert cell_text("abcdefgh", 5) == "abcde... (3 more characters)"
        assert len(cell_text("y" * 10**6)) < MAX_CELL_CHARS + 40

    @pytest.mark.parametrize("change,field", [
        ({"model_type": "llama"}, "model_type"),
        ({"rms_norm_eps": math.nan}, "rms_norm_eps"),
        ({"rms_norm_eps": math.inf}, "rms_norm_eps"),
    ], ids=["model_type", "eps-nan", "eps-inf"])
    def test_a_checkpoint_config_that_cannot_be_measured(self, tmp_path: Path, change: dict, field: str):
        raw = {**small_config().to_hf_dict(), **change}
        (tmp_path / "config.json").write_text(json.dumps(raw))  # json writes NaN as a checkpoint tool would
        with pytest.raises(ConfigError) as err:
            load_config(tmp_path)
        assert "\n" not in str(err.value) and f"`{field}`" in str(err.value)
        assert str(tmp_path / "config.json") in str(err.value)

    def test_a_multimodal_wrapper_of_another_text_model(self, tmp_path: Path):
        text = {**small_config().to_hf_dict(), "model_type": "qwen2_moe"}
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text}))
        with pytest.raises(ConfigError, match="`text_config.model_type` 'qwen2_moe'"):
            load_config(tmp_path)

    def test_a_run_of_such_a_checkpoint_is_one_line(self, tmp_path: Path):
        (tmp_path / "ckpt").mkdir()
        (tmp_path / "ckpt" / "config.json").write_text(
            json.dumps({**small_config().to_hf_dict(), "rms_norm_eps": math.nan}))
        result = CliRunner().invoke(main, ["run", "--dry-run", "--set", f"perfbench.model={tmp_path / 'ckpt'}"])
        assert "rms_norm_eps" in one_error_line(result)

    def test_a_diff_of_traces_from_two_devices_says_so(self, tmp_path: Path):
        cpu = chrome(tmp_path / "cpu.json", ["aten::mm", "aten::add"])
        npu = tmp_path / "npu_ascend_pt"
        write_kernel_details(npu / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", V2)
        write_json(npu / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", npu_trace_view())
        result = CliRunner().invoke(main, ["diff", str(cpu), str(npu), "--out", str(tmp_path / "d")])
        assert result.exit_code == 0, result.output[-2000:]
        flat = " ".join(result.output.split())
        assert "A and B come from different devices (A: a CPU (host ops only); B: an Ascend NPU)" in flat
        same = CliRunner().invoke(main, ["diff", str(cpu), str(cpu), "--out", str(tmp_path / "s")])
        assert same.exit_code == 0 and "different devices" not in same.output


def test_a_machine_without_torch_gets_one_line_naming_the_install(tmp_path: Path) -> None:
    # torch blocked in a fresh interpreter (None in sys.modules makes `import torch` fail as if not installed)
    code = ("import sys; sys.modules['torch'] = None; from perfbench.cli import main; "
            f"main(['run', 'ci_smoke', '--out', {str(tmp_path / 'out')!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: torch is not installed: `pip install torch==2.13.0` (the CPU build; on an NPU machine the torch "
        "that torch_npu names)"]
