"""`perfbench ab` end to end on real refs of this repository: a planted 2x slowdown and an A/A pair.

What is tested is the decision, not timing precision: the band is wide (+-25%) so that a 2x slowdown is
"slower" and no change is "same" on any host, busy or not, with the fewest pairs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))
from planted import commit_plant  # noqa: E402

SCENARIO = ["--scenario", "ci_smoke", "--set", "perfbench.sweep.design=none", "--set", "perfbench.sweep.runs=[]",
            "--set", "perfbench.num_layers=2", "--set", "perfbench.workload.input_lens=[64]",
            "--set", "perfbench.workload.output_len=4", "--threshold", "0.25", "--no-report"]
# one worker generation of five pairs; TWO_GENERATIONS replaces the workers once
FAST = [*SCENARIO, "--min-pairs", "5", "--pairs-per-process", "5", "--max-time", "150"]
TWO_GENERATIONS = [*SCENARIO, "--min-pairs", "6", "--pairs-per-process", "3", "--max-time", "150"]



def _ab(*args: str, out: Path, settings: list[str] = FAST) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfbench.cli", "ab", *args, *settings, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def _gate(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfbench.cli", "gate", "--current", str(folder)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.serial  # timed pairs: alone on the machine
def test_a_planted_2x_slowdown_is_slower_and_the_gate_fails_it(tmp_path: Path) -> None:
    parent, planted = commit_plant(REPO, 1.0)
    done = _ab(parent, planted, out=tmp_path / "ab", settings=TWO_GENERATIONS)
    assert done.returncode == 1, done.stderr[-3000:]
    record = json.loads((tmp_path / "ab" / "ab.json").read_text())
    (verdicts,) = record["verdicts"].values()
    assert {m: v["verdict"] for m, v in verdicts.items()} == {"ttft_ms": "slower", "tpot_ms": "slower"}
    assert all(v["ratio"] > 1.5 for v in verdicts.values()), verdicts  # the direction and more than the band
    assert record["base"]["sha"] == parent and record["head"]["sha"] == planted
    # each arm imported its own checkout's model package (worktrees), not this one
    assert record["base"]["model"] != record["head"]["model"] != str(REPO / "model")
    assert len(record["pairs"]) >= 6 and {p["generation"] for p in record["pairs"]} >= {0, 1}
    gate = _gate(tmp_path / "ab")
    assert gate.returncode == 1 and "FAIL ttft_ms" in gate.stdout and "slower against +-25%" in gate.stdout


@pytest.mark.slow
@pytest.mark.serial  # timed pairs: alone on the machine
def test_a_commit_against_itself_is_same_and_the_gate_passes_it(tmp_path: Path) -> None:
    parent, empty = commit_plant(REPO, 0.0)
    done = _ab(parent, empty, out=tmp_path / "aa")
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "aa" / "ab.json").read_text())
    (verdicts,) = record["verdicts"].values()
    assert {v["verdict"] for v in verdicts.values()} == {"same"}
    assert record["stopped"] == "decided"
    assert _gate(tmp_path / "aa").returncode == 0


def test_bad_refs_and_settings_are_one_line_errors(tmp_path: Path) -> None:
    for args, expected in ((["no-such-ref"], "base arm: 'no-such-ref' is not a commit"),
                           (["HEAD", "--max-time", "0"], "--max-time: must be positive")):
        done = subprocess.run([sys.executable, "-m", "perfbench.cli", "ab", *args, "--out", str(tmp_path / "x")],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and expected in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.npu_emulated
@pytest.mark.slow
def test_ab_runs_the_npu_code_paths_under_the_emulator_and_says_so(tmp_path: Path) -> None:
    # the verdict is not the question here (an A/A under a wide band): it runs with the parallel tests
    # A/A on the emulated 910b: the arms take the NPU plan (fused ops bound to emulated torch_npu calls)
    # one worker generation (the cap stops it there): two would be needed for a verdict, which is not the question
    one_generation = [*SCENARIO, "--min-pairs", "3", "--pairs-per-process", "3", "--max-time", "5"]
    args = [sys.executable, "-m", "perfbench.cli", "ab", "HEAD", "--emulate-npu", "910b", *one_generation,
            "--set", "perfbench.toggles.fused_rmsnorm=true", "--out", str(tmp_path / "npu")]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr[-3000:]  # inconclusive: one generation decides nothing
    assert "emulated npu (910b): CPU timings" in done.stdout
    record = json.loads((tmp_path / "npu" / "ab.json").read_text())
    assert record["emulation"] == "emulated npu (910b)"
    results = [json.loads(line) for line in (tmp_path / "npu" / "results.jsonl").read_text().splitlines()]
    assert {r["spec"]["device"] for r in results} == {"npu"}
    assert all(r["env"]["emulation"] == "emulated npu (910b)" for r in results)
    assert all(r["plan"]["fused_rmsnorm"]["state"] == "on" for r in results)
    assert not any(v["verdict"] in ("slower", "faster") for per in record["verdicts"].values() for v in per.values())
