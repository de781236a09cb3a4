"""Fewer OpenMP threads when other processes hold cores at a job's start (measure/thread_budget.py): the rule on
given loads, the worker's switch with the load read stubbed (no timing), and the note's way to the end table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from perfbench.analysis.plan_warnings import host_notes
from perfbench.measure import thread_budget
from perfbench.measure.environment import collect_environment
from perfbench.results import RunResult
from tests.records_kit import run_result


def noted_run(run_id: str, note: str | None = None) -> RunResult:
    return run_result(run_id, env={"torch": "2.13.0", "threads_note": note})


@pytest.mark.parametrize(("configured", "cpus", "other", "expected"), [
    (2, 2, 0.0, 2),    # a quiet host keeps torch's count
    (2, 2, 0.4, 2),    # 1.6 cores free: still more than 2 - 1/2
    (2, 2, 1.0, 1),    # a neighbour spinning one core of two: one thread
    (2, 2, 2.0, 1),    # never fewer than one
    (16, 16, 3.2, 13),  # 12.8 free cores round to 13
    (4, 16, 3.0, 4),   # a count below the free cores is kept
])
def test_threads_follow_the_free_cores(configured: int, cpus: int, other: float, expected: int) -> None:
    assert thread_budget.threads_for(configured, cpus, other) == expected


@pytest.fixture()
def threads() -> Iterator[int]:
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)
    thread_budget._note = None
    thread_budget._default = None


def test_a_busy_host_lowers_the_count_notes_it_and_a_quiet_one_restores_it(threads: int, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(thread_budget.os, "cpu_count", lambda: 2)
    torch.set_num_threads(2)
    note = thread_budget.fit_threads_to_host("cpu", measure=lambda: 1.0)
    assert torch.get_num_threads() == 1
    assert note == ("timed with 1 of 2 threads: other processes kept 1.0 of 2 cores busy when the job started "
                    "(a busy core stalls every OpenMP region)")
    env = collect_environment("cpu")
    assert env["torch_threads"] == 1 and env["threads_note"] == note
    # the worker's next job, on a quiet host: torch's own count again, no note
    assert thread_budget.fit_threads_to_host("cpu", measure=lambda: 0.0) is None
    assert torch.get_num_threads() == 2 and collect_environment("cpu")["threads_note"] is None


@pytest.mark.parametrize("why", ["user", "device", "no_proc"])
def test_nothing_changes_for_a_user_count_another_device_or_no_proc(threads: int, monkeypatch, why: str) -> None:
    monkeypatch.setattr(thread_budget.os, "cpu_count", lambda: 2)
    torch.set_num_threads(2)
    if why == "user":
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
    else:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    device = "npu" if why == "device" else "cpu"
    load = None if why == "no_proc" else 1.0
    assert thread_budget.fit_threads_to_host(device, measure=lambda: load) is None
    assert torch.get_num_threads() == 2


def test_the_busy_window_reads_a_number_on_linux() -> None:
    other = thread_budget.busy_other_cores(0.05)
    assert other is not None and other >= 0.0


def test_the_note_reaches_the_folder_once_with_its_count() -> None:
    noted = "timed with 1 of 2 threads: other processes kept 1.0 of 2 cores busy when the job started"
    runs = [noted_run("a", noted), noted_run("b", noted), noted_run("c")]
    assert host_notes(runs) == [f"{noted} (2 of 3 runs)"]
    assert host_notes(runs[2:]) == []
