"""The one YAML loader (scenarios, gate rules, --set values) under hostile input: size cap, alias bombs,
structures that contain themselves, deep nesting, YAML 1.2 numbers, one parse per document."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from perfbench.cli import main
from perfbench.config.scenario import load_scenario
from perfbench.config.schema import MAX_YAML_BYTES, MAX_YAML_DEPTH, parse_yaml, read_yaml
from perfbench.errors import UserError
from perfbench.gate.rules import load_rules
from perfbench.results import RunSpec, write_results
from tests.cli_helpers import one_error_line
from tests.records_kit import run_result


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """`levels` anchors, each a list of `width` aliases of the one before: width**levels values expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"



def timed_invoke(args: list[str]) -> Result:
    start = time.monotonic()
    result = CliRunner().invoke(main, args)
    assert time.monotonic() - start < 5.0, f"{args[0]} took {time.monotonic() - start:.1f} s"
    return result


def result_folder(path: Path) -> Path:
    spec = RunSpec(run_id="r1", scenario="s")
    write_results(path, [run_result("r1", spec=spec, samples={"tpot_ms": [1.0, 1.1, 0.9]})])
    return path


# ---- alias bombs: refused before anything expands them -------------------------------------------------

def test_alias_bomb_scenario_fails_fast_in_run_dry_run(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("perfbench: {device: cpu}\n" + alias_bomb())
    line = one_error_line(timed_invoke(["run", str(path), "--dry-run"]))
    assert line.startswith("error: bomb.yaml: ") and "aliases" in line


def test_alias_bomb_scenario_fails_fast_in_estimate(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("perfbench: {device: cpu}\n" + alias_bomb())
    line = one_error_line(timed_invoke(["estimate", str(path), "--out", str(tmp_path / "est")]))
    assert line.startswith("error: bomb.yaml: ") and "aliases" in line


def test_alias_bomb_rules_fail_fast_in_gate(tmp_path: Path) -> None:
    folder = result_folder(tmp_path / "res")
    rules = tmp_path / "gate.yaml"
    rules.write_text("rules: [{kind: toggles}]\n" + alias_bomb())
    line = one_error_line(timed_invoke(["gate", "--baseline", str(folder), "--current", str(folder),
                                        "--rules", str(rules)]))
    assert line.startswith("error: gate.yaml: ") and "aliases" in line


def test_aliases_within_the_bound_still_work(tmp_path: Path) -> None:
    """A recipe may share a block through an anchor: that is not refused."""
    raw = parse_yaml("base: &b {x: 1, y: [1, 2]}\none: *b\ntwo: {<<: *b, y: [3]}\n")
    assert raw == {"base": {"x": 1, "y": [1, 2]}, "one": {"x": 1, "y": [1, 2]}, "two": {"x": 1, "y": [3]}}


def test_alias_bomb_in_a_set_value_is_refused() -> None:
    value = "[" + ", ".join(["&a [" + ", ".join(["0"] * 400) + "]"] + ["*a"] * 400) + "]"
    with pytest.raises(UserError, match=r"^--set perfbench.workload.batch_sizes: cannot parse value .*aliases"):
        load_scenario("ci_smoke", [f"perfbench.workload.batch_sizes={value}"])


# ---- structures that contain themselves, deep nesting ---------------------------------------------------

@pytest.mark.parametrize("text", ["a: &a [1, *a]\n", "a: &a {b: *a}\n", "a: &a {b: [{c: *a}]}\n"],
                         ids=["list", "mapping", "nested"])
def test_self_reference_is_one_line_not_a_recursion_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("perfbench: {device: cpu}\n" + text)
    with pytest.raises(UserError) as info:
        load_scenario(str(path))
    msg = str(info.value)
    assert msg.startswith("scenario.yaml: a") and "contains itself" in msg and "\n" not in msg
    result = timed_invoke(["run", str(path), "--dry-run"])
    assert "contains itself" in one_error_line(result)


@pytest.mark.parametrize("depth", [MAX_YAML_DEPTH + 5, 20_000], ids=["over-the-limit", "past-python-recursion"])
def test_deep_nesting_is_one_line(tmp_path: Path, depth: int) -> None:
    rules = tmp_path / "gate.yaml"
    rules.write_text("rules: [{kind: toggles}]\nx: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(UserError, match=r"^gate.yaml: .*nested deeper than 64 levels"):
        load_rules(rules)


# ---- size cap -------------------------------------------------------------------------------------------

def test_document_over_the_size_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("perfbench: {device: cpu}\n" + "# padding\n" * (MAX_YAML_BYTES // 10 + 1))
    assert path.stat().st_size > MAX_YAML_BYTES
    start = time.monotonic()
    with pytest.raises(UserError, match=r"^huge.yaml: larger than the 2 MB limit"):
        load_scenario(str(path))
    assert time.monotonic() - start < 1.0  # refused on its size, not after a parse
    with pytest.raises(UserError, match="limit is 2 MB"):
        parse_yaml("# x\n" * (MAX_YAML_BYTES // 4 + 1))


def test_document_under_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "padded.yaml"
    path.write_text("perfbench: {device: cpu}\n" + "# padding\n" * 1000)
    assert read_yaml(path) == {"perfbench": {"device": "cpu"}}


# ---- YAML 1.2 numbers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [("1e-3", 0.001), ("1.0e3", 1000.0), ("-2E+2", -200.0), ("5e0", 5.0),
                                        (".5", 0.5), ("1.5", 1.5), ("3", 3), ("'1e-3'", "1e-3")])
def test_yaml_1_2_numbers(text: str, value: object) -> None:
    parsed = parse_yaml(f"v: {text}\n")["v"]
    assert parsed == value and type(parsed) is type(value)


def test_exponent_numbers_reach_the_scenario_and_the_rules(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("perfbench: {device: cpu, measure: {target_rel_ci: 2e-2}}\n")
    assert load_scenario(str(path)).perfbench.measure.target_rel_ci == 0.02
    sc = load_scenario(str(path), ["perfbench.measure.max_time_s=1e1"])
    assert sc.perfbench.measure.max_time_s == 10.0
    rules = tmp_path / "gate.yaml"
    rules.write_text("rules: [{kind: timing, metric: tpot_ms, threshold: 5e-2, alpha: 1e-2}]\n")
    rule = load_rules(rules).rules[0]
    assert (rule.threshold, rule.alpha) == (0.05, 0.01)


# ---- one parse per document -----------------------------------------------------------------------------

def test_a_scenario_is_composed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = yaml.composer.Composer.compose_document

    def counting(self: yaml.composer.Composer) -> yaml.Node:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(yaml.composer.Composer, "compose_document", counting)
    path = tmp_path / "s.yaml"
    path.write_text("perfbench: {device: cpu, workload: {batch_sizes: [1, 2]}}\n")
    load_scenario(str(path))
    assert len(calls) == 1
