"""Shared fixtures: the real profiler fixtures in ../shared/fixtures (skipped with a reason when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
NPU_FIXTURES = FIXTURES / "npu_profiler"
TORCH_FIXTURES = FIXTURES / "torch_profiler"


def require(path: Path) -> Path:
    """`path` if it exists, else skip the test with the reason."""
    if not path.exists():
        pytest.skip(f"profiler fixtures not found at {path}")
    return path


@pytest.fixture
def npu_fixtures() -> Path:
    return require(NPU_FIXTURES)


@pytest.fixture
def torch_fixtures() -> Path:
    return require(TORCH_FIXTURES)
