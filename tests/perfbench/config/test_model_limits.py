"""Scenario validation that knows the model: positions, layer counts, absurd shapes, missing or empty
checkpoints, and scenario paths that are not files. Every refusal is exit 2 and one `error:` line, in
`--dry-run` as in a real run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from model.config import Qwen3_5MoeTextConfig
from perfbench.cli import main
from perfbench.config.scenario import load_scenario
from perfbench.errors import UserError

TINY = Qwen3_5MoeTextConfig.tiny()


def dry_run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["run", *args, "--dry-run"])
    return result.exit_code, result.stdout, result.stderr


def assert_one_error_line(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def checkpoint(folder: Path, **fields: object) -> Path:
    """A checkpoint folder holding only the tiny preset's config.json (with `fields` changed)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {**TINY.to_hf_dict(), **fields}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# ---- positions ----------------------------------------------------------------------------------------------
def test_a_billion_token_prompt_is_refused_by_dry_run_naming_max_position_embeddings():
    code, out, err = dry_run("ci_smoke", "--set", "perfbench.workload.input_lens=[1000000000]")
    assert_one_error_line(code, err, "perfbench.workload.input_lens[0]",
                          f"max_position_embeddings {TINY.max_position_embeddings}")
    assert "run id" not in out  # refused before the plans are printed


def test_prompt_plus_output_may_reach_max_position_embeddings_but_not_pass_it():
    limit, output = TINY.max_position_embeddings, 8
    sets = ["perfbench.model=tiny", f"perfbench.workload.output_len={output}"]
    load_scenario("ci_smoke", [*sets, f"perfbench.workload.input_lens=[16, {limit - output}]"])
    with pytest.raises(UserError, match=r"input_lens\[1\]: .* = " + str(limit + 1)):
        load_scenario("ci_smoke", [*sets, f"perfbench.workload.input_lens=[16, {limit - output + 1}]"])


def test_the_checkpoints_own_max_position_embeddings_is_the_limit(tmp_path):
    folder = checkpoint(tmp_path / "ckpt", max_position_embeddings=64)
    sets = [f"perfbench.model={folder}", "perfbench.with_ckpt=false", "perfbench.workload.output_len=8"]
    load_scenario("ci_smoke", [*sets, "perfbench.workload.input_lens=[56]"])
    code, _, err = dry_run("ci_smoke", *(x for s in sets for x in ("--set", s)),
                           "--set", "perfbench.workload.input_lens=[57]")
    assert_one_error_line(code, err, "max_position_embeddings 64", "65 positions")


# ---- layer counts -------------------------------------------------------------------------------------------
def test_more_layers_than_the_preset_has_are_refused_naming_the_key():
    layers = TINY.num_hidden_layers
    assert load_scenario("ci_smoke", [f"perfbench.num_layers={layers}"]).perfbench.num_layers == layers
    code, _, err = dry_run("ci_smoke", "--set", f"perfbench.num_layers={layers + 1}")
    assert_one_error_line(code, err, f"perfbench.num_layers: {layers + 1} layers", f"has {layers}")


def test_the_recipe_layer_override_is_checked_against_the_checkpoint(tmp_path):
    folder = checkpoint(tmp_path / "ckpt", num_hidden_layers=4, layer_types=None)
    scenario = tmp_path / "recipe.yaml"
    scenario.write_text(f"model_config: {{model_path: {folder}, with_ckpt: false, "
                        f"custom_params: {{num_hidden_layers: 5}}}}\n")
    code, _, err = dry_run(str(scenario))
    assert_one_error_line(code, err, "model_config.custom_params.num_hidden_layers: 5 layers", "has 4")


# ---- absurd shapes ------------------------------------------------------------------------------------------
def test_a_batch_of_ten_to_the_twenty_is_refused_in_one_line_without_a_model():
    code, _, err = dry_run("ci_smoke", "--set", f"perfbench.workload.batch_sizes=[2, {10**20}]")
    assert_one_error_line(code, err, "perfbench.workload.batch_sizes[1]", "tokens in one batch")
    # the bound needs no model: a missing checkpoint does not let the shape through first
    with pytest.raises(UserError, match=r"batch_sizes\[0\]"):
        load_scenario("ci_smoke", ["perfbench.model=/no/such/ckpt", f"perfbench.workload.batch_sizes=[{10**20}]"])


def test_an_output_len_of_ten_to_the_twenty_four_names_the_lengths():  # one more case of the class
    code, _, err = dry_run("ci_smoke", "--set", f"perfbench.workload.output_len={10**24}")
    assert_one_error_line(code, err, "perfbench.workload", "output_len", "in one sequence")


# ---- missing or empty checkpoints ---------------------------------------------------------------------------
def test_missing_and_empty_checkpoint_folders_fail_the_dry_run(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for model, what in ((tmp_path / "absent", "not found"), (empty, "has no config.json")):
        code, out, err = dry_run("ci_smoke", "--set", f"perfbench.model={model}")
        assert_one_error_line(code, err, f"perfbench.model: {model} {what}")
        assert "run id" not in out


def test_a_checkpoint_without_weights_fails_the_dry_run_unless_dummy_weights_are_asked_for(tmp_path):
    folder = checkpoint(tmp_path / "ckpt")
    code, _, err = dry_run("ci_smoke", "--set", f"perfbench.model={folder}", "--set", "perfbench.with_ckpt=true")
    assert_one_error_line(code, err, "no *.safetensors weights", "perfbench.with_ckpt=false")
    code, out, err = dry_run("ci_smoke", "--set", f"perfbench.model={folder}", "--set", "perfbench.with_ckpt=false")
    assert code == 0 and "run id" in out, err
    (folder / "model.safetensors").write_bytes(b"")  # present; its contents are the loader's business
    code, out, err = dry_run("ci_smoke", "--set", f"perfbench.model={folder}", "--set", "perfbench.with_ckpt=true")
    assert code == 0 and "run id" in out, err


# ---- scenario paths -----------------------------------------------------------------------------------------
def test_a_directory_given_as_the_scenario_says_it_is_a_directory(tmp_path):
    (tmp_path / "mine.yaml").write_text("perfbench: {model: tiny}\n")
    code, _, err = dry_run(str(tmp_path))
    assert_one_error_line(code, err, "is a directory", "mine.yaml")
    assert "no such YAML file" not in err


@pytest.mark.timeout(10)
def test_a_fifo_given_as_the_scenario_is_refused_without_blocking(tmp_path):  # one more case of the class
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)  # reading it would block forever: nobody writes
    code, _, err = dry_run(str(fifo))
    assert_one_error_line(code, err, "is not a regular file")
