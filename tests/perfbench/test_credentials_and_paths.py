"""Credentials never reach what perfbench writes (results, reports, CSVs, baselines, verify bundles), and a path is
data: a run into `--out "dir with space/ü"` measures what a run into a plain folder measures.

One end-to-end sweep serves both: a tiny run that compiles (fused_rmsnorm, 1 layer) into a folder with a space and
a non-ASCII name, with twenty-five credential-shaped variables set; then `baseline save`, an A/A `ab` job and a quick
emulated `verify` (environment item only) under the same variables. (A second sweep into a plain folder once stood
beside it; what it showed, the plan the runner resolved, the spaced run's record holds too: `spec.expected_plan`.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.measure.compile_cache import compile_cache_dir, is_safe
from perfbench.measure.failure_kinds import compile_error_line, of_exception
from perfbench.results import load_results
from perfbench.results.env_allowlist import RECORDED_NAMES, looks_like_credential, recorded_env, withheld_text
from perfbench.results.records import Environment
from perfbench.run.launcher import PROJECT_DIR

SECRET = "s3cr3t-9d41b7"  # every credential's value holds it; no written file may
CREDENTIALS = {
    "HCCL_AUTH_KEY": f"{SECRET}-1", "ASCEND_TOKEN": f"{SECRET}-2", "NCCL_IB_PASS": f"{SECRET}-3",
    "PERFBENCH_HF_TOKEN": f"{SECRET}-4", "GLOO_PAT": f"{SECRET}-5", "OMP_APIPASS": f"{SECRET}-6",
    "ASCEND_PASSPHRASE": f"{SECRET}-7", "HCCL_PWD": f"{SECRET}-8", "MASTER_ADDR": f"http://u:{SECRET}-9@host",
    "HCCL_SECRET": f"{SECRET}-10", "ASCEND_AUTH": f"{SECRET}-11", "NCCL_CRED": f"{SECRET}-12",
    "GLOO_API_KEY": f"{SECRET}-13", "OMP_TOKEN": f"{SECRET}-14", "PERFBENCH_PASSWORD": f"{SECRET}-15",
    "MKL_SECRET_KEY": f"{SECRET}-16", "PYTORCH_NPU_TOKEN": f"{SECRET}-17", "NCCL_PWD": f"{SECRET}-18",
    "HCCL_BUFFSIZE": f"https://admin:{SECRET}-19@10.0.0.1",  # an allowed name with a credential in its value
    "ASCEND_COOKIE": f"{SECRET}-20",
    # credentials by other names (issue 45): no telling word, or torch's own prefix, or a token in an allowed value
    "TORCH_BEARER": f"{SECRET}-21", "SLACK_WEBHOOK_URL": f"https://hooks.slack.com/services/{SECRET}-22",
    "AZURE_STORAGE_SAS": f"sv=2022-11-02&sig={SECRET}-23", "CI_BEARER": f"{SECRET}-24",
    "GLOO_SOCKET_IFNAME": f"ghs_{SECRET}-25@10.0.0.1",
}
SPACE_DIR = Path("dir with space") / "ü"
COMPILED = {"perfbench": {"device": "cpu", "model": "tiny", "num_layers": 1, "seed": 0,
                          "toggles": {"fused_rope": False, "fused_attention": False, "fused_rmsnorm": True,
                                      "chunk_gdr": False, "mm_all_reduce": False, "moe_dispatch_combine": False,
                                      "graph_mode": False, "merged_projections": False, "grouped_moe": False},
                          "workload": {"batch_sizes": [1], "input_lens": [16], "output_len": 2},
                          "measure": {"warmup": 1, "iterations": 1, "profile": False, "numerics_check": False},
                          "sweep": {"design": "explicit", "runs": [{}]}}}
# the real message of inductor's g++ failure on a cache path with a space (torch 2.13, trimmed Command: line)
GXX_FAILURE = """CppCompileError: C++ compile error

Command:
g++ /tmp/h35 sp/ü/ind/um/cumel3.main.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -O3 -shared -fPIC -o /tmp/h35 sp/ü/ind/um/x.so

Output:
g++: fatal error: input file ‘/tmp/h35’ is the same as output file
compilation terminated.


Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to \
PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"
"""


def written_files(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The compiled run into a spaced --out, a baseline of it, an A/A `ab` job and a verify bundle, all with the
    credentials set."""
    root = tmp_path_factory.mktemp("e2e")
    scenario = root / "compiled.yaml"
    scenario.write_text(json.dumps(COMPILED))
    paths = {"spaced": root / SPACE_DIR, "baseline": root / "baseline",
             "verify": root / "verify" / "bundle", "cache": root / "cache", "ab": root / "ab"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in CREDENTIALS.items():
            mp.setenv(name, value)
        mp.setenv("PERFBENCH_CACHE", str(paths["cache"]))
        mp.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # the sweep's own cache, as a user's run has
        result = CliRunner().invoke(main, ["run", str(scenario), "--out", str(paths["spaced"])])
        assert result.exit_code == 0, result.output[-4000:]
        saved = CliRunner().invoke(main, ["baseline", "save", str(paths["spaced"]), str(paths["baseline"]),
                                         "--allow-dirty"])  # a developer's checkout may have changes
        assert saved.exit_code == 0, saved.output
        ab = CliRunner().invoke(main, ["ab", "HEAD", "HEAD", "--scenario", str(scenario), "--max-time", "15",
                                       "--no-report", "--out", str(paths["ab"])])
        assert ab.exit_code in (0, 3), ab.output[-4000:]
        env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR.absolute()), "OMP_NUM_THREADS": "1"}
        env.pop("PERFBENCH_VERIFY_FAULT", None)
        verify = subprocess.run([sys.executable, "-m", "perfbench.cli", "verify", "--emulate-npu", "910b", "--quick",
                                 "--items", "environment", "--out", str(paths["verify"])], cwd=PROJECT_DIR, env=env,
                                capture_output=True, text=True, timeout=300)
        assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
        paths["verify_stdout"] = root / "verify-output.txt"
        paths["verify_stdout"].write_text(verify.stdout + verify.stderr)
    return paths


class TestCredentials:
    @pytest.mark.slow
    def test_no_credential_reaches_any_written_file(self, sweeps, tmp_path):
        archive = sweeps["verify"].with_name("bundle.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(tmp_path, filter="data")
        files = written_files(sweeps["spaced"], sweeps["baseline"], sweeps["verify"], tmp_path,
                              sweeps["ab"], sweeps["cache"])
        names = {p.name for p in files}
        assert {"results.jsonl", "results.csv", "report.html", "baseline.json", "summary.json", "summary.md",
                "environment.json", "ab.json"} <= names
        assert any(p.suffix == ".csv" and p.parent.name == "report" for p in files)
        for path in [*files, sweeps["verify_stdout"]]:
            assert SECRET.encode() not in path.read_bytes(), path

    @pytest.mark.slow
    def test_what_is_withheld_is_a_count(self, sweeps):
        run = load_results(sweeps["spaced"])[0]
        assert run.env.env_withheld is not None and run.env.env_withheld >= len(CREDENTIALS)
        assert "HCCL_BUFFSIZE" not in run.env.env and "MASTER_ADDR" not in run.env.env
        bundle_env = json.loads((sweeps["verify"] / "environment.json").read_text())
        assert bundle_env["env_withheld"] >= len(CREDENTIALS)
        assert not set(CREDENTIALS) & set(bundle_env["env"])
        baseline = json.loads((sweeps["baseline"] / "baseline.json").read_text())
        assert all(not set(CREDENTIALS) & set(e["env"]["env"]) for e in baseline["environments"])

    def test_the_allow_list_is_exact_names_with_values_checked(self):
        allowed = recorded_env({"OMP_NUM_THREADS": "4", "HCCL_BUFFSIZE": "200", "HCCL_NEW_KNOB": "1",
                                "MASTER_ADDR": "node0", "HOME": "/root", **CREDENTIALS})
        # CREDENTIALS' HCCL_BUFFSIZE and MASTER_ADDR (passwords in URLs) replace the plain ones above
        assert allowed.env == {"OMP_NUM_THREADS": "4"}
        assert allowed.withheld == len(CREDENTIALS) + 1  # + HCCL_NEW_KNOB: under a prefix, not on the list
        assert withheld_text(allowed.withheld) == "26 variables withheld" and withheld_text(1) == "1 variable withheld"
        assert recorded_env({"ASCEND_HOME_PATH": "/usr/local/Ascend"}).env  # PATH is not PAT

    def test_no_allowed_name_looks_like_a_credential(self):
        assert [n for n in RECORDED_NAMES if looks_like_credential(n, "")] == []

    def test_an_older_record_loses_its_credentials_when_read(self):
        env = Environment.model_validate({"env": {"OMP_NUM_THREADS": "2", "HCCL_PWD": SECRET}})
        assert env.env == {"OMP_NUM_THREADS": "2"} and env.env_withheld == 1
        assert SECRET not in json.dumps(env.model_dump())


class TestPaths:
    @pytest.mark.slow
    def test_a_spaced_out_folder_runs_the_plan_the_runner_resolved(self, sweeps):
        (spaced,) = load_results(sweeps["spaced"])
        assert spaced.status == "ok" and not spaced.failure
        # the plan the runner resolved from the scenario alone, before any folder was named, is what the worker ran
        assert spaced.spec.expected_plan and spaced.plan.states() == spaced.spec.expected_plan
        assert spaced.plan.effective_on() == {"fused_rmsnorm"}  # the compiled kernel ran, from the spaced path
        assert spaced.summary.compile_cache_warm == 0.0  # its kernels were compiled, into a cold cache
        assert (sweeps["spaced"] / "report.html").is_file()

    def test_the_compile_cache_path_has_no_space(self, tmp_path, monkeypatch):
        monkeypatch.setenv("PERFBENCH_CACHE", str(tmp_path / "cache"))
        assert compile_cache_dir(tmp_path / "plain") == (tmp_path / "plain" / "compile_cache" / "inductor")
        spaced = compile_cache_dir(tmp_path / SPACE_DIR)
        assert is_safe(spaced) and " " not in str(spaced) and spaced.is_relative_to(tmp_path / "cache")
        assert compile_cache_dir(tmp_path / SPACE_DIR) == spaced  # a resumed sweep finds its kernels again
        assert compile_cache_dir(tmp_path / "other dir") != spaced

    def test_a_compile_failure_shows_the_compilers_error_and_the_log(self, tmp_path):
        assert compile_error_line(GXX_FAILURE) == \
            "CppCompileError: g++: fatal error: input file ‘/tmp/h35’ is the same as output file"
        reason = of_exception(RuntimeError(GXX_FAILURE), tmp_path / "worker.log").reason
        assert "is the same as output file" in reason and str(tmp_path / "worker.log") in reason
        assert "TORCHDYNAMO_VERBOSE" not in of_exception(RuntimeError("boom\n\nSet TORCHDYNAMO_VERBOSE=1 x")).reason


def test_a_worker_goes_without_the_credentials_torch_would_copy_into_its_compile_cache():
    from perfbench.results import RunSpec
    from perfbench.run.launcher import child_env

    env = child_env(RunSpec(run_id="r", scenario="s"), base={**CREDENTIALS, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"})
    assert "PYTORCH_NPU_TOKEN" not in env and env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"
    assert "TORCH_BEARER" not in env  # off the list: no telling word needed
    assert env["HCCL_AUTH_KEY"] == CREDENTIALS["HCCL_AUTH_KEY"]  # a real run may need it (HCCL's own security)
