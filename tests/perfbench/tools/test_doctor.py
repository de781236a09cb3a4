"""`perfbench doctor`: the support matrix, and --check-ops running every fast op against its reference."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from model.toggles import TOGGLE_NAMES
from perfbench.cli import main
from perfbench.tools.doctor import OpCheck, op_checks


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


@pytest.mark.npu_emulated
def test_npu_op_checks_use_each_ops_dtype_and_layout():
    """Audit #45: FIA has no fp32 kernel, TND takes head_dim 128/192, and inputs must reach the device."""
    checks = {c.name: c for c in op_checks("npu")}
    gen = torch.Generator().manual_seed(0)
    for name in ("attention_prefill", "attention_decode", "attention_prefill (TND)", "gdr_prefill (chunk)"):
        assert checks[name].dtype == torch.bfloat16, name
    assert checks["attention_prefill (TND)"].make_inputs(gen)[0].shape[-1] == 128


@pytest.mark.npu_emulated
def test_op_check_hands_the_fast_op_its_dtype_and_the_reference_fp32():
    seen = {}

    def fast(x, lens):
        seen["fast"] = (x.dtype, lens.dtype)
        return x

    def ref(x, lens):
        seen["ref"] = x.dtype
        return x

    check = OpCheck("probe", ref, fast, lambda g: (torch.randn(4, generator=g), torch.tensor([1, 2])), 1e-2,
                    torch.bfloat16)
    assert check.run(torch.Generator().manual_seed(0), "cpu") == 0.0
    assert seen == {"fast": (torch.bfloat16, torch.int64), "ref": torch.float32}


@pytest.mark.npu_emulated
@pytest.mark.slow
@pytest.mark.parametrize("platform", ["910b", "910_93", "950"])
def test_doctor_check_ops_passes_on_every_emulated_platform(platform):
    # a separate process: the emulator installs itself for the life of the process
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "perfbench.cli", "doctor", "--check-ops", "--emulate-npu", platform],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.rstrip().endswith(("ok", "MISMATCH"))
            or "FAILED" in line]
    # 9 families + gdr_decode, route, write_kv + the TND attention prefill, decode and KV write
    assert len(rows) == 15 and all(line.rstrip().endswith("ok") for line in rows), proc.stdout
    assert {line.split()[0] for line in rows} >= {"attention_prefill", "attention_decode", "gdr_prefill"}
    assert f"emulated npu ({platform})" in proc.stdout
    bf16 = [line for line in rows if line.startswith(("attention", "gdr_prefill"))]
    assert bf16 and all(" bfloat16 " in line for line in bf16)
