"""`model.parallel.finish`, the last call of a torchrun rank: results written and flushed before `os._exit`, the
done marker, atexit functions run, the exit code kept, and a rank that raises still fails the job with its
traceback. Two CPU ranks on gloo, a plain process group (no model: the exit path is what is under test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RANK = """
import atexit, os, sys
from pathlib import Path
import torch
import torch.distributed as dist
from model.parallel import finish

out, rank = Path(sys.argv[1]), int(os.environ["RANK"])
raise_on = int(sys.argv[2]) if len(sys.argv) > 2 else -1
dist.init_process_group("gloo")
atexit.register(lambda: (out / f"rank{rank}.atexit").write_text("ran"))
results = open(out / f"rank{rank}.txt", "w", buffering=1 << 20)  # left open: only finish's flush writes it
try:
    total = torch.ones(1)
    dist.all_reduce(total)
    results.write(f"sum {int(total.item())}")
    if rank == raise_on:
        raise RuntimeError(f"planted failure on rank {rank}")
    rc = 0
except Exception as exc:
    finish(exc, flush=[results], done=out / f"rank{rank}.done")
finish(rc, flush=[results], done=out / f"rank{rank}.done")
"""


def torchrun(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--monitor-interval", "0.5", str(script), str(tmp_path), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_finish_writes_everything_then_exits_zero(tmp_path):
    proc = torchrun(tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in range(2):
        # the 1 MiB buffer never filled: without finish's flush the file would be empty after os._exit
        assert (tmp_path / f"rank{rank}.txt").read_text() == "sum 2"
        assert (tmp_path / f"rank{rank}.done").read_text() == "0\n"
        assert (tmp_path / f"rank{rank}.atexit").read_text() == "ran"
    assert "terminate called" not in proc.stderr


@pytest.mark.slow
def test_a_rank_that_raises_fails_the_job_with_its_traceback(tmp_path):
    proc = torchrun(tmp_path, "1")
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "Traceback" in output and "RuntimeError: planted failure on rank 1" in output, output[-4000:]
    # the failing rank's result and marker are written too, the marker with its exit code
    assert (tmp_path / "rank1.txt").read_text() == "sum 2"
    assert (tmp_path / "rank1.done").read_text() == "1\n"


def test_finish_outside_torchrun_exits_with_the_code(tmp_path):
    # no process group: the same call ends a single process, with its exit code and its results written
    code = (f"import sys; from model.parallel import finish; f = open({str(tmp_path / 'r.txt')!r}, 'w'); "
            f"f.write('x'); print('said', end=''); finish(3, flush=[f], done={str(tmp_path / 'done')!r})")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == "said"
    assert (tmp_path / "r.txt").read_text() == "x"
    assert (tmp_path / "done").read_text() == "3\n"


IDLE_POOL = """
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from model.parallel import finish

pool = ThreadPoolExecutor(max_workers=2)  # a library's pool, left running: its workers are not daemons
pool.submit(int, "1").result()  # the workers exist and now wait on the queue
finish(0, done=Path(sys.argv[1]) / "done")
"""


def test_an_idle_thread_pool_does_not_hold_the_process_at_finish(tmp_path):
    """Interpreter exit stops an idle ThreadPoolExecutor through threading's exit hooks before it joins threads;
    finish must too, or the rank hangs until its run's timeout kills it (a cpu_ep2 run sat 300 s so)."""
    script = tmp_path / "pool.py"
    script.write_text(IDLE_POOL)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "done").read_text() == "0\n"
