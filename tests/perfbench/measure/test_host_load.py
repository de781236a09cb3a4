"""The host-load meter sees other processes' CPU time and leaves the run's own process group out."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfbench.analysis.stability import contention
from perfbench.measure import host_load
from perfbench.measure.host_load import CpuSnapshot, HostLoad
from perfbench.results import Summary

pytestmark = pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads Linux /proc")


def test_a_spinning_process_outside_the_run_is_seen(tmp_path):
    # The hog starts its own session, so it is outside this process group: it counts as "other".
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        time.sleep(0.5)  # let it start spinning
        before = host_load.snapshot()
        time.sleep(1.5)
        load = host_load.host_load(before, host_load.snapshot(), run_threads=1, cpus=1)
    finally:
        hog.kill()
        hog.wait()
    assert load is not None and load.other_cores > 0.6, load
    assert "other processes kept" in contention(Summary(**load.as_summary()))


def _cpu_ticks(pid: int) -> int:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def test_the_runs_own_processes_are_not_other(tmp_path):
    # A spinner in this process group is part of the run (a torchrun rank, say): every tick it spends is
    # counted as the run's own, however much CPU the machine lets it have.
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        before, spun_before = host_load.snapshot(), _cpu_ticks(spinner.pid)
        time.sleep(1.5)
        after, spun_after = host_load.snapshot(), _cpu_ticks(spinner.pid)
    finally:
        spinner.kill()
        spinner.wait()
    spun = spun_after - spun_before
    assert spun > 0
    assert after.own_ticks - before.own_ticks >= spun


def test_a_process_of_the_run_that_ends_keeps_its_time(tmp_path):
    # A rank or helper that exits inside the timed window: once reaped, its CPU time lives in the parent's
    # counters. The group's total must keep it, not drop below where it started.
    before, reaped_before = host_load.snapshot(), resource.getrusage(resource.RUSAGE_CHILDREN)
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    after, reaped_after = host_load.snapshot(), resource.getrusage(resource.RUSAGE_CHILDREN)
    child_s = (reaped_after.ru_utime + reaped_after.ru_stime) - (reaped_before.ru_utime + reaped_before.ru_stime)
    assert child_s >= 0.5
    # one tick of rounding per counter
    assert after.own_ticks - before.own_ticks >= int(child_s * host_load._ticks_per_s()) - 2


def test_arithmetic_and_verdict():
    tick = host_load._ticks_per_s()
    before = CpuSnapshot(wall_s=10.0, busy_ticks=1000, steal_ticks=0, own_ticks=100)
    # 2 s: 4 cores' worth of busy time of which 2 cores were the run's, 0.4 cores stolen
    after = CpuSnapshot(wall_s=12.0, busy_ticks=1000 + 8 * tick, steal_ticks=int(0.8 * tick),
                        own_ticks=100 + 4 * tick)
    load = host_load.host_load(before, after, run_threads=2, cpus=2)
    assert load == HostLoad(other_cores=2.0, steal_cores=0.4, spare_cores=0.0)
    why = contention(Summary(**load.as_summary()))
    assert "2.00 cores busy" in why and "stole 0.40 cores" in why
    # the same other load on a machine with 8 spare cores leaves the run alone
    assert contention(Summary(**HostLoad(2.0, 0.0, 8.0).as_summary())) == ""
    assert contention(Summary()) == ""  # nothing recorded (not Linux, or an old result): no verdict
