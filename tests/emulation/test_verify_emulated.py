"""`perfbench verify --emulate-npu P --quick` end to end, in fresh processes: every item passes on each platform
and the bundle is written within 3 minutes, is under 20 MB, holds no environment variable outside the allow-list
and reads back (`--read`, torch unimportable) as the same summary; each injected fault fails exactly the items
that run the broken piece, naming the op and the error, while the other items pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from perfbench.results.env_allowlist import is_recorded
from tests.emulation.helpers import ROOT
from tests.perfbench.test_torch_free import BLOCKER

pytestmark = [pytest.mark.npu_emulated, pytest.mark.slow]
PLATFORMS = ("910b", "910_93", "950")
ITEMS = ("environment", "ops", "model", "parallel", "profile")
SECRET = "verify-secret-7f3a9c"  # the value of variables the bundle must not hold
QUICK_LIMIT_S = 180  # the must-hold: a quick run writes its bundle within 3 minutes here


def verify(out: Path, *args: str, env: dict[str, str] | None = None, timeout: float = QUICK_LIMIT_S
           ) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    for name in ("PERFBENCH_EMULATE_NPU", "PERFBENCH_VERIFY_FAULT"):
        if name not in (env or {}):
            environ.pop(name, None)
    return subprocess.run([sys.executable, "-m", "perfbench.cli", "verify", "--out", str(out), *args], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=timeout)


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def statuses(summary: dict) -> dict[str, str]:
    return {item["name"]: item["status"] for item in summary["items"]}


@pytest.fixture(scope="module", params=PLATFORMS)
def quick_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[str, Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp(f"verify-{request.param}") / "bundle"
    env = {"SECRET_TOKEN": SECRET, "MY_APP_SETTING": SECRET, "HCCL_BUFFSIZE": "kept",
           "HCCL_VERIFY_TEST_SETTING": SECRET}
    proc = verify(out, "--emulate-npu", request.param, "--quick", "--devices", "2", env=env)
    return request.param, out, proc


def test_quick_run_passes_every_item(quick_run):
    platform, out, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = summary_of(out)
    assert statuses(summary) == dict.fromkeys(ITEMS, "pass"), proc.stdout
    assert summary["emulation"] == f"emulated npu ({platform})"
    assert f"EMULATED: emulated npu ({platform})" in proc.stdout and "result: PASS" in proc.stdout
    parallel = next(i for i in summary["items"] if i["name"] == "parallel")
    assert [c["name"] for c in parallel["checks"]] == ["tiny/tp2-all-on", "tiny/ep2-all-on"]
    # MC2 where the platform documents it (A2, A3), npu_mm_all_reduce_base on A2 and 950
    detail = {c["name"]: c["detail"] for c in parallel["checks"]}
    assert ("moe_dispatch_combine on" in detail["tiny/ep2-all-on"]) == (platform != "950")
    assert ("mm_all_reduce on" in detail["tiny/tp2-all-on"]) == (platform != "910_93")


def test_quick_bundle_is_small_and_holds_only_allowed_variables(quick_run, tmp_path: Path):
    _, out, proc = quick_run
    archive = out.with_name("bundle.tar.gz")
    assert archive.is_file(), proc.stderr[-3000:]
    assert archive.stat().st_size < 20 * 10**6
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path)
    files = [p for p in (tmp_path / "bundle").rglob("*") if p.is_file()]
    assert {"summary.json", "summary.md", "environment.json", "bundle.json"} <= {p.name for p in files}
    assert any(p.name.endswith(".json.gz") for p in files)  # the profile item's trimmed traces
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data and b"MY_APP_SETTING" not in data, path
    env = json.loads((tmp_path / "bundle" / "environment.json").read_text())["env"]
    assert env["HCCL_BUFFSIZE"] == "kept"  # allowed variables are recorded...
    assert all(is_recorded(name, value) for name, value in env.items())  # ...and nothing else


def test_read_without_torch_prints_the_same_summary(quick_run, tmp_path: Path):
    _, out, proc = quick_run
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "torch is blocked" in probe.stderr
    read = subprocess.run([sys.executable, "-m", "perfbench.cli", "verify", "--read",
                           str(out.with_name("bundle.tar.gz"))], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert read.returncode == proc.returncode, read.stderr[-3000:]
    assert read.stdout == proc.stdout


# fault, platform, items run (None: all), the items that must fail, the op every failure names, text of each error
FAULTS = [
    ("op_raises:npu_rms_norm", "910b", "environment,ops,model", {"ops", "model"}, "npu_rms_norm",
     "injected fault op_raises"),
    ("op_numerics:npu_rms_norm", "910_93", "environment,ops,model", {"ops", "model"}, "npu_rms_norm", ""),
    ("graph_capture", "950", "environment,model", {"model"}, "torchair GE backend", "injected fault graph_capture"),
    ("op_missing:npu_chunk_gated_delta_rule", "910b", "environment,ops", {"environment"},
     "npu_chunk_gated_delta_rule", "missing from the installed torch_npu"),
    ("rank_dies:1", "910_93", None, {"parallel"}, "torch.distributed (HCCL)", "rank 1 died: killed by SIGKILL"),
]


@pytest.mark.parametrize(("fault", "platform", "items", "failing", "op", "error"), FAULTS,
                         ids=[f[0].split(":")[0] for f in FAULTS])
def test_injected_fault_fails_exactly_its_items(tmp_path: Path, fault: str, platform: str, items: str | None,
                                                failing: set[str], op: str, error: str):
    args = ["--emulate-npu", platform, "--quick", "--devices", "2", *(["--items", items] if items else [])]
    proc = verify(tmp_path / "bundle", *args, env={"PERFBENCH_VERIFY_FAULT": fault})
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = summary_of(tmp_path / "bundle")
    assert summary["faults"] == [fault] and f"faults    {fault} injected" in proc.stdout
    selected = set(items.split(",")) if items else set(ITEMS)
    expected = {name: "fail" if name in failing else "pass" if name in selected else "skipped" for name in ITEMS}
    assert statuses(summary) == expected, proc.stdout
    for item in summary["items"]:
        if item["name"] in failing:
            failed = [c for c in item["checks"] if c["status"] == "fail"]
            assert failed and all(op in c["op"] and error in c["error"] for c in failed), failed
            assert all(f"{item['name']} / {c['name']}" in proc.stdout for c in failed[:3])
        if fault.startswith("op_numerics") and item["name"] in failing:  # wrong numbers, localised to the toggle
            want = {"ops": "exceeds the tolerance", "model": "alone, fused_rmsnorm disagree"}[item["name"]]
            assert all(want in c["error"] for c in item["checks"] if c["status"] == "fail"), item
        if item["name"] == "model" and fault == "graph_capture":  # eager passes, each graph case fails
            assert {c["name"]: c["status"] for c in item["checks"]} == {"tiny/all on": "pass",
                                                                        "tiny/all on, ge_graph": "fail"}
