"""`perfbench verify`'s judgements on their own: schema differences, logit agreement, which op checks a plan
binds, a dead rank in torchrun's report, and the command's usage errors."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from model.backend import Capabilities
from model.optimizations import resolve_plan
from perfbench.cli import main
from perfbench.emulation.npu.schemas import schema_strings
from perfbench.tools.op_checks import op_checks
from perfbench.tools.verify import schemas
from perfbench.tools.verify.context import all_on, tiny_config
from perfbench.tools.verify.numerics import agreement
from perfbench.tools.verify.ops import unbound_reason
from perfbench.tools.verify.parallel import dead_rank
from tests.cli_helpers import one_error_line

RMS = "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)"


def test_schema_changes_are_spelled_out(tmp_path):
    installed = {op: text for op, text in schema_strings()["npu"].items()}
    installed.update({f"air::{op}": text for op, text in schema_strings()["air"].items()})
    assert schemas.compare(installed) == []
    installed["npu_rms_norm"] = "npu_rms_norm(Tensor self, Tensor gamma, *, float epsilon=1e-05, bool fast=False)" \
                                " -> Tensor"
    installed["npu_swiglu"] = None
    diffs = {d.op: d.problem for d in schemas.compare(installed)}
    assert diffs["npu_swiglu"] == "missing from the installed torch_npu"
    problem = diffs["npu_rms_norm"]
    for part in ("new argument fast (bool)", "argument epsilon: keyword-only now",
                 "argument epsilon: default 1e-06 -> 1e-05", "returns (Tensor, Tensor) -> (Tensor)"):
        assert part in problem, problem
    assert set(diffs) == {"npu_swiglu", "npu_rms_norm"}


def test_schema_file_entries_are_read_at_any_depth_without_overloads(tmp_path):
    path = tmp_path / schemas.SCHEMA_FILE
    path.write_text(f"official:\n  - func: {RMS}\ncustom:\n  - func: npu_rms_norm.out(Tensor self) -> Tensor\n"
                    "    exposed: true\n")
    assert schemas._file_schemas(path) == {"npu_rms_norm": RMS}


def test_logit_agreement_scales_with_the_reference():
    gen = torch.Generator().manual_seed(0)
    want = torch.randn(3, 4, 50, generator=gen)  # std 1: tolerance 1
    near = agreement(want + 0.5, want)
    assert near.ok and near.max_abs_diff == pytest.approx(0.5, abs=1e-5) and near.token_agreement == 1.0
    assert not agreement(want * 3, want).ok
    flipped = want.clone()
    flipped[0, 0] = -flipped[0, 0]  # one position's argmax moves; a decisive one if its margin is wide
    a = agreement(flipped, want)
    assert a.max_abs_diff > a.tolerance and not a.ok


def test_op_checks_bound_by_the_plan_of_each_platform():
    names = {"950": "Ascend950PR", "A2": "Ascend910B3"}
    for platform, name in names.items():
        caps = Capabilities(device="npu", device_name=name, torch_npu=True, torchair=True, npu_platform=platform,
                            npu_ops=frozenset({"npu_rotary_mul", "npu_rms_norm", "npu_add_rms_norm",
                                               "npu_fused_infer_attention_score", "npu_chunk_gated_delta_rule",
                                               "npu_grouped_matmul", "npu_swiglu", "npu_moe_init_routing_v2",
                                               "npu_moe_finalize_routing"}))
        plan = resolve_plan(all_on(graph=False), caps, model=tiny_config(), dtype="bfloat16")
        reasons = {c.name: unbound_reason(c, plan) for c in op_checks("npu")}
        assert reasons["rms_norm"] == "" and reasons["write_kv"] == ""
        assert reasons["attention_decode (TND, paged)"].startswith("the plan binds fia_v1_bsh")
        chunk = reasons["gdr_prefill (chunk)"]
        assert (chunk.startswith("chunk_gdr inactive: npu_chunk_gated_delta_rule is not used on Ascend 950")
                if platform == "950" else chunk == "")


# torchrun's report of a job whose rank 1 was killed (from a verify run with rank_dies:1; torch 2.13)
TORCHRUN_REPORT = """perfbench.tools.verify.rank_worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_23:17:49
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 24087)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 24087
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_23:17:49
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 24088)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 24088
============================================================
"""


def test_dead_rank_is_the_root_cause_not_the_rank_torchrun_stopped():
    assert dead_rank(TORCHRUN_REPORT) == (1, -9)
    assert dead_rank("some output without a report") is None


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--items", "ops,bogus"], {}, "--items: unknown item 'bogus'"),
    ([], {"PERFBENCH_VERIFY_FAULT": "op_raises:npu_rms_norm"}, "is a test hook of the NPU emulator"),
    (["--emulate-npu", "910b"], {"PERFBENCH_VERIFY_FAULT": "op_raises:nope"}, "names no torch_npu 2.14.0 op"),
    (["--emulate-npu", "910b", "--platform", "950"], {}, "--platform 950 contradicts --emulate-npu 910b"),
    ([], {}, "no Ascend NPU here"),
])
def test_usage_errors_are_one_line(args: list[str], env: dict[str, str], message: str, monkeypatch, tmp_path):
    monkeypatch.delenv("PERFBENCH_VERIFY_FAULT", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, ["verify", "--out", str(tmp_path / "v"), *args])
    assert message in one_error_line(result)
