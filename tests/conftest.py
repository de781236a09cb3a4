"""What every test session shares: one inductor compile cache for the sweeps the tests start."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@pytest.fixture(scope="session", autouse=True)
def shared_compile_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[Path]:
    """One inductor cache for the session (both xdist workers), so a kernel that many tests' sweeps build compiles
    once, not once per test: a sweep keeps a TORCHINDUCTOR_CACHE_DIR it inherits (perfbench/run/attempt.py).
    Inductor's cache is safe to share between processes (torch's own default is one folder per user). Tests of
    the per-sweep cache itself remove the variable (tests/perfbench/run/test_reused_worker.py,
    tests/perfbench/test_credentials_and_paths.py)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if worker_id != "master" else base) / "shared-inductor-cache"
    folder.mkdir(exist_ok=True)
    before = os.environ.get(INDUCTOR_CACHE_ENV)
    os.environ[INDUCTOR_CACHE_ENV] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(INDUCTOR_CACHE_ENV, None)
    else:
        os.environ[INDUCTOR_CACHE_ENV] = before
