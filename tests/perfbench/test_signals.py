"""SIGINT and SIGTERM end `perfbench run` and `perfbench verify` alike (perfbench/lifecycle.py): what was measured
is kept, no worker outlives the command, one line says so, and the exit code is the signal's own (130 / 143),
never 0 or 1 (click's "Aborted!")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.lifecycle import Interrupted, exit_code_of, exit_on_signal
from perfbench.results import load_results
from perfbench.run.launcher import PROJECT_DIR
from tests.perfbench.run.test_runner import alive_with, fault_scenario

EXIT_OF = {signal.SIGINT: 130, signal.SIGTERM: 143}


class TestSignals:
    @pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
    def test_the_context_manager_exits_with_the_signals_code(self, sig, capsys):
        before = signal.getsignal(signal.SIGTERM)
        with pytest.raises(SystemExit) as exited, exit_on_signal("perfbench test"):
            os.kill(os.getpid(), sig)
            time.sleep(30)  # the handler raises at once; the sleep is never finished
        assert exited.value.code == EXIT_OF[sig]
        assert capsys.readouterr().err.strip().splitlines() == [
            f"perfbench test: interrupted by {sig.name} (exit {EXIT_OF[sig]})"]
        assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back

    def test_exit_codes_of_the_exceptions(self):
        assert exit_code_of(KeyboardInterrupt()) == 130
        assert exit_code_of(Interrupted(signal.SIGTERM)) == 143

    def test_ctrl_c_in_a_command_is_not_clicks_exit_1(self, tmp_path, monkeypatch):
        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr("perfbench.run.runner.run_scenario", interrupted)
        result = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "out")])
        assert result.exit_code == 130 and "Aborted" not in result.output
        assert result.stderr.strip().splitlines() == ["perfbench run: interrupted by SIGINT (exit 130)"]

    @pytest.mark.slow
    @pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
    def test_interrupted_sweep_keeps_its_runs_and_leaves_no_worker(self, tmp_path, sig):
        # timed separately: the first run is recorded before the second (which hangs) starts
        path = fault_scenario(tmp_path, ["raise", "hang"], timing="separate")
        out = tmp_path / "out"
        env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR.absolute())}
        proc = subprocess.Popen([sys.executable, "-m", "perfbench.cli", "run", str(path), "--out", str(out),
                                 "--no-report"], cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while len(list(out.glob("runs/*/worker.log"))) < 2 or not (out / "results.jsonl").is_file():
            assert time.monotonic() < deadline and proc.poll() is None, "the second run never started"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == EXIT_OF[sig], err
        assert "Traceback" not in err and "Aborted" not in err
        assert f"interrupted by {sig.name} (exit {EXIT_OF[sig]})" in err and "--resume" in err
        assert [r.status for r in load_results(out)] == ["error"]  # the measured run is kept
        assert alive_with(str(out)) == []

    @pytest.mark.slow
    @pytest.mark.npu_emulated
    def test_interrupted_verify_writes_the_items_it_checked(self, tmp_path):
        out = tmp_path / "bundle"
        env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR.absolute()), "OMP_NUM_THREADS": "1"}
        env.pop("PERFBENCH_VERIFY_FAULT", None)
        proc = subprocess.Popen([sys.executable, "-m", "perfbench.cli", "verify", "--emulate-npu", "910b", "--quick",
                                 "--items", "environment,ops", "--out", str(out)], cwd=PROJECT_DIR, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        assert proc.stderr is not None
        for line in proc.stderr:  # the environment item is done once the ops item starts
            lines.append(line)
            if line.startswith("verify: ops ..."):
                proc.send_signal(signal.SIGTERM)
                break
        rest, err = proc.communicate(timeout=60)
        err = "".join(lines) + err
        assert proc.returncode == 143, err
        assert "Traceback" not in err and "perfbench verify: interrupted by SIGTERM (exit 143)" in err
        summary = json.loads((out / "summary.json").read_text())
        status = {item["name"]: item["status"] for item in summary["items"]}
        assert status["environment"] == "pass" and status["ops"] == "skipped"
        assert out.with_name("bundle.tar.gz").is_file()


def _leaf_commands(group, prefix=()):  # noqa: ANN001, ANN202
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from _leaf_commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def test_every_command_ends_on_a_signal_with_the_signals_code():
    # bisect and history ingest ended with click's "Aborted!" and exit 1: every command is wrapped
    from perfbench.cli import signal_exits

    marker = signal_exits(lambda: None).__code__
    unwrapped = []
    for name, command in _leaf_commands(main):
        fn, codes = command.callback, []
        while fn is not None:
            codes.append(getattr(fn, "__code__", None))
            fn = getattr(fn, "__wrapped__", None)
        if marker not in codes:
            unwrapped.append(name)
    assert unwrapped == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_history_ingest_interrupted_exits_with_the_signals_code(sig, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        os.kill(os.getpid(), sig)
        time.sleep(30)  # the handler raises at once

    monkeypatch.setattr("perfbench.history.commands.ingest_command", interrupted)
    result = CliRunner().invoke(main, ["history", "ingest", str(tmp_path), "--db", str(tmp_path / "h.sqlite")])
    assert result.exit_code == EXIT_OF[sig], result.output
    assert "Aborted" not in result.output and f"interrupted by {sig.name}" in result.stderr
