"""The host-speed probe: its reading is the best of its repeats, and its spread is p90 / p10 - 1."""

from __future__ import annotations

import itertools

import pytest

from perfbench.measure import host_probe
from perfbench.measure.host_probe import HostProbe, speed_change


def test_a_reading_is_the_fastest_repeat_in_milliseconds(monkeypatch):
    # a fake clock: each repeat reads a start and an end; the repeats take 5, 2 and 9 ms
    ticks = iter([0.0, 0.005, 1.0, 1.002, 2.0, 2.009])
    monkeypatch.setattr(host_probe.time, "perf_counter", lambda: next(ticks))
    assert host_probe.REPEATS == 3
    assert HostProbe()() == pytest.approx(2.0)


def test_a_real_reading_is_a_positive_time():
    probe = HostProbe()
    readings = [probe() for _ in range(3)]
    assert all(0 < r < 1000 for r in readings)


def test_speed_change_by_hand():
    assert speed_change([1.0, 1.0]) is None  # too few readings
    assert speed_change([2.0] * 7) == pytest.approx(0.0)
    # ten readings, one twice as slow: numpy's linear p90 sits at rank 0.9 * 9 = 8.1, i.e. 1.0 + 0.1 * (2.0 - 1.0)
    assert speed_change([1.0] * 9 + [2.0]) == pytest.approx(0.1)
    # half fast (3 ms), half slow (4 ms): p10 = 3, p90 = 4
    assert speed_change(list(itertools.chain.from_iterable([3.0, 4.0] for _ in range(10)))) == pytest.approx(1 / 3)
