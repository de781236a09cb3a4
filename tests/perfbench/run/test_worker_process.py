"""The parent's end of the worker protocol, against stand-in workers (no torch, no timing asserted)."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfbench.run.worker_process import WorkerProcess

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups")

# answers two lines in one write per request; "exit" ends without an answer; "hang" never answers
STAND_IN = textwrap.dedent("""
    import json, os, sys, time
    reply = os.fdopen(int(sys.argv[1]), "w")
    for line in sys.stdin:
        request = json.loads(line)
        if request == "exit":
            sys.exit(7)
        if request == "hang":
            time.sleep(3600)
        reply.write(json.dumps({"n": request, "part": 1}) + "\\n" + json.dumps({"n": request, "part": 2}) + "\\n")
        reply.flush()
""")


def start(tmp_path: Path) -> WorkerProcess:
    return WorkerProcess(lambda fd: [sys.executable, "-c", STAND_IN, str(fd)], dict(os.environ),
                         tmp_path / "worker.log")


def test_two_answers_in_one_read_are_both_kept_in_order(tmp_path: Path):
    worker = start(tmp_path)
    try:
        assert worker.send(1) and worker.send(2)
        deadline = time.monotonic() + 60
        got = [worker.answer(deadline) for _ in range(4)]
        assert got == [{"n": 1, "part": 1}, {"n": 1, "part": 2}, {"n": 2, "part": 1}, {"n": 2, "part": 2}]
    finally:
        worker.close()
    assert worker.proc.returncode == 0  # stdin closed: the worker's loop ended on its own


def test_a_worker_that_ends_answers_none_and_its_exit_code(tmp_path: Path):
    worker = start(tmp_path)
    worker.send("exit")
    assert worker.answer(time.monotonic() + 60) is None
    assert worker.wait_ended() == 7
    worker.kill()
    assert worker.send("after") is False  # gone: no exception, the caller sees the end at the next answer


def test_no_answer_by_the_deadline_is_a_timeout_and_kill_stops_the_worker(tmp_path: Path):
    worker = start(tmp_path)
    worker.send("hang")
    with pytest.raises(TimeoutError, match="worker.log"):
        worker.answer(time.monotonic() + 0.5)
    worker.kill()
    assert worker.proc.poll() is not None
