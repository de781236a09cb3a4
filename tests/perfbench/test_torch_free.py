"""The analysis commands (`gate`, `report`, `compare`, `trace`, `diff`, `history`) run where torch cannot be
imported: a result folder can be analysed on a machine without torch. Checked by importing every module of the
offline stages with torch blocked, and by one call of each command on real folders and traces."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCKER = textwrap.dedent('''
    import sys

    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"torch is blocked in this process ({name})")
            return None

    sys.meta_path.insert(0, _NoTorch())
''')
OFFLINE_PACKAGES = ("perfbench.analysis", "perfbench.gate", "perfbench.report", "perfbench.profiling",
                    "perfbench.history")
NEEDS_TORCH = ("perfbench.profiling.capture",)  # takes a trace: part of a run, not of its analysis
IMPORT_ALL = textwrap.dedent(f'''
    import importlib, pkgutil
    names = ["perfbench.results", "perfbench.cli"]
    for package in {OFFLINE_PACKAGES!r}:
        module = importlib.import_module(package)
        names += [info.name for info in pkgutil.walk_packages(module.__path__, package + ".")]
    names = [n for n in names if n not in {NEEDS_TORCH!r}]
    for name in names:
        importlib.import_module(name)
    print(len(names), "modules")
''')


@pytest.fixture(scope="module")
def no_torch_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(BLOCKER)
    path = [str(site), str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "torch is blocked" in probe.stderr  # the blocker is in force
    return env


def _perfbench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfbench.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_every_offline_module_imports_without_torch(no_torch_env: dict[str, str]):
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], cwd=REPO, env=no_torch_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[0]) > 40


def test_each_analysis_command_runs_without_torch(no_torch_env: dict[str, str], tmp_path: Path):
    folder = tmp_path / "smoke"
    shutil.copytree(REPO / "baselines" / "ci_smoke", folder)
    gate = _perfbench(no_torch_env, "gate", "--baseline", str(folder), "--current", str(folder))
    assert gate.returncode == 0 and "gate: PASS" in gate.stdout, gate.stdout[-2000:] + gate.stderr[-2000:]
    report = _perfbench(no_torch_env, "report", str(folder))
    assert report.returncode == 0 and (folder / "report.html").is_file(), report.stderr[-2000:]
    compare = _perfbench(no_torch_env, "compare", str(folder), str(folder), "--out", str(tmp_path / "cmp"))
    assert compare.returncode == 0 and (tmp_path / "cmp" / "compare.html").is_file(), compare.stderr[-2000:]
    trace = _perfbench(no_torch_env, "trace", str(REPO / "tests/fixtures/cpu_traces/eager_all_on.json.gz"),
                       "--out", str(tmp_path / "tables"))
    assert trace.returncode == 0 and (tmp_path / "tables" / "per_op.csv").is_file(), trace.stderr[-2000:]
    db = REPO / "tests/fixtures/npu_profiler/msinsight_pytorch_db_level1"
    diff = _perfbench(no_torch_env, "diff", str(REPO / "tests/fixtures/npu_profiler/msinsight_pytorch_text_level1"),
                      str(db), "--out", str(tmp_path / "diff"))
    assert diff.returncode == 0 and (tmp_path / "diff" / "diff.csv").is_file(), diff.stderr[-2000:]
