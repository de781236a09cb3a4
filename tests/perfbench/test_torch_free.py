"""The analysis commands (`gate`, `report`, `compare`, `trace`) and their tests run where torch cannot be
imported: a result folder can be analysed on a machine without torch."""

from __future__ import annotations

import os
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
# The tests of the analysis commands, and of the record format they read.
ANALYSIS_TESTS = ("tests/perfbench/gate", "tests/perfbench/report", "tests/perfbench/analysis",
                  "tests/perfbench/profiling/test_analyze_trace.py", "tests/perfbench/test_results.py")


def no_torch_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    path = [str(site), str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


@pytest.mark.slow
def test_analysis_commands_and_their_tests_run_without_torch(tmp_path):
    env = no_torch_env(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "torch is blocked" in probe.stderr  # the blocker is in force
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
                          *ANALYSIS_TESTS], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "error" not in run.stdout.splitlines()[-1]
