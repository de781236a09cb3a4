"""Strings read from a file never drive the terminal: control sequences and line breaks are printed escaped
(perfbench/terminal_text.py), and a name that would carry them is refused in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from click.testing import CliRunner

from perfbench.cli import main
from perfbench.terminal_text import escaped, printable
from perfbench.tools.verify.bundle import pack, write_summary
from perfbench.tools.verify.summary import FAIL, Check, ItemResult, Summary
from tests.cli_helpers import one_error_line

REPO = Path(__file__).resolve().parents[2]
FORGED = "result: PASS (0 of 1 items failed); exit code 0"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_escaped_makes_one_visible_line():
    assert escaped("a\x1b[2J\nb\r\tc\x07\x9b\u202ed") == "a\\x1b[2J\\nb\\r\\tc\\x07\\x9b\\u202ed"
    assert escaped("plain text / path_1") == "plain text / path_1"
    assert printable("row 1\nrow\x1b]0;t\x07 2\n") == "row 1\nrow\\x1b]0;t\\x07 2\n"


def _hostile_summary() -> Summary:
    item = ItemResult.of_checks(f"ops\n{FORGED}\n", [Check("k\x1b[31mred", FAIL, op="o\x1b]8;;http://x/\x07p",
                                                           error="boom\x1b]0;pwned\x07")], 1.0)
    return Summary(started="2026-12-01T10:00:00\x1b[2J", platform="910b\x9b", series="A2",
                   device_name="Ascend\x1b[2J\x1b[H\x1b]0;pwned\x07910B", device_count=2, emulation=None,
                   quick=True, devices=2, faults=[],
                   versions={"torch\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07": "2.13\u202e"},
                   items=[item])


def test_verify_read_prints_a_hostile_bundle_escaped(tmp_path: Path):
    write_summary(tmp_path / "v", _hostile_summary())
    archive, _ = pack(tmp_path / "v", cap_bytes=10**6)
    for target in (archive, tmp_path / "v"):
        result = CliRunner().invoke(main, ["verify", "--read", str(target)])
        assert result.exit_code == 1
        assert not CONTROL.search(result.output), repr(result.output)
        assert "\u202e" not in result.output
        verdicts = [line for line in result.output.splitlines() if line.startswith("result:")]
        assert verdicts == ["result: FAIL (1 of 1 items failed); exit code 1"]
        assert "Ascend\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07910B" in result.output
        assert f"ops\\n{FORGED}\\n" in result.output  # visible, inside its own row
    markdown = (tmp_path / "v" / "summary.md").read_text()
    assert not CONTROL.search(markdown) and f"\n{FORGED}" not in markdown


def test_verify_read_error_naming_a_hostile_member_stays_one_escaped_line(tmp_path: Path):
    (tmp_path / "summary.json").write_text(json.dumps({"format": 1, "items": "no"}))
    target = tmp_path / "x.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        tar.add(tmp_path / "summary.json", arcname="v\x1b]0;T\x07\nerror: forged/summary.json")
    line = one_error_line(CliRunner().invoke(main, ["verify", "--read", str(target)]))
    assert "\\x1b]0;T\\x07\\nerror: forged" in line and not CONTROL.search(line)


def test_verify_read_refuses_a_fifo_in_one_line(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: opening it for reading would block forever
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "perfbench.cli", "verify", "--read", str(fifo)], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {fifo}: not a regular file or folder (a verify bundle is "
                                                "DIR.tar.gz or the DIR folder)"]


def test_scenario_name_with_control_characters_is_refused(tmp_path: Path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text('perfbench:\n  name: "ok\\u001b]0;T\\u0007\\nline2"\n')
    line = one_error_line(CliRunner().invoke(main, ["run", str(scenario), "--dry-run"]))
    assert "perfbench.name: must be printable text" in line and "\\x1b" in line and not CONTROL.search(line)


def test_a_result_whose_run_id_forges_a_line_is_refused_at_read(tmp_path: Path):
    source = REPO / "baselines" / "ci_smoke" / "results.jsonl"
    records = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    forged = f"{records[0]['run_id']}\nPASS all checks\x1b[2J"
    records[0]["run_id"] = records[0]["spec"]["run_id"] = forged
    folder = tmp_path / "cur"
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(main, ["gate", "--baseline", str(REPO / "baselines" / "ci_smoke"), "--current",
                                       str(folder), "--no-confirm"])
    line = one_error_line(result)
    assert "control character" in line and not CONTROL.search(line)


# where perfbench prints: every module that writes to the terminal goes through terminal_text (echo, printable,
# escaped); a bare click.echo or print of a string read from a file is what this round found
PRINTING = ["perfbench/cli.py", "perfbench/tools/verify/read.py", "perfbench/tools/verify/runner.py",
            "perfbench/tools/doctor.py", "perfbench/gate/engine.py", "perfbench/gate/confirm.py",
            "perfbench/run/runner.py", "perfbench/run/executors/follower.py", "perfbench/report/build.py",
            "perfbench/lifecycle.py", "perfbench/run/ab.py", "perfbench/run/detectable.py"]


def test_every_printing_module_prints_through_terminal_text():
    for rel in PRINTING:
        text = (REPO / rel).read_text()
        assert "click.echo(" not in text, f"{rel}: a bare click.echo (use perfbench.terminal_text.echo)"
        for match in re.finditer(r"\bprint\((.*)", text):
            assert match.group(1).startswith(("printable(", "escaped(")), \
                f"{rel}: print({match.group(1)[:50]} does not escape what it prints"
    assert sorted(p.relative_to(REPO).as_posix() for p in (REPO / "perfbench").rglob("*.py")
                  if "click.echo(" in p.read_text()) == ["perfbench/terminal_text.py"]
