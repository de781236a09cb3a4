"""Environment snapshot: versions, git state, device, threads, the env vars that change results."""

from __future__ import annotations

import json
import re

import torch

from perfbench.measure.environment import cann_version, collect_environment


def test_snapshot_has_the_reproducibility_fields():
    env = collect_environment("cpu")
    json.dumps(env)  # goes into result.json as is
    assert env["torch"] == torch.__version__ and env["python"].count(".") == 2
    assert env["torch_threads"] == torch.get_num_threads()
    assert env["device"] == "cpu" and env["device_count"] >= 1 and env["device_name"]
    assert env["hostname"] and env["cpu_model"] and re.match(r"\d{4}-\d\d-\d\dT", env["date"])
    assert env["git_sha"] == "unknown" or re.fullmatch(r"[0-9a-f]{40}", env["git_sha"])
    assert env["torch_npu"] is None or isinstance(env["torch_npu"], str)


def test_only_relevant_env_vars_are_recorded(monkeypatch):
    monkeypatch.setenv("HCCL_DETERMINISTIC", "true")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("TASK_QUEUE_ENABLE", "1")
    monkeypatch.setenv("SOME_SECRET_TOKEN", "x")
    recorded = collect_environment("cpu")["env"]
    assert recorded["HCCL_DETERMINISTIC"] == "true" and recorded["OMP_NUM_THREADS"] == "2"
    assert recorded["TASK_QUEUE_ENABLE"] == "1" and "SOME_SECRET_TOKEN" not in recorded


def test_cann_version_from_the_toolkit_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path))
    assert cann_version() is None
    (tmp_path / "x86_64-linux").mkdir()
    info = tmp_path / "x86_64-linux" / "ascend_toolkit_install.info"
    info.write_text("package_name=x\nversion=8.3.RC1\n")
    assert cann_version() == "8.3.RC1"


def test_git_state_without_git_is_unknown(monkeypatch):
    from perfbench.measure import git_state

    monkeypatch.setattr(git_state, "_git", lambda *args, **kwargs: None)
    assert git_state.git_state() == ("unknown", None)
