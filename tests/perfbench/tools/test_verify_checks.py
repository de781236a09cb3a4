"""`perfbench verify`'s judgements on their own: schema differences, logit agreement, which op checks a plan
binds, a dead rank in torchrun's report, and the command's usage errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from model.backend import Capabilities
from model.optimizations import resolve_plan
from perfbench.cli import main
from perfbench.emulation.npu.schemas import schema_strings
from perfbench.results import REL_ERROR_TOLERANCE
from perfbench.tools.op_checks import op_checks
from perfbench.tools.verify import schemas
from perfbench.tools.verify.context import all_on, tiny_config
from perfbench.tools.verify.numerics import NEW_TOKENS, PROMPTS, Forced, agreement
from perfbench.tools.verify.ops import unbound_reason
from perfbench.tools.verify.parallel import _case_check, dead_rank
from perfbench.tools.verify.summary import FAIL, PASS
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


def _forced(gen: torch.Generator, layers: int = 2, scale: float = 1.0) -> Forced:
    """A teacher-forced pass of PROMPTS with NEW_TOKENS forwards: outputs [L, 2, B, T, H], logits [B, N, V]."""
    batch, width = len(PROMPTS), max(len(p) for p in PROMPTS)
    outputs = [torch.randn(layers, 2, batch, width if f == 0 else 1, 8, generator=gen) * scale
               for f in range(NEW_TOKENS)]
    return Forced(torch.randn(batch, NEW_TOKENS, 50, generator=gen), outputs, [])


def test_verify_agreement_is_the_runs_numerics_and_bound():
    want = _forced(torch.Generator().manual_seed(0))
    same = agreement(want, want, "bfloat16")
    assert same.ok and same.max_rel_error == 0.0 and same.bound == REL_ERROR_TOLERANCE["bfloat16"]
    # one layer's branch 3 % off at every token: far inside one standard deviation of the logits, yet outside
    off = Forced(want.logits, [o.clone() for o in want.outputs], [])
    for o in off.outputs:
        o[1, 0] *= 1.03
    bad = agreement(off, want, "bfloat16")
    assert not bad.ok and bad.max_rel_error == pytest.approx(0.03, rel=1e-3) and bad.where.endswith("layer 1 mixer")
    # the near miss: rounding-sized noise (0.5 % of each value) passes in bf16 and fails in fp32
    noisy = Forced(want.logits, [o * (1 + 0.005 * torch.randn(o.shape, generator=torch.Generator().manual_seed(1)))
                                 for o in want.outputs], [])
    assert agreement(noisy, want, "bfloat16").ok and not agreement(noisy, want, "float32").ok
    nan = Forced(want.logits * float("nan"), want.outputs, [])
    assert not agreement(nan, want, "bfloat16").ok


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


def test_the_parallel_item_judges_every_rank(tmp_path):
    want = _forced(torch.Generator().manual_seed(0))
    case = {"name": "tp2-all-on", "exe_mode": "eager"}
    plan = {"mm_all_reduce": {"state": "on", "reason": ""}, "graph_mode": {"state": "off", "reason": ""}}
    (tmp_path / "tp2-all-on.json").write_text(json.dumps(plan))
    model = SimpleNamespace(name="tiny")

    def save(rank: int, factor: float) -> None:
        outputs = [o.clone() for o in want.outputs]
        outputs[0][0, 1] *= factor  # the prefill's layer-0 MoE output
        torch.save({"logits": want.logits, "outputs": outputs}, tmp_path / f"tp2-all-on.rank{rank}.pt")

    save(0, 1.0)
    assert _case_check(case, tmp_path, model, want) is None  # rank 1's result missing: not run
    save(1, 1.03)  # rank 1 alone off by 3 %
    check = _case_check(case, tmp_path, model, want)
    assert check is not None and check.status == FAIL and "rank 1" in check.error, check
    save(1, 1.0)  # the near miss: both ranks agree with world size 1
    check = _case_check(case, tmp_path, model, want)
    assert check is not None and check.status == PASS, check
