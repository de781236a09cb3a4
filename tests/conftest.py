"""What every test session shares: one inductor compile cache for the sweeps the tests start, kept between
sessions on the same machine; and the order of the test files, heavy ones first (the two CI workers finish
together)."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import platformdirs
import pytest
import torch

INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# where the tests' inductor cache lives instead of the per-user cache folder (a CI runner's persistent disk, or
# an empty folder for a cold run)
TEST_CACHE_ENV = "PERFBENCH_TEST_INDUCTOR_CACHE"
ROOT = Path(__file__).resolve().parents[1]
KEYED_SOURCES = ("model", "perfbench")

# Test files that start worker processes, compile or sweep, heaviest first by the durations in
# docs/measurements_log.md (the credentials fixture, the Ray sweep, the signal tests, the emulated scenarios,
# verify, the smoke scenario, the GDN prefill, the CPU-hog run) and, unmeasured, by reading. With
# `--dist loadgroup --no-loadscope-reorder` the workers take the groups (one per file, below) in collection order,
# so these go first and the short files fill in at the end, where they even out the two workers' finish.
HEAVY_FILES = (
    "tests/test_ci_smoke.py",  # with the CPU-hog test after it, one group (below): the longest unit of work
    "tests/perfbench/analysis/test_stability.py",
    "tests/perfbench/test_credentials_and_paths.py",
    "tests/perfbench/run/test_cluster.py",
    "tests/perfbench/run/test_ray_executor.py",
    "tests/perfbench/run/test_reused_worker.py",
    "tests/perfbench/test_signals.py",
    "tests/emulation/test_npu_scenarios.py",
    "tests/emulation/test_verify_emulated.py",
    "tests/perfbench/run/test_ab.py",
    "tests/perfbench/run/test_runner.py",
    "tests/perfbench/run/test_crossover_driver.py",
    "tests/model/ops/test_gdn.py",
    "tests/perfbench/measure/test_numerics_plants.py",
    "tests/emulation/test_npu_parallel.py",
    "tests/emulation/test_verify_faults.py",
    "tests/perfbench/history/test_history_ci_recipe.py",
    "tests/model/test_parallel.py",
    "tests/perfbench/run/test_worker_process.py",
)


def source_key(root: Path = ROOT) -> str:
    """A hash of what the compiled kernels can depend on here: torch's and Python's versions, the machine kind,
    and the bytes of every Python file under model/ and perfbench/ and of pyproject.toml (paths included)."""
    digest = hashlib.sha256()
    for part in (torch.__version__, sys.version, platform.machine()):
        digest.update(part.encode() + b"\0")
    files = sorted(p for base in KEYED_SOURCES for p in (root / base).rglob("*.py"))
    for path in [*files, root / "pyproject.toml"]:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"")
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def persistent_cache_folder(environ: Mapping[str, str], root: Path = ROOT) -> Path:
    """$PERFBENCH_TEST_INDUCTOR_CACHE if set, else the user's cache folder's perfbench/test-inductor/<key>:
    a new key (other code or versions) starts a new, cold folder."""
    override = environ.get(TEST_CACHE_ENV)
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("perfbench")) / "test-inductor" / source_key(root)


@pytest.fixture(scope="session", autouse=True)
def shared_compile_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[Path]:
    """One inductor cache for the session (both xdist workers) and for later sessions of the same code on this
    machine, so a kernel that many tests' sweeps build compiles once, not once per test or per CI run: a sweep
    keeps a TORCHINDUCTOR_CACHE_DIR it inherits (perfbench/run/attempt.py). Inductor's cache is content-keyed and
    safe to share between processes (torch's own default is one folder per user), so a warm folder changes how
    long a test takes, never what it sees, and a missing one is only cold. Where the folder cannot be made
    (a read-only home), the session's temporary folder serves. Tests of the per-sweep cache itself remove the
    variable (tests/perfbench/run/test_reused_worker.py, tests/perfbench/test_credentials_and_paths.py)."""
    folder = persistent_cache_folder(os.environ)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
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


def heavy_first(paths: list[str]) -> list[str]:
    """The order of the files: HEAVY_FILES first, in its order, then every other file in collection order."""
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    return sorted(paths, key=lambda p: rank.get(p, len(HEAVY_FILES)))


# Files that must not run at the same time: one xdist group. The CPU-hog test spins one process more than there
# are cores; the smoke scenario gates its timings against the shipped baseline.
SHARED_GROUPS = {"tests/perfbench/analysis/test_stability.py": "cpu-hog-and-smoke",
                 "tests/test_ci_smoke.py": "cpu-hog-and-smoke"}


def file_group(path: str) -> str:
    """The xdist group of a test file: the file itself (so `--dist loadgroup` keeps a file's module fixtures on
    one worker, as loadfile does), or the group it shares."""
    return SHARED_GROUPS.get(path, path)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heavy files first, each file's tests kept together and in their own order (every xdist worker sorts its
    collection alike, so the workers agree on it), each test in its file's xdist group."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    files = heavy_first(list(dict.fromkeys(file_of(item) for item in items)))
    position = {name: i for i, name in enumerate(files)}
    items.sort(key=lambda item: position[file_of(item)])  # stable: a file's tests keep their order
    for item in items:
        item.add_marker(pytest.mark.xdist_group(file_group(file_of(item))))


@pytest.fixture(scope="session", autouse=True)
def no_user_noise_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Noise files (perfbench calibrate) from a session-local folder, never the user's: a noise file recorded on
    this machine would change the caps and lines of the ab jobs the tests start."""
    folder = tmp_path_factory.mktemp("noise")
    before = os.environ.get("PERFBENCH_NOISE_DIR")
    os.environ["PERFBENCH_NOISE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("PERFBENCH_NOISE_DIR", None)
    else:
        os.environ["PERFBENCH_NOISE_DIR"] = before
