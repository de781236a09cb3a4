"""Aliases of a long string: few values, much text. The loader counts the scalar text an alias expands to
(MAX_YAML_EXPANDED_BYTES), not only the number of values, so a 1.5 MB scenario cannot become gigabytes of
scenario.json; `--dry-run` refuses it in one line, before a folder is made."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.config.schema import MAX_YAML_BYTES, MAX_YAML_EXPANDED_BYTES, MAX_YAML_VALUES, parse_yaml
from perfbench.errors import UserError
from tests.cli_helpers import one_error_line

TAIL = ("perfbench:\n  device: cpu\n  dtype: float32\n  model: tiny\n  num_layers: 2\n"
        "  workload: {batch_sizes: [1], input_lens: [32], output_len: 4}\n  measure: {warmup: 1, iterations: 3}\n"
        "  sweep: {design: explicit, runs: [{}]}\n")


def _recipe_bomb(chars: int, aliases: int) -> str:
    """One `chars`-long string anchored in recipe_extras and `aliases` aliases of it in a list."""
    return (f'model_config:\n  recipe_extras:\n    s: &s "{"y" * chars}"\n'
            f'    many: [{", ".join(["*s"] * aliases)}]\n' + TAIL)


def test_a_string_alias_bomb_is_refused_by_dry_run_in_one_line(tmp_path: Path) -> None:
    text = _recipe_bomb(200_000, 100)  # 200 KB of document, 20 MB of text once expanded, 102 values
    assert len(text) < MAX_YAML_BYTES and 200_000 * 101 > MAX_YAML_EXPANDED_BYTES
    path = tmp_path / "strbomb.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    line = one_error_line(CliRunner().invoke(main, ["run", str(path), "--dry-run", "--out", str(out)]))
    assert line.startswith("error: strbomb.yaml: ") and "MB of text through aliases" in line
    assert "model_config.recipe_extras.many" in line
    assert not out.exists()


def test_a_two_level_string_bomb_under_the_value_cap_is_refused() -> None:
    """300 x 300 aliases of a 1 KB string: 90,000 values (under MAX_YAML_VALUES), 90 MB of text."""
    text = (f'env:\n  s: &s "{"z" * 1000}"\n  row: &row [{", ".join(["*s"] * 300)}]\n'
            f'  grid: [{", ".join(["*row"] * 300)}]\n')
    assert 300 * 300 + 400 < MAX_YAML_VALUES
    with pytest.raises(UserError, match=r"^env.grid \(line 4\): expands to more than \d+ MB of text") as err:
        parse_yaml(text)
    assert "\n" not in str(err.value)


def test_long_strings_without_aliases_and_a_few_aliases_of_them_are_read() -> None:
    long = "w" * (MAX_YAML_BYTES // 2 - 100)  # half the document cap in one scalar
    raw = parse_yaml(f'a: &a "{long}"\nb: [*a, *a, *a]\n')
    assert raw["b"] == [long, long, long]
