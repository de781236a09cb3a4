"""Start one run's process and supervise it: the worker command (torchrun when world_size > 1), its
environment, the timeout, and killing the whole process group so no rank or compile worker outlives the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from perfbench.lifecycle import sigterm_raises
from perfbench.measure.code_origin import CODE_ROOT, CODE_ROOT_ENV, module_command
from perfbench.measure.node_launch import EXECUTOR_ENV, NODE_RANK_ENV, NodeLaunch
from perfbench.results import RunSpec
from perfbench.results.env_allowlist import torch_copied_credentials

WORKER_MODULE = "perfbench.measure.worker"
KILL_GRACE_S = 5.0  # SIGTERM first so torchrun can stop its ranks; SIGKILL after this
# Where `perfbench` is imported from (not resolved, so a symlinked checkout stays itself); children import
# the same code.
PROJECT_DIR = CODE_ROOT


def free_port() -> int:
    """A TCP port free on loopback right now (the rendezvous binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker_command(spec: RunSpec, spec_path: Path, run_dir: Path, port: int | None = None,
                   python: str = sys.executable, launch: NodeLaunch | None = None) -> list[str]:
    """`python -m perfbench.measure.worker ...`, or the same under torchrun with per-rank logs: on loopback, or
    this node's part of a multi-node `launch`. Each process imports this code, whatever folder it starts in
    (measure/code_origin.py): `python -c BOOTSTRAP CODE_ROOT module ...`, for torchrun and for each rank."""
    # paths joined to their option: an --out of "-x" stays a path
    worker = module_command(python, WORKER_MODULE, f"--spec={spec_path}", f"--out={run_dir}")
    launch = launch or NodeLaunch(nproc_per_node=spec.world_size)
    if spec.world_size <= 1 and not launch.multi_node:
        return worker
    # --no-python: torchrun starts each rank as `worker` says, not as `python -u -m module`
    return module_command(
        python, "torch.distributed.run", *launch.torchrun_args(spec.run_id, port or free_port()),
        "--max-restarts", "0", f"--log-dir={run_dir / 'ranks'}", "--redirects", "3", "--no-python", *worker,
    )


def child_env(spec: RunSpec, base: dict[str, str] | None = None, launch: NodeLaunch | None = None,
              executor: str = "local") -> dict[str, str]:
    """This process's environment + the spec's variables + this node's rank and the executor (for the
    record), less what torch would copy into its compile caches without the allow-list's leave
    (results/env_allowlist.py). Thread settings are left as they are."""
    env = dict(os.environ if base is None else base)
    env.update(spec.env)
    for name in torch_copied_credentials(env, spec.env):  # torch would write them into the compile cache in --out
        del env[name]
    env[NODE_RANK_ENV] = str(launch.node_rank if launch else 0)
    env[EXECUTOR_ENV] = executor
    paths = [str(PROJECT_DIR.absolute()), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONUNBUFFERED", "1")  # worker.log shows progress up to a timeout or kill
    env[CODE_ROOT_ENV] = str(CODE_ROOT)  # the worker refuses to measure other code (measure/code_origin.py)
    return env


@dataclass(frozen=True)
class ProcessOutcome:
    returncode: int | None
    timed_out: bool
    wall_s: float
    signal: int | None  # the signal that ended the process (under torchrun: the first failing rank)


INTERRUPTS = {signal.SIGTERM, signal.SIGINT}


def _child_setup() -> None:
    """In the child before exec: take the signals the runner held back, and die with the runner."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)
    if sys.platform == "linux":  # prctl(PR_SET_PDEATHSIG, SIGTERM): a killed runner leaves no run behind
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


# While a run is supervised, SIGTERM to the runner unwinds like Ctrl-C so the run's group is stopped
# (perfbench/lifecycle.py: the exception says which signal, so the exit code can be the signal's own).
sigterm_as_interrupt = sigterm_raises


def start_in_group(cmd: list[str], env: dict[str, str], log: IO[bytes], cwd: Path | None = None,
                   stdin: int | IO[bytes] = subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()
                   ) -> subprocess.Popen[bytes]:
    """Start `cmd` in its own process group (session), output to `log`, dying with this process."""
    # NOTE: an interrupt raised while Popen forks can be swallowed (an at-fork hook runs the handler) or
    # leave a child without a handle; so interrupts wait until the child exists and we hold its pid.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=stdin, env=env, cwd=cwd,
                                start_new_session=True, preexec_fn=_child_setup, pass_fds=pass_fds)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a pending interrupt is raised here
    except BaseException:
        stop_group(proc)
        raise
    return proc


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process's group, SIGKILL after KILL_GRACE_S, and SIGKILL whatever of the group is left."""
    try:
        _stop(proc)
    finally:
        _signal_group(proc.pid, signal.SIGKILL)  # leftovers: ranks, compile workers


def run_process(cmd: list[str], env: dict[str, str], log_path: Path, timeout_s: float,
                cwd: Path | None = None) -> ProcessOutcome:
    """Run `cmd` in its own process group, output to `log_path`; on timeout or interrupt stop the group."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    timed_out = False
    # SIGTERM unwinds from before the log exists: whoever sees the run start may stop it at once
    with sigterm_as_interrupt(), open(log_path, "wb") as log:
        proc = start_in_group(cmd, env, log, cwd)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            stop_group(proc)  # on timeout or interrupt the run itself; always its leftovers (ranks, compile workers)
    wall = time.monotonic() - start
    rc = proc.returncode
    return ProcessOutcome(rc, timed_out, wall, None if timed_out else ending_signal(rc, log_path))


def ending_signal(returncode: int | None, log_path: Path) -> int | None:
    """The signal that ended the process: a negative return code, 128+N, or torchrun's root cause."""
    if returncode is None or returncode == 0:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode < 128 + 65:
        return returncode - 128
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    # torchrun exits 1 and prints "Root Cause (first observed failure): ... exitcode : -9 (pid: ...)"
    found = re.findall(r"Root Cause.*?exitcode\s*:\s*(-?\d+)", text, re.S)
    if found and int(found[-1]) < 0:
        return -int(found[-1])
    return None


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def rank_log_tails(run_dir: Path, lines: int = 10) -> str:
    """Last lines of each rank's stderr (torchrun layout: ranks/<job>/attempt_N/<rank>/stderr.log)."""
    parts = []
    for path in sorted((run_dir / "ranks").glob("*/attempt_*/*/stderr.log")):
        text = tail(path, lines)
        if text:
            parts.append(f"[rank {path.parent.name}]\n{text}")
    return "\n".join(parts)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
