"""`perfbench calibrate --from FOLDER`: an earlier A/A ab folder turned into a noise file and a table; a folder that
is not A/A, or has too few epochs, is one line and exit 2. Nothing is timed: the pairs are synthetic."""

from __future__ import annotations

import math

import numpy as np
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.results.noise_record import read_noise
from tests.records_kit import ab_pair, ab_record

SHA = "a" * 40


def _folder(tmp_path, epochs: int, head_sha: str = SHA):
    rng = np.random.default_rng(0)
    pairs = []
    for e in range(epochs):
        for i in range(4):
            base = 100 * math.exp(rng.normal(0, 0.02))
            head = base * math.exp(rng.normal(0, 0.02))
            pairs.append(ab_pair("r1", e, i, base={"ttft_ms": base, "tpot_ms": base / 10},
                                 head={"ttft_ms": head, "tpot_ms": head / 10}))
    record = ab_record(scenario="ci_smoke", base={"ref": "HEAD", "sha": SHA}, head={"ref": "HEAD", "sha": head_sha},
                       settings={"pairs_per_epoch": 4, "max_time_s": 100.0}, startup_s=20.0,
                       cluster_seconds=[3.0] * epochs, pairs=pairs, mode="one process")
    folder = tmp_path / "ab"
    folder.mkdir()
    (folder / "ab.json").write_text(record.model_dump_json())
    return folder


def test_an_a_a_folder_becomes_a_noise_file_and_a_table(tmp_path):
    folder = _folder(tmp_path, 12)
    result = CliRunner().invoke(main, ["calibrate", "--from", str(folder), "--jobs", "100", "--max-time", "60",
                                       "--condition", "synthetic"])
    assert result.exit_code == 0, result.output
    assert "shift  false word  decided  detected" in result.output
    for shift in ("0%", "1%", "2%", "3%", "5%", "10%"):
        assert any(line.strip().startswith(shift) for line in result.output.splitlines())
    assert "this host could detect" in result.output and "variance check: mean t^2" in result.output
    record = read_noise(folder / "noise.json")
    assert len(record.epochs) == 12 and record.tests == ["r1/ttft_ms", "r1/tpot_ms"]
    assert record.detectable is not None and record.detectable.cap_s == 60.0
    assert record.load.condition == "synthetic"


def test_a_job_of_two_commits_or_too_few_epochs_is_refused_in_one_line(tmp_path):
    other = _folder(tmp_path, 12, head_sha="b" * 40)
    result = CliRunner().invoke(main, ["calibrate", "--from", str(other)])
    assert result.exit_code == 2 and "A/A" in result.output and "Traceback" not in result.output
    (tmp_path / "short").mkdir()
    short = _folder(tmp_path / "short", 2)
    result = CliRunner().invoke(main, ["calibrate", "--from", str(short)])
    assert result.exit_code == 2 and "at least 3" in result.output
