"""Every process perfbench starts imports the code the command runs, records where it came from, and the gate
refuses a folder whose runs disagree about it (perfbench/measure/code_origin.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.measure.code_origin import (
    CODE_ROOT,
    CODE_ROOT_ENV,
    code_origins,
    code_root_problem,
    mixed_code,
    module_command,
)
from perfbench.measure.worker import FAULT_ENV
from perfbench.results import CodeOrigin, RunSpec, write_results
from perfbench.run.launcher import child_env, worker_command
from tests.perfbench.gate.test_gate import make_run

PLANT = "planted: imported from the folder the command stands in"
TWO_RANKS = {"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2, "embed_tp_size": 2, "lmhead_tp_size": 2,
             "shared_tp_size": 2}


@pytest.fixture
def other_checkout(tmp_path: Path) -> Path:
    """Another checkout to stand in: model/ and perfbench/ that fail on import (the planted fault)."""
    here = tmp_path / "other"
    for package in ("model", "perfbench"):
        (here / package / "measure").mkdir(parents=True)
        (here / package / "__init__.py").write_text(f"raise ImportError({PLANT!r})\n")
    return here


def _start(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_a_plain_module_start_imports_the_folder_it_stands_in(other_checkout: Path) -> None:
    # the fault the bootstrap exists to catch: `python -m` puts the current folder ahead of PYTHONPATH
    env = {**os.environ, "PYTHONPATH": str(CODE_ROOT)}
    done = _start([sys.executable, "-m", "perfbench.measure.worker", "--help"], other_checkout, env)
    assert done.returncode != 0 and PLANT in done.stderr
    done = _start(module_command(sys.executable, "perfbench.measure.worker", "--help"), other_checkout, env)
    assert done.returncode == 0 and PLANT not in done.stderr, done.stderr


@pytest.mark.parametrize("parallel", [{"world_size": 1}, TWO_RANKS], ids=["one-process", "torchrun"])
def test_the_worker_imports_and_records_this_checkout_from_another(other_checkout: Path, tmp_path: Path,
                                                                   parallel: dict[str, int]) -> None:
    spec = RunSpec(run_id="r", scenario="s", parallel=parallel, env={FAULT_ENV: "raise"})  # no model run
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    env = child_env(spec, base={**os.environ, "OMP_NUM_THREADS": "1"})
    done = _start(worker_command(spec, spec_path, run_dir), other_checkout, env)
    assert PLANT not in done.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert "injected fault" in result["error"]
    code = {o["package"]: o["path"] for o in result["env"]["code"]}
    assert code == {"model": str(CODE_ROOT / "model"), "perfbench": str(CODE_ROOT / "perfbench")}


def test_the_worker_refuses_to_measure_code_from_another_root(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(CODE_ROOT), CODE_ROOT_ENV: str(tmp_path)}
    done = _start(module_command(sys.executable, "perfbench.measure.worker", "--spec=x", "--out=y"), tmp_path, env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "not from" in lines[0], done.stderr
    # the near miss: this root is the code it runs
    assert code_root_problem(str(CODE_ROOT)) is None and code_root_problem(str(tmp_path)) is not None


def test_code_origins_name_this_checkout_and_its_commit() -> None:
    head = subprocess.run(["git", "-C", str(CODE_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    origins = {o.package: o for o in code_origins(rank=3)}
    assert origins["perfbench"].path == str(CODE_ROOT / "perfbench") and origins["perfbench"].git_sha == head
    assert origins["model"].rank == 3 and origins["model"].git_sha == head


def _origin(package: str, sha: str = "a" * 40, path: str = "/c", host: str = "h", rank: int = 0,
            dirty: bool = False) -> CodeOrigin:
    return CodeOrigin(package=package, path=f"{path}/{package}", git_sha=sha, git_dirty=dirty, rank=rank,
                      hostname=host)


def _both(**kw: object) -> list[CodeOrigin]:
    return [_origin("model", **kw), _origin("perfbench", **kw)]  # type: ignore[arg-type]


def test_mixed_code_names_what_differs() -> None:
    same = [_both(), _both(rank=1), _both()]
    assert mixed_code(same) is None
    # near miss: two hosts install the same commit in different folders
    assert mixed_code([_both(), _both(host="h2", path="/elsewhere", rank=1)]) is None
    assert "2 commits" in (mixed_code([_both(), _both(sha="b" * 40)]) or "")
    assert "2 commits" in (mixed_code([_both(), _both(dirty=True)]) or "")
    assert "2 folders on h" in (mixed_code([_both(), _both(path="/other", rank=1)]) or "")


def _folder(tmp_path: Path, name: str, codes: list[list[CodeOrigin]]) -> Path:
    runs = []
    for number, code in enumerate(codes):
        run = make_run(f"run{number}", tpot=[10.0] * 8, ttft=[50.0] * 8)
        run.env.code = code
        runs.append(run)
    write_results(tmp_path / name, runs)
    return tmp_path / name


def test_the_gate_refuses_a_folder_whose_runs_ran_different_code(tmp_path: Path) -> None:
    base = _folder(tmp_path, "base", [_both(), _both()])
    mixed = _folder(tmp_path, "mixed", [_both(), _both(sha="b" * 40)])
    ranks = _folder(tmp_path, "ranks", [_both() + _both(rank=1, path="/other"), _both()])
    for current in (mixed, ranks):
        result = CliRunner().invoke(main, ["gate", "--no-confirm", "--baseline", str(base), "--current",
                                           str(current)])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and "ran different code" in lines[0], result.output
    # near miss: another commit than the baseline's, but one for every run and rank of the folder
    same = _folder(tmp_path, "same", [_both(sha="b" * 40), _both(sha="b" * 40) + _both(sha="b" * 40, rank=1)])
    result = CliRunner().invoke(main, ["gate", "--no-confirm", "--baseline", str(base), "--current", str(same)])
    assert result.exit_code == 0, result.output


GATHER = """
import json, sys
import torch.distributed as dist
from perfbench.measure.code_origin import gather_code_origins
dist.init_process_group("gloo")
origins = gather_code_origins()
if dist.get_rank() == 0:
    open(sys.argv[1], "w").write(json.dumps([o.to_dict() for o in origins]))
dist.barrier()
"""


@pytest.mark.slow
def test_every_rank_records_its_code(tmp_path: Path) -> None:
    script = tmp_path / "gather.py"
    script.write_text(GATHER)
    out = tmp_path / "origins.json"
    env = {**os.environ, "PYTHONPATH": str(CODE_ROOT), "OMP_NUM_THREADS": "1"}
    done = _start(module_command(sys.executable, "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                 str(script), str(out)), tmp_path, env)
    assert done.returncode == 0, done.stderr[-2000:]
    origins = [CodeOrigin.model_validate(o) for o in json.loads(out.read_text())]
    assert sorted((o.rank, o.package) for o in origins) == [(0, "model"), (0, "perfbench"), (1, "model"),
                                                            (1, "perfbench")]
    assert {o.path for o in origins} == {str(CODE_ROOT / "model"), str(CODE_ROOT / "perfbench")}
    assert mixed_code([origins]) is None


def test_a_baseline_of_mixed_code_is_refused(tmp_path: Path) -> None:
    from perfbench.errors import UserError
    from perfbench.gate.engine import save_baseline

    mixed = _folder(tmp_path, "mixed", [_both(), _both(path="/other")])
    with pytest.raises(UserError, match="ran different code"):
        save_baseline(mixed, tmp_path / "base")
    same = _folder(tmp_path, "same", [_both(), _both()])  # the near miss
    save_baseline(same, tmp_path / "base", allow_dirty=True)
    assert (tmp_path / "base" / "baseline.json").is_file()
