"""Credentials by other names (issue 45): a name off the allow-list never passes, whatever it is called
(SLACK_WEBHOOK_URL, AZURE_STORAGE_SAS, CI_BEARER, a made-up TORCH_BEARER), and an allowed name with a
token-shaped value is withheld (MASTER_ADDR=ghs_...@10.0.0.1), on every path that writes: the run's record, the
worker's environment (whence torch copies TORCH*/TRITON* names into the compile cache inside --out), a report,
a baseline and the ab worker's difference lines. Each path gets the planted credential and a near miss."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.measure.arm_modules import _shown_env
from perfbench.results import RunSpec, load_results, write_results
from perfbench.results.env_allowlist import (
    RECORDED_NAMES,
    TORCH_PASSED,
    looks_like_credential,
    recorded_env,
    torch_copied_credentials,
)
from perfbench.results.records import Environment
from perfbench.run import ab
from perfbench.run.launcher import child_env
from tests.records_kit import run_result

SECRET = "Zq81xKc0Lw"  # in every planted value; no written file may hold it
OFF_LIST = {  # names that are no known knob: never recorded, whatever the value
    "SLACK_WEBHOOK_URL": f"https://hooks.slack.com/services/T0/B0/{SECRET}",
    "AZURE_STORAGE_SAS": f"sv=2022-11-02&ss=b&sig={SECRET}",
    "CI_BEARER": f"{SECRET}", "DEPLOY_BEARER": f"abc{SECRET}",
    "TORCH_BEARER": f"{SECRET}", "TRITON_UPLOAD_URL": f"https://x/{SECRET}", "MY_TOOL_SETTING": f"{SECRET}",
}
TOKEN_VALUES = {  # allowed names whose values are credential-shaped
    "MASTER_ADDR": f"ghs_{SECRET}aBcD0123456789xyzXYZ@10.0.0.1",
    "GLOO_SOCKET_IFNAME": f"xoxb-1234-{SECRET}",
    "HCCL_IF_IP": f"admin:{SECRET}@10.0.0.2",
    "CUDA_VISIBLE_DEVICES": f"AKIAIOSFODNN7{SECRET.upper()}",
    "TORCHINDUCTOR_COMPILE_THREADS": f"eyJhbGciOiJIUzI1NiJ9.{SECRET}",
    "PYTORCH_CUDA_ALLOC_CONF": f"expandable_segments:True&token={SECRET}",
    "HCCL_BUFFSIZE": f"{SECRET}Q7mN2pR9tV4wY6zB3cD5",  # a long random run
    "ASCEND_HOME_PATH": f"/opt/ascend/{SECRET}Q7mN2pR9tV4wY6zB3",  # a random run inside a path
    "NCCL_ALGO": f"Bearer {SECRET}",
    "OMP_NUM_THREADS": f"hf_{SECRET}abcdefghijklmnop",
}
NEAR_MISSES = {  # allowed names with ordinary values: recorded as they are
    "MASTER_ADDR": "node-0.cluster.local", "HCCL_IF_IP": "fe80::1%eth0", "OMP_NUM_THREADS": "8",
    "CUDA_VISIBLE_DEVICES": "GPU-8f3c1e7a-1234-5678-9abc-def012345678,1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,garbage_collection_threshold:0.6,max_split_size_mb:512",
    "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend_toolkit/8.0.RC2.alpha003/aarch64-linux/lib64",
    "ASCEND_TOOLKIT_HOME": "/home/CI_Runner2/builds/ProjectX/Group7/ascend-toolkit/latest",
    "KMP_AFFINITY": "granularity=fine,compact,1,0", "CPU_AFFINITY_CONF": "1,npu0:0-7",
    "GLOO_SOCKET_IFNAME": "enp129s0f0np0", "TORCHINDUCTOR_COMPILE_THREADS": "16",
}


def test_names_off_the_list_and_token_values_are_never_recorded() -> None:
    allowed = recorded_env({**OFF_LIST, **TOKEN_VALUES, "HOME": "/root"})
    assert allowed.env == {} and SECRET not in json.dumps(allowed.model_dump())
    # withheld counts what a reader would look for: allowed names, noticed prefixes, credential-looking names
    assert allowed.withheld >= len(TOKEN_VALUES) + 5


@pytest.mark.parametrize(("name", "value"), list(NEAR_MISSES.items()))
def test_ordinary_values_of_allowed_names_are_recorded(name: str, value: str) -> None:
    assert recorded_env({name: value}).env == {name: value}


def test_no_allowed_or_passed_name_looks_like_a_credential() -> None:
    assert [n for n in RECORDED_NAMES | TORCH_PASSED if looks_like_credential(n, "")] == []


# ---- read back: a folder written before the rule, or by hand ---------------------------------------------------

def planted_folder(root: Path) -> Path:
    """A result folder whose results.jsonl holds every planted variable, as an older perfbench or a hand edit
    would have left it (written around the models, which would filter it)."""
    folder = root / "planted"
    runs = [run_result(f"r{i}", samples={"tpot_ms": [1.0, 1.1, 1.05], "ttft_ms": [5.0, 5.2, 5.1]},
                       summary={"tpot_ms_median": 1.05, "ttft_ms_median": 5.1}, env={"torch": "2.13.0"})
            for i in range(2)]
    write_results(folder, runs)
    lines = []
    for line in (folder / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        record["env"]["env"] = {**OFF_LIST, **TOKEN_VALUES, "OMP_PROC_BIND": "close"}
        lines.append(json.dumps(record))
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    assert SECRET in (folder / "results.jsonl").read_text()
    return folder


def files_holding(secret: str, *roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*")
            if p.is_file() and p.name != "results.jsonl" and secret.encode() in p.read_bytes()]


def test_an_older_record_is_filtered_when_read_and_counts_what_it_lost(tmp_path: Path) -> None:
    env = Environment.model_validate({"env": {"OMP_PROC_BIND": "close", **OFF_LIST}})
    assert env.env == {"OMP_PROC_BIND": "close"} and env.env_withheld == len(OFF_LIST)
    (run,) = load_results(planted_folder(tmp_path))[:1]
    assert run.env.env == {"OMP_PROC_BIND": "close"}
    assert run.env.env_withheld == len(OFF_LIST) + len(TOKEN_VALUES)


def test_a_report_and_a_baseline_of_a_planted_folder_hold_no_credential(tmp_path: Path) -> None:
    folder = planted_folder(tmp_path)
    report = CliRunner().invoke(main, ["report", str(folder)])
    assert report.exit_code == 0, report.output
    saved = CliRunner().invoke(main, ["baseline", "save", str(folder), str(tmp_path / "baseline")])
    assert saved.exit_code == 0, saved.output
    assert (folder / "report.html").is_file() and (tmp_path / "baseline" / "baseline.json").is_file()
    assert files_holding(SECRET, folder, tmp_path / "baseline") == []
    # the near miss: the allowed, ordinary variable does reach the report and the baseline
    assert files_holding("OMP_PROC_BIND", folder / "report.html", tmp_path / "baseline")
    for name in OFF_LIST:
        assert files_holding(name, folder / "report.html", tmp_path / "baseline") == [], name


# ---- the worker's environment, which torch copies into the compile cache ----------------------------------------

def test_the_worker_inherits_no_unlisted_torch_name_and_keeps_the_listed_ones() -> None:
    base = {**OFF_LIST, "TORCH_LOGS": "+dynamo", "TRITON_CACHE_DIR": "/tmp/triton",
            "TORCHINDUCTOR_COMPILE_THREADS": TOKEN_VALUES["TORCHINDUCTOR_COMPILE_THREADS"],
            "TORCH_MADE_UP_SETTING": "1", "PATH": os.environ.get("PATH", "")}
    spec = RunSpec(run_id="r", scenario="s", env={"TORCHINDUCTOR_EPILOGUE_FUSION": "0",
                                                  "TORCH_SCENARIO_BEARER": f"Bearer {SECRET}"})
    env = child_env(spec, base)
    copied = {k for k in env if any(w in k for w in ("TORCH", "DYNAMO", "INDUCTOR", "TRITON"))}
    assert copied == {"TORCH_LOGS", "TRITON_CACHE_DIR", "TORCHINDUCTOR_EPILOGUE_FUSION"}
    assert "TORCH_MADE_UP_SETTING" not in env  # inherited and off the list: out, however harmless it looks
    assert env["TORCHINDUCTOR_EPILOGUE_FUSION"] == "0"  # the scenario's own setting passes
    assert env["SLACK_WEBHOOK_URL"] == OFF_LIST["SLACK_WEBHOOK_URL"]  # torch does not copy it: not its concern


def test_torch_s_own_repro_text_of_the_worker_env_holds_no_credential() -> None:
    # what torch writes into the compile cache (torch/_dynamo/debug_utils.py), run on the worker's environment
    debug_utils = pytest.importorskip("torch._dynamo.debug_utils")
    base = {**OFF_LIST, **TOKEN_VALUES, "TORCH_LOGS": "+dynamo"}
    with mock.patch.dict(os.environ, child_env(RunSpec(run_id="r", scenario="s"), base), clear=True):
        text = debug_utils.generate_env_vars_string()
    assert "TORCH_LOGS" in text and SECRET not in text
    with mock.patch.dict(os.environ, base, clear=True):  # the near miss: unfiltered, torch writes it
        assert SECRET in debug_utils.generate_env_vars_string()


def test_the_ab_worker_starts_without_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: dict[str, Any] = {}

    class Recorder:
        def __init__(self, command: Any, env: dict[str, str], log_path: Path, cwd: Path | None = None) -> None:
            started["env"] = env

    monkeypatch.setattr(ab, "WorkerProcess", Recorder)
    for name, value in {**OFF_LIST, "TORCH_LOGS": "+dynamo"}.items():
        monkeypatch.setenv(name, value)
    ab.start_worker([], tmp_path / "specs.json", tmp_path / "out", tmp_path / "log" / "w.log", None)
    env = started["env"]
    assert "TORCH_BEARER" not in env and "TRITON_UPLOAD_URL" not in env and env["TORCH_LOGS"] == "+dynamo"
    assert env["TORCHINDUCTOR_CACHE_DIR"]  # set by ab itself after the filter


def test_torch_copied_names_are_judged_by_list_and_value() -> None:
    environ = {"TORCH_BEARER": "x", "TORCH_LOGS": "+dynamo", "TORCH_LOGS_OUT": f"ghp_{SECRET}",
               "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "MY_TORCHY_THING": "1", "HOME": "/root"}
    assert torch_copied_credentials(environ) == ["MY_TORCHY_THING", "TORCH_BEARER", "TORCH_LOGS_OUT"]
    # a scenario's own name passes unless it is credential-shaped by name (BEARER) or value (ghp_)
    chosen = {"MY_TORCHY_THING", "TORCH_BEARER", "TORCH_LOGS_OUT"}
    assert torch_copied_credentials(environ, chosen) == ["TORCH_BEARER", "TORCH_LOGS_OUT"]


# ---- the ab worker's difference lines ----------------------------------------------------------------------------

def test_a_difference_line_shows_no_unlisted_value() -> None:
    assert _shown_env("OMP_NUM_THREADS", "4") == "4"
    shown = _shown_env("TORCH_BEARER", SECRET)
    assert SECRET not in shown and shown.startswith("<withheld ")
    assert shown == _shown_env("TORCH_BEARER", SECRET) != _shown_env("TORCH_BEARER", SECRET + "x")
    assert SECRET not in _shown_env("MASTER_ADDR", TOKEN_VALUES["MASTER_ADDR"])
