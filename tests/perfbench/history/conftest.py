"""Synthetic folders in the real record format (written by perfbench's own writers, with values chosen here),
and one PostgreSQL server per test session."""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from model.toggles import TOGGLE_NAMES
from perfbench.results import RunPlan, RunResult, RunSpec, write_results
from tests.records_kit import run_result

# The host's speed moves every run of a block alike (x1, x1.3, x0.8, ...): the pairs cancel it, so a plan whose
# every iteration takes `ratio` of the baseline's has a paired speed-up of exactly 1 / ratio.
DRIFT = (1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.0, 0.85, 1.15, 1.05)
ENV = {"git_sha": "0" * 40, "git_dirty": False, "torch": "2.13.0+cpu", "device": "cpu",
       "cpu_model": "Test CPU 9000", "python": "3.11"}


def blocked_run(run_id: str, on: tuple[str, ...], ttft: float, tpot: float, env: dict, scenario: str = "syn",
                blocks: bool = True, started_at: str = "2026-12-01T10:00:00+00:00") -> RunResult:
    plan = RunPlan.from_dict({t: {"requested": t in on, "state": "on" if t in on else "off"} for t in TOGGLE_NAMES})
    spec = RunSpec(run_id=run_id, scenario=scenario, timing="blocks" if blocks else "separate",
                   block_group="g" if blocks else "")
    return run_result(run_id, spec=spec,
                      plan=plan, samples={"ttft_ms": [ttft * d for d in DRIFT], "tpot_ms": [tpot * d for d in DRIFT]},
                      summary={"compile_s": 1.5, "first_ttft_ms": ttft * 3},
                      blocks={"group": "g", "process": "p1", "index": list(range(len(DRIFT))),
                              "epoch": [i // 5 for i in range(len(DRIFT))]} if blocks else {},
                      env=env, started_at=started_at)


def write_sweep(folder: Path, *, sha: str, gdr: float = 2.0, ttft: float = 100.0, tpot: float = 10.0,
                scenario: str = "syn", env: dict | None = None, traces: bool = False, blocks: bool = False,
                started_at: str = "2026-12-01T10:00:00+00:00") -> Path:
    """A sweep of three plans: all off (ttft, tpot), gdr (gdr x faster TTFT) and rope (no change). Timed
    separately by default (speed-up: the ratio of medians); `blocks`: in interleaved blocks (paired speed-ups,
    whose bootstrap takes about a second per plan here). `started_at`: when its runs started (with the commit,
    the run's own identity in the store)."""
    env = {**ENV, **(env or {}), "git_sha": sha}
    runs = [blocked_run("base", (), ttft, tpot, env, scenario, blocks, started_at),
            blocked_run("gdr", ("chunk_gdr",), ttft / gdr, tpot, env, scenario, blocks, started_at),
            blocked_run("rope", ("fused_rope",), ttft, tpot, env, scenario, blocks, started_at)]
    write_results(folder, runs)
    (folder / "scenario.json").write_text(json.dumps({"name": scenario}))
    if traces:
        tables = folder / "runs" / "gdr" / "tables"
        tables.mkdir(parents=True)
        (tables / "per_category.csv").write_text(
            "side,category,count,total_us,mean_us,min_us,max_us,share_pct\n"
            "host,matmul,10,500.0,50.0,1.0,90.0,50.0\nhost,attention,5,300.0,60.0,1.0,90.0,30.0\n"
            "host,norm,5,200.0,40.0,1.0,90.0,20.0\n")
    return folder


@pytest.fixture(scope="session")
def sweep() -> Callable[..., Path]:
    return write_sweep


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    return Path(which).parent if which else None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server (initdb in a temp folder, a free port, its socket in the folder), run as an
    unprivileged user when the tests run as root (PostgreSQL refuses root); stopped at the session's end."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("needs PostgreSQL's server binaries (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="perfbench-pg-"))
    user: list[str] = []
    if os.geteuid() == 0:
        import pwd

        name = "postgres" if any(p.pw_name == "postgres" for p in pwd.getpwall()) else "nobody"
        shutil.chown(root, name)
        os.chmod(root, 0o700)
        user = ["runuser", "-u", name, "--"]
    data, port = root / "data", _free_port()
    subprocess.run([*user, str(bin_dir / "initdb"), "-D", str(data), "-U", "perfbench", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run([*user, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # the server keeps pipes open
    try:
        yield f"postgresql://perfbench@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_db(postgres_url: str) -> Iterator[str]:
    """A fresh database on the session's server for one test."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"


def make_repo(path: Path, commits: int) -> list[str]:
    """A git repository of `commits` empty commits on one branch, a minute apart (so the commit dates order them
    as the history does); their shas, oldest first."""
    path.mkdir(parents=True)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    shas = []
    for i in range(commits):
        stamp = f"2026-11-01T10:{i:02d}:00+00:00"
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True,
                       env={**os.environ, "GIT_COMMITTER_DATE": stamp, "GIT_AUTHOR_DATE": stamp})
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    return shas
