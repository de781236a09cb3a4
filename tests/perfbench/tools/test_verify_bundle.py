"""`perfbench verify`'s torch-free side: item verdicts, the one-page summary, the env allow-list, trimmed traces,
the size-capped bundle and `--read`."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.results.env_allowlist import recorded_env
from perfbench.tools.verify.bundle import pack, write_summary
from perfbench.tools.verify.read import load_summary
from perfbench.tools.verify.summary import FAIL, PASS, SKIPPED, Check, ItemResult, Summary, render
from perfbench.tools.verify.traces import trim_trace_file
from tests.cli_helpers import one_error_line
from tests.perfbench.test_torch_free import BLOCKER, REPO


def _summary(items: list[ItemResult], emulation: str | None = "emulated npu (910b)") -> Summary:
    return Summary(started="2026-12-01T10:00:00+00:00", platform="910b", series="Atlas A2",
                   device_name="Ascend910B3 [emulated npu (910b)]", device_count=1, emulation=emulation, quick=True,
                   devices=2, faults=["op_raises:npu_rms_norm"], versions={"torch": "2.13.0", "torch_npu": None},
                   items=items)


def test_item_verdict_from_its_checks():
    ok, bad, skip = Check("a", PASS), Check("b", FAIL, error="boom"), Check("c", SKIPPED, "no devices")
    assert ItemResult.of_checks("x", [ok, skip], 1.0).status == PASS
    failed = ItemResult.of_checks("x", [ok, bad, skip], 1.0)
    assert failed.status == FAIL and failed.reason == "b: boom" and failed.counts() == "1 pass, 1 fail, 1 skipped"
    skipped = ItemResult.of_checks("x", [skip], 0.0)
    assert skipped.status == SKIPPED and skipped.reason == "no devices"


def test_render_names_emulation_faults_and_each_failure():
    bad = Check("tiny/rms_norm", FAIL, op="npu_rms_norm", call="npu_rms_norm(self=bfloat16[3, 37, 1024])",
                error="InjectedFault: npu_rms_norm: injected")
    text = render(_summary([ItemResult.of_checks("ops", [bad, Check("tiny/rope", PASS)], 2.0),
                            ItemResult("parallel", SKIPPED, "needs --devices 2 or more")]))
    assert "EMULATED: emulated npu (910b)" in text and "op_raises:npu_rms_norm injected" in text
    assert "ops / tiny/rms_norm: op npu_rms_norm" in text
    assert "call   npu_rms_norm(self=bfloat16[3, 37, 1024])" in text
    assert "parallel: needs --devices 2 or more" in text
    assert text.rstrip().endswith("result: FAIL (1 of 2 items failed); exit code 1")
    real = render(_summary([ItemResult("ops", PASS)], emulation=None))
    assert "EMULATED" not in real and "exit code 0" in real


def test_allow_list_keeps_ascend_variables_and_drops_everything_else():
    env = {"ASCEND_HOME_PATH": "/usr/local/Ascend", "HCCL_BUFFSIZE": "512", "PYTORCH_NPU_ALLOC_CONF": "x",
           "TASK_QUEUE_ENABLE": "2", "HOME": "/root", "SECRET_TOKEN": "s3cr3t", "HCCL_AUTH_TOKEN": "t",
           "AWS_SECRET_ACCESS_KEY": "k", "PATH": "/bin"}
    allowed = recorded_env(env)
    assert allowed.env == {"ASCEND_HOME_PATH": "/usr/local/Ascend", "HCCL_BUFFSIZE": "512",
                           "PYTORCH_NPU_ALLOC_CONF": "x", "TASK_QUEUE_ENABLE": "2"}
    assert allowed.withheld == 3  # the two credentials and the HCCL_ one; HOME and PATH are no one's concern


def test_trimmed_trace_keeps_the_longest_events_and_the_metadata(tmp_path: Path):
    events = [{"ph": "M", "name": "process_name", "pid": 1}]
    events += [{"ph": "X", "name": f"op{i}", "ts": i, "dur": i, "pid": 1} for i in range(10)]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    note = trim_trace_file(tmp_path / "t.json", tmp_path / "out.json.gz", max_events=3)
    trimmed = json.loads(gzip.decompress((tmp_path / "out.json.gz").read_bytes()))
    assert [e["name"] for e in trimmed["traceEvents"]] == ["process_name", "op7", "op8", "op9"]
    assert trimmed["displayTimeUnit"] == "ms" and "kept the 3 longest of 10 events" in note


def test_pack_leaves_out_the_largest_trace_to_stay_under_the_cap(tmp_path: Path):
    folder = tmp_path / "bundle"
    write_summary(folder, _summary([ItemResult("ops", PASS)]))
    for name, size in (("big", 400_000), ("small", 1_000)):
        path = folder / "traces" / name / "t.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(os.urandom(size))  # incompressible
    archive, left_out = pack(folder, cap_bytes=200_000)
    assert left_out == ["traces/big/t.bin"]
    assert archive.stat().st_size <= 200_000
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("bundle/bundle.json").read())  # type: ignore[union-attr]
    assert "bundle/traces/small/t.bin" in names and "bundle/traces/big/t.bin" not in names
    assert manifest["left_out"] == ["traces/big/t.bin"]


def test_read_renders_the_bundle_it_was_written_with(tmp_path: Path):
    summary = _summary([ItemResult.of_checks("ops", [Check("a", FAIL, error="e|rr")], 1.0)])
    write_summary(tmp_path / "v", summary)
    archive, _ = pack(tmp_path / "v", cap_bytes=10**6)
    for target in (archive, tmp_path / "v"):
        result = CliRunner().invoke(main, ["verify", "--read", str(target)])
        assert result.exit_code == 1 and result.output == render(summary) + "\n"
    assert "e\\|rr" in (tmp_path / "v" / "summary.md").read_text()  # a pipe cannot break the markdown table


@pytest.mark.parametrize("content", ["not a bundle", "tar-without-summary", "newer"])
def test_read_refuses_what_is_not_a_bundle_in_one_line(tmp_path: Path, content: str):
    target = tmp_path / "x"
    if content == "not a bundle":
        target.write_text("hello")
    elif content == "tar-without-summary":
        (tmp_path / "f.txt").write_text("x")
        with tarfile.open(target, "w:gz") as tar:
            tar.add(tmp_path / "f.txt", arcname="v/f.txt")
    else:
        target.mkdir()
        (target / "summary.json").write_text(json.dumps({"format": 99, "items": []}))
    line = one_error_line(CliRunner().invoke(main, ["verify", "--read", str(target)]))
    assert str(target) in line
    with pytest.raises(Exception, match="summary|verify"):
        load_summary(target)


def test_read_takes_no_other_option(tmp_path: Path):
    write_summary(tmp_path / "v", _summary([]))
    line = one_error_line(CliRunner().invoke(main, ["verify", "--read", str(tmp_path / "v"), "--quick"]))
    assert "--read takes no other option" in line


def test_read_imports_no_torch(tmp_path: Path):
    """The read path on its own, fast (the emulated end-to-end test reads a real bundle the same way)."""
    summary = _summary([ItemResult.of_checks("ops", [Check("a", PASS)], 1.0)])
    write_summary(tmp_path / "v", summary)
    archive, _ = pack(tmp_path / "v", cap_bytes=10**6)
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    read = subprocess.run([sys.executable, "-m", "perfbench.cli", "verify", "--read", str(archive)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr[-3000:]
    assert read.stdout == render(summary) + "\n"
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert "torch is blocked" in probe.stderr
