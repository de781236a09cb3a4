"""No value read from a folder, a store or a user's file reaches a subprocess as an option.

The audit walks every call in perfbench/ that starts a process (subprocess, os.system/exec/spawn, asyncio) or
hands a command to one of perfbench's own starters, and checks it against AUDITED: each call site with the guard
that keeps its values from being read as options. A new call site fails until it is audited here; a guard removed
from an audited site fails too. The behavioural tests plant option-shaped commits ("--output=FILE", "--stdin",
"HEAD~1") where perfbench reads commits (results.jsonl, ab.json, a ref on the command line) and show that nothing
is created, nothing is read from stdin, and the refusal is one line."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.errors import UserError
from perfbench.git_refs import resolve_commit
from perfbench.history.git_order import first_parent_order, resolve_ref
from perfbench.measure.node_launch import NodeLaunch
from perfbench.results import RunSpec
from perfbench.run.launcher import worker_command
from tests.cli_helpers import one_error_line

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "perfbench"
BASELINE = REPO / "baselines" / "ci_smoke"

PROCESS_CALLS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
    "os": {"system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe",
           "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "posix_spawn",
           "posix_spawnp"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
}
# perfbench's own functions that pass their arguments on to a process: their callers are call sites too
STARTERS = {("perfbench/run/arms.py", "_git"), ("perfbench/run/arms.py", "_run"), ("perfbench/tools/bisect.py", "_git"),
            ("perfbench/measure/git_state.py", "_git"), ("perfbench/history/git_order.py", "_git"),
            ("perfbench/run/launcher.py", "start_in_group"),
            ("perfbench/run/launcher.py", "run_process"), ("perfbench/run/worker_process.py", "WorkerProcess")}

CONSTANTS = "constants"  # every argument after the first (the repository) is a string literal
# (file, enclosing function, callee) -> what must appear in the call (or, for "scope:", in the enclosing top-level
# function or class), or CONSTANTS
AUDITED: dict[tuple[str, str, str], tuple[str, ...]] = {
    # a ref the user typed or a recorded sha: after --end-of-options, and only a sha comes back
    ("perfbench/git_refs.py", "resolve_commit", "subprocess.run"): ("END_OF_OPTIONS", "stdin=subprocess.DEVNULL"),
    # passes its arguments on (absolute repository, no stdin); every caller below is audited
    ("perfbench/history/git_order.py", "_git", "subprocess.run"): ("git_command(", "stdin=subprocess.DEVNULL"),
    ("perfbench/history/git_order.py", "is_shallow", "_git"): (CONSTANTS,),
    ("perfbench/history/git_order.py", "mainline_positions", "_git"): (CONSTANTS,),
    # a stored sha or a typed ref: checked as a sha before git where stored, and after --end-of-options anyway
    ("perfbench/history/git_order.py", "first_parent_order", "_git"): ("END_OF_OPTIONS", "scope:if not is_sha(sha)"),
    ("perfbench/history/git_order.py", "commit_date", "_git"): ("END_OF_OPTIONS", "scope:if not is_sha(sha)"),
    ("perfbench/history/git_order.py", "resolve_ref", "_git"): ("END_OF_OPTIONS",),
    # stored shas on stdin, each checked to be hex first (stdin carries nothing else)
    ("perfbench/history/git_order.py", "topo_ranks", "subprocess.run"): ("git_command(", "scope:if is_sha(sha)"),
    # passes its arguments on; every caller below is audited
    ("perfbench/measure/git_state.py", "_git", "subprocess.run"): ("stdin=subprocess.DEVNULL",),
    ("perfbench/measure/git_state.py", "git_state", "_git"): (CONSTANTS,),
    # the folder a package was imported from (never a value read from a results folder)
    ("perfbench/measure/code_origin.py", "_checkout_state", "_git"): (CONSTANTS,),
    ("perfbench/run/arms.py", "_git", "subprocess.run"): ("git_command(", "stdin=subprocess.DEVNULL"),
    ("perfbench/run/arms.py", "repository_of", "_git"): (CONSTANTS,),
    ("perfbench/run/arms.py", "_arm", "_git"): ('"--"', "checked_sha("),  # worktree add; the rest constants
    ("perfbench/run/arms.py", "prune_stale", "_git"): (CONSTANTS,),
    ("perfbench/run/arms.py", "_run", "subprocess.run"): ("git_command(", "stdin=subprocess.DEVNULL"),
    ("perfbench/run/arms.py", "_token_of", "_run"): (CONSTANTS,),
    ("perfbench/run/arms.py", "_user_changes", "_run"): (CONSTANTS,),
    # a worktree path from `git worktree list` (or the one just added): after --, absolute
    ("perfbench/run/arms.py", "_remove_worktree", "_run"): ('"--"', ".absolute()"),
    ("perfbench/run/arms.py", "_arm", "_run"): ('"--"', ".absolute()"),
    ("perfbench/tools/bisect.py", "_git", "subprocess.run"): ("git_command(", "stdin=subprocess.DEVNULL"),
    ("perfbench/tools/bisect.py", "first_parent_range", "_git"): ("END_OF_OPTIONS",),
    # the worker's and torchrun's options: values from a spec or a scenario joined to their option
    ("perfbench/run/launcher.py", "start_in_group", "subprocess.Popen"): ("cmd",),
    ("perfbench/run/launcher.py", "run_process", "start_in_group"): ("cmd",),
    ("perfbench/run/attempt.py", "execute", "run_process"): ("worker_command(",),
    ("perfbench/run/executors/follower.py", "run_node_share", "run_process"): ("worker_command(",),
    ("perfbench/run/worker_process.py", "WorkerProcess.__init__", "start_in_group"): ("command(",),
    ("perfbench/run/ab.py", "start_worker", "WorkerProcess"): ('scope:f"--specs={', 'scope:f"--out={'),
    ("perfbench/run/reused_worker.py", "ReusedWorker._job", "WorkerProcess"): ('scope:f"--sweep={',),
    # torchrun of verify's two ranks: constants and a spec file perfbench wrote, absolute
    ("perfbench/tools/verify/parallel.py", "_run_torchrun", "subprocess.Popen"): ("scope:spec_path.absolute()",),
}


def _callee(call: ast.Call, starters: set[str]) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.attr in PROCESS_CALLS.get(func.value.id, set()):
            return f"{func.value.id}.{func.attr}"
    if isinstance(func, ast.Name) and func.id in starters:
        return func.id
    return None


Site = tuple[ast.Call, str, str]  # the call, its source, the source of its enclosing top-level def or class


class _Finder(ast.NodeVisitor):
    def __init__(self, rel: str, text: str, starters: set[str]) -> None:
        self.rel, self.text, self.starters = rel, text, starters
        self.scope: list[str] = []
        self.top: ast.AST | None = None
        self.found: dict[tuple[str, str, str], list[Site]] = {}

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        outer = self.top
        self.scope.append(node.name)
        self.top = outer or node
        self.generic_visit(node)
        self.scope.pop()
        self.top = outer

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _enter

    def visit_Call(self, node: ast.Call) -> None:
        if callee := _callee(node, self.starters):
            top = ast.get_source_segment(self.text, self.top) if self.top is not None else self.text
            self.found.setdefault((self.rel, ".".join(self.scope), callee), []).append(
                (node, ast.get_source_segment(self.text, node) or "", top or ""))
        self.generic_visit(node)


def call_sites(package: Path = PACKAGE) -> dict[tuple[str, str, str], list[Site]]:
    """(file, enclosing function, callee) -> every process-starting call there, for all of perfbench/."""
    found: dict[tuple[str, str, str], list[Site]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        text = path.read_text()
        starters = {name for file, name in STARTERS
                    if file == rel or f"import {name}" in text or f" {name}," in text or f", {name}" in text}
        finder = _Finder(rel, text, starters)
        finder.visit(ast.parse(text))
        found.update(finder.found)
    return found


# starters whose first argument is the repository (git -C, made absolute by git_refs.git_command)
REPO_FIRST = {"perfbench/run/arms.py", "perfbench/tools/bisect.py", "perfbench/history/git_order.py"}


def _constant(call: ast.Call, file: str) -> bool:
    """Every argument a literal, but for a leading repository: nothing read from anywhere reaches git."""
    args = call.args[1:] if file in REPO_FIRST else call.args
    return bool(call.args) and all(isinstance(a, ast.Constant) for a in args)


def audit_failures(found: dict[tuple[str, str, str], list[Site]]) -> list[str]:
    """What is wrong with the call sites against AUDITED ([] when every site is audited and keeps its guard)."""
    failures = [f"{key}: not audited; add it to AUDITED with its guard" for key in sorted(set(found) - set(AUDITED))]
    failures += [f"{key}: audited, no longer there" for key in sorted(set(AUDITED) - set(found))]
    for key, guards in AUDITED.items():
        for call, source, scope in found.get(key, []):
            if _constant(call, key[0]):
                continue  # nothing but literals (`_git(repo, "status", ...)` beside a guarded call)
            if guards == (CONSTANTS,):
                failures.append(f"{key}: not constant: {ast.unparse(call)}")
            for guard in guards:
                text, where = (guard.removeprefix("scope:"), scope) if guard.startswith("scope:") else (guard, source)
                if guard != CONSTANTS and text not in where:
                    failures.append(f"{key}: guard {guard!r} is gone from {source!r}")
    return failures


def test_every_subprocess_call_site_is_audited_with_its_guard():
    assert audit_failures(call_sites()) == []


def test_no_process_is_started_another_way():
    # a call the audit cannot see: `from subprocess import run`, a shell, os.system by another name
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in PROCESS_CALLS:
                names = {a.name for a in node.names} & PROCESS_CALLS[node.module]
                assert not names, f"{path}: imports {names} from {node.module}; call {node.module}.X instead"
            if isinstance(node, ast.keyword) and node.arg == "shell":
                assert isinstance(node.value, ast.Constant) and node.value.value is False, f"{path}: shell=True"


def test_the_audit_sees_a_new_unguarded_call(tmp_path: Path):
    # the audit itself: a planted module with an unguarded git call is found, and so is a call of a starter
    package = tmp_path / "perfbench"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "planted.py").write_text(
        "import subprocess\nfrom perfbench.run.launcher import run_process\n\n\ndef ingest(sha):\n"
        "    subprocess.run(['git', 'show', sha])\n\n\ndef start(cmd):\n    run_process(cmd)\n")
    git_order = package / "history" / "git_order.py"  # and a guard taken away
    git_order.write_text(git_order.read_text().replace('"--count", END_OF_OPTIONS, sha)', '"--count", sha)'))
    failures = audit_failures(call_sites(package))
    assert len(failures) == 3, failures
    assert "('perfbench/planted.py', 'ingest', 'subprocess.run'): not audited" in failures[0]
    assert "('perfbench/planted.py', 'start', 'run_process'): not audited" in failures[1]
    assert "first_parent_order" in failures[2] and "'END_OF_OPTIONS' is gone" in failures[2], failures[2]


# ---- behaviour: option-shaped commits are refused where they are read -------------------------------------

OPTION_SHAPED = ["--output={target}", "--stdin", "HEAD~1", "-o{target}"]


def _folder_with_commit(folder: Path, commit: str) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(BASELINE / "scenario.json", folder / "scenario.json")
    lines = [json.loads(line) for line in (BASELINE / "results.jsonl").read_text().splitlines()]
    for record in lines:
        record["env"]["git_sha"], record["env"]["git_dirty"] = commit, False
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


@pytest.mark.parametrize("shape", OPTION_SHAPED)
def test_a_recorded_commit_shaped_like_an_option_is_refused_by_ingest_and_gate(tmp_path: Path, shape: str):
    target = tmp_path / "created-by-git"
    commit = shape.format(target=target)
    folder = _folder_with_commit(tmp_path / "planted", commit)
    runner = CliRunner()
    ingest = runner.invoke(main, ["history", "ingest", str(folder), "--db", str(tmp_path / "h.sqlite"),
                                  "--repo", str(REPO)], input="perfbench's own stdin\n")
    gate = runner.invoke(main, ["gate", "--confirm", "--baseline", str(BASELINE), "--current", str(folder)])
    for result in (ingest, gate):
        line = one_error_line(result)
        assert "is not a commit sha" in line and "git_sha" in line, line
    assert not target.exists()


@pytest.mark.parametrize("shape", OPTION_SHAPED)
def test_an_ab_record_whose_commit_is_shaped_like_an_option_is_refused(tmp_path: Path, shape: str):
    target = tmp_path / "created-by-git"
    folder = _folder_with_commit(tmp_path / "ab", "b" * 40)
    (folder / "ab.json").write_text(json.dumps({
        "kind": "perfbench ab", "scenario": "ci_smoke", "base": {"ref": "main", "sha": shape.format(target=target)},
        "head": {"ref": "HEAD", "sha": "b" * 40, "dirty": False}, "exit_code": 0, "verdicts": {}}))
    result = CliRunner().invoke(main, ["history", "ingest", str(folder), "--db", str(tmp_path / "h.sqlite"),
                                       "--repo", str(REPO)])
    line = one_error_line(result)
    assert "ab.json.base.sha" in line and "is not a commit sha" in line
    assert not target.exists()


def test_a_commit_clean_and_hex_still_ingests(tmp_path: Path):
    # the near miss: a real sha, abbreviated or full, and the placeholder of an unknown commit
    head = resolve_commit(REPO, "HEAD")
    assert head is not None
    for i, commit in enumerate((head, head[:7], "unknown")):
        folder = _folder_with_commit(tmp_path / f"ok{i}", commit)
        result = CliRunner().invoke(main, ["history", "ingest", str(folder), "--db", str(tmp_path / "h.sqlite"),
                                           "--repo", str(REPO)])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("shape", OPTION_SHAPED)
def test_git_reads_a_ref_as_a_revision_never_as_an_option(tmp_path: Path, shape: str):
    # below the read-side check: every git call that takes a ref or a sha is safe on its own
    from perfbench.run.arms import _arm
    from perfbench.tools.bisect import first_parent_range

    target = tmp_path / "created-by-git"
    ref = shape.format(target=target)
    assert resolve_commit(REPO, ref) is None or shape == "HEAD~1"
    assert resolve_ref(REPO, ref) == resolve_commit(REPO, ref)
    assert first_parent_order(REPO, ref) is None  # not a sha: never asked
    if shape != "HEAD~1":  # a ref the user types may be HEAD~1 (a recorded commit may not: see above)
        with pytest.raises(UserError, match="not a commit"):
            first_parent_range(REPO, ref, "HEAD")
        (tmp_path / "arms").mkdir()
        with pytest.raises(UserError, match="is not a commit"):
            _arm("base", ref, REPO, tmp_path / "arms", "0" * 32)
    assert not target.exists()


def test_a_ref_is_resolved_when_it_is_one():
    # the near miss: real refs still resolve, and only a sha comes back
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert resolve_commit(REPO, "HEAD") == head == resolve_commit(REPO, head[:10])
    assert first_parent_order(REPO, head) is not None


def test_folder_and_scenario_values_are_joined_to_their_options(tmp_path: Path):
    # an --out named like an option, a rendezvous host that starts with "-": each stays the value of its option
    spec = RunSpec(run_id="r", scenario="s", parallel={"world_size": 2, "attn_tp_size": 2, "moe_tp_size": 2,
                                                       "embed_tp_size": 2, "lmhead_tp_size": 2,
                                                       "shared_tp_size": 2})
    cmd = worker_command(spec, Path("--stdin"), Path("--output=x"), port=29999)
    assert "--stdin" not in cmd and "--output=x" not in cmd
    assert "--spec=--stdin" in cmd and "--out=--output=x" in cmd
    args = NodeLaunch(2, 1, 1, "-x:29400").torchrun_args("--stdin", 0)
    assert "-x:29400" not in args and "--stdin" not in args and "--rdzv-endpoint=-x:29400" in args
