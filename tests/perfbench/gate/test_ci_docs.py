"""docs/ci.md: both CI examples are valid YAML, and every perfbench command and option they use exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import yaml

from perfbench.cli import main

DOC = Path(__file__).resolve().parents[3] / "docs" / "ci.md"


def _examples() -> list[object]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)]


def _commands(node: object) -> list[str]:
    """Every string in the YAML that runs perfbench (a folded `run: >` is one line)."""
    if isinstance(node, dict):
        return [c for v in node.values() for c in _commands(v)]
    if isinstance(node, list):
        return [c for v in node for c in _commands(v)]
    return [node.strip()] if isinstance(node, str) and node.strip().startswith("perfbench ") else []


def _check(command: str) -> None:
    words = shlex.split(command.replace("${{", "X").replace("}}", "X"))[1:]
    cmd: click.Command = main
    while isinstance(cmd, click.Group):
        name = words.pop(0)
        assert name in cmd.commands, f"{command}: no command {name!r}"
        cmd = cmd.commands[name]
    known = {opt for param in cmd.params for opt in getattr(param, "opts", [])}
    used = [w for w in words if w.startswith("--")]
    assert used and all(opt in known for opt in used), (command, sorted(set(used) - known))


def test_both_examples_are_yaml_and_name_only_existing_commands():
    github, gitlab = _examples()
    assert "jobs" in github and "ab" in github["jobs"]  # a GitHub Actions workflow
    assert gitlab["perf"]["stage"] == "test" and gitlab["perf"]["script"]  # a GitLab CI job
    for example in (github, gitlab):
        commands = _commands(example)
        assert any(c.startswith("perfbench ab ") for c in commands)
        assert any(c.startswith("perfbench gate ") for c in commands)
        for command in commands:
            _check(command)


def test_the_command_check_can_fail():
    for wrong in ("perfbench gat --current x", "perfbench gate --current x --nope y"):
        try:
            _check(wrong)
        except AssertionError:
            continue
        raise AssertionError(f"accepted {wrong}")
