"""`perfbench doctor`: the support matrix, and --check-ops running every fast op against its reference."""

from __future__ import annotations

from click.testing import CliRunner

from model.toggles import TOGGLE_NAMES
from perfbench.cli import main


def test_doctor_prints_every_toggle_and_the_npu_reason():
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    for toggle in TOGGLE_NAMES:
        assert toggle in result.output
    assert "inactive: torch_npu not available" in result.output
    assert "needs attn_tp_size > 1" in result.output or "not implemented on cpu" in result.output


def test_doctor_check_ops_reports_every_op_within_tolerance():
    result = CliRunner().invoke(main, ["doctor", "--check-ops"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.rstrip().endswith(("ok", "MISMATCH"))
            or "FAILED" in line]
    names = {"rms_norm", "add_rms_norm", "gated_rms_norm", "apply_rope", "attention_prefill", "attention_decode",
             "gdr_prefill", "experts_prefill", "experts_decode"}
    assert all(any(line.startswith(n) for line in rows) for n in names), result.output
    assert all(line.rstrip().endswith("ok") for line in rows), result.output


def test_doctor_unknown_device_is_one_line_error():
    result = CliRunner().invoke(main, ["doctor", "--device", "tpu"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "--device" in result.output and "tpu" in result.output
