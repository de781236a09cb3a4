"""Shared fixtures: the real profiler outputs in tests/fixtures (origins and licences in tests/fixtures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NPU_FIXTURES = FIXTURES / "npu_profiler"
TORCH_FIXTURES = FIXTURES / "torch_profiler"


def require(path: Path) -> Path:
    """`path`, which the repository ships; a missing one fails the test (it is not optional data)."""
    assert path.exists(), f"profiler fixture missing from the repository: {path}"
    return path


@pytest.fixture
def npu_fixtures() -> Path:
    return require(NPU_FIXTURES)


@pytest.fixture
def torch_fixtures() -> Path:
    return require(TORCH_FIXTURES)
