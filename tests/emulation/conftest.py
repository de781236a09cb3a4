"""Fixtures for the NPU emulator tests: the emulator active for one platform, removed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from perfbench.emulation import npu

PLATFORM_KEYS = tuple(npu.PLATFORMS)


@pytest.fixture
def emulate() -> Iterator[object]:
    """Call emulate("910b") inside a test; the emulator is removed when the test ends."""
    yield npu.activate
    npu.deactivate()


@pytest.fixture(params=PLATFORM_KEYS)
def platform(request: pytest.FixtureRequest) -> Iterator[str]:
    npu.activate(request.param)
    yield request.param
    npu.deactivate()
