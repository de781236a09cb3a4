"""A scenario's own values never carry a credential into what perfbench writes: its `env:` (per sweep and per run),
`recipe_extras` keys named like credentials, and values of a credential shape (a URL with user:password@) are
masked by one rule (results/env_allowlist.py `masked_values`) in scenario.json, sweep.json, runs/*/spec.json,
runs/*/result.json, results.jsonl, results.csv, report.html, the report's CSVs and a saved baseline; a folder
written before the rule loses them when read (report, baseline save)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.results.env_allowlist import MASK, masked_values

REPO = Path(__file__).resolve().parents[2]
PLANTED = {
    "sweep_env": "hf_PLANTEDa1b2c3d4e5", "dsn": "PLANTEDdsnpw", "run_env": "PLANTEDrun17",
    "extras_token": "hf_PLANTEDx3abcdefgh", "extras_key": "PLANTEDapikey3b", "dataset": "PLANTEDs3pw",
    "unlisted": "PLANTEDplainvalue",
}
SCENARIO = {
    "model_config": {"recipe_extras": {"hf_token": PLANTED["extras_token"], "api_key": PLANTED["extras_key"]}},
    "data_config": {"dataset_path": f"s3://AKIAEXAMPLE:{PLANTED['dataset']}@bucket/x"},
    "perfbench": {
        "device": "cpu", "model": "tiny", "num_layers": 1, "seed": 0,
        "toggles": {"fused_rope": False, "fused_attention": False, "fused_rmsnorm": False, "chunk_gdr": False,
                    "mm_all_reduce": False, "moe_dispatch_combine": False, "graph_mode": False,
                    "merged_projections": False, "grouped_moe": False},
        "env": {"HF_TOKEN": PLANTED["sweep_env"], "MY_DB_URL": f"postgresql://u:{PLANTED['dsn']}@db/x",
                "MY_PLAIN_FLAG": PLANTED["unlisted"], "OMP_NUM_THREADS": "1"},
        "workload": {"batch_sizes": [1], "input_lens": [8], "output_len": 2},
        "measure": {"warmup": 1, "iterations": 1, "profile": False, "numerics_check": False},
        "sweep": {"design": "explicit", "runs": [{"env": {"RUN_SECRET_TOKEN": PLANTED["run_env"]}}]},
    },
}


def _leaks(*roots: Path) -> list[str]:
    files = [p for root in roots for p in root.rglob("*") if p.is_file()]
    assert files
    return [f"{p}: {name}" for p in files for name, value in PLANTED.items() if value.encode() in p.read_bytes()]


def test_the_masking_rule():
    masked = masked_values(SCENARIO)
    assert masked["perfbench"]["env"] == {"HF_TOKEN": MASK, "MY_DB_URL": MASK, "MY_PLAIN_FLAG": MASK,
                                          "OMP_NUM_THREADS": "1"}
    assert masked["perfbench"]["sweep"]["runs"] == [{"env": {"RUN_SECRET_TOKEN": MASK}}]
    assert masked["model_config"]["recipe_extras"] == {"hf_token": MASK, "api_key": MASK}
    assert masked["data_config"]["dataset_path"] == MASK
    # words, not substrings: these are settings, not credentials
    kept = {"max_new_tokens": 8, "design": "explicit", "keys_seen": 2, "dataset_path": "/data/x", "auth": False}
    assert masked_values(kept) == kept


@pytest.mark.slow
def test_a_run_and_its_baseline_hold_no_scenario_credential(tmp_path: Path):
    scenario = tmp_path / "secret.yaml"
    scenario.write_text(json.dumps(SCENARIO))
    out, saved = tmp_path / "out", tmp_path / "bl"
    result = CliRunner().invoke(main, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 0, result.output[-3000:]
    assert not any(value in result.output for value in PLANTED.values())
    done = CliRunner().invoke(main, ["baseline", "save", str(out), str(saved), "--allow-dirty"])
    assert done.exit_code == 0, done.output
    names = {p.name for p in out.rglob("*") if p.is_file()}
    assert {"results.jsonl", "results.csv", "report.html", "scenario.json", "sweep.json", "spec.json",
            "result.json"} <= names
    assert _leaks(out, saved) == []
    recorded = json.loads((out / "scenario.json").read_text())["perfbench"]["env"]
    assert recorded == {"HF_TOKEN": MASK, "MY_DB_URL": MASK, "MY_PLAIN_FLAG": MASK, "OMP_NUM_THREADS": "1"}
    # the same settings resume: the masked identity matches itself
    again = CliRunner().invoke(main, ["run", str(scenario), "--out", str(out), "--resume"])
    assert again.exit_code == 0, again.output[-3000:]


def test_a_folder_written_before_the_rule_loses_its_credentials_when_read(tmp_path: Path):
    folder = tmp_path / "old"
    shutil.copytree(REPO / "baselines" / "ci_smoke", folder)
    (folder / "baseline.json").unlink()
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]
    for record in records:
        record["spec"]["env"] = {"HF_TOKEN": PLANTED["sweep_env"], "OMP_NUM_THREADS": "1"}
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "scenario.json").write_text(json.dumps(SCENARIO))
    for stale in [*folder.glob("report*"), folder / "results.csv"]:
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    report = CliRunner().invoke(main, ["report", str(folder)])
    assert report.exit_code == 0, report.output[-3000:]
    saved = tmp_path / "bl"
    done = CliRunner().invoke(main, ["baseline", "save", str(folder), str(saved), "--allow-dirty"])
    assert done.exit_code == 0, done.output
    written = [folder / "report.html", *(folder / "report").rglob("*.csv"), *saved.rglob("*")]
    assert {p.name for p in written} >= {"report.html", "scenario.csv", "results.jsonl", "scenario.json"}
    leaks = [f"{p}: {n}" for p in written if p.is_file() for n, v in PLANTED.items() if v.encode() in p.read_bytes()]
    assert leaks == []
