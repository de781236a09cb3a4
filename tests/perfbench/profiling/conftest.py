"""The real profiler outputs in tests/fixtures (origins and licences: tests/fixtures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NPU_FIXTURES = FIXTURES / "npu_profiler"
TORCH_FIXTURES = FIXTURES / "torch_profiler"


def require(path: Path) -> Path:
    """`path`, which ships with the repository: a missing one is a broken checkout, not a reason to skip."""
    if not path.exists():
        pytest.fail(f"fixture missing from the repository: {path}")
    return path


@pytest.fixture
def npu_fixtures() -> Path:
    return require(NPU_FIXTURES)


@pytest.fixture
def torch_fixtures() -> Path:
    return require(TORCH_FIXTURES)
