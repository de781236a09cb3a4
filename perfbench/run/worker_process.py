"""The parent's end of a worker process: one protocol for the sweep's reused worker and `perfbench ab`'s workers.

The worker is started in its own process group with a reply pipe: requests go to its stdin as JSON lines, and it
answers JSON lines on the pipe (its stdout and stderr go to its log). The parent waits for an answer with a
deadline and notices a worker that is gone: the pipe's end of file, or the process ended while a child it forked
still holds the pipe's write end (hence the poll with a timeout rather than a blocking read).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfbench.run.launcher import KILL_GRACE_S, start_in_group, stop_group

POLL_S = 1.0  # how often a wait for an answer checks that the worker is still alive


class WorkerProcess:
    """A worker process started by `command(reply_fd)`, answering JSON lines on its reply pipe."""

    def __init__(self, command: Callable[[int], list[str]], env: dict[str, str], log_path: Path,
                 cwd: Path | None = None) -> None:
        self.log_path = log_path
        read_fd, write_fd = os.pipe()
        try:
            with open(log_path, "ab") as log:
                self.proc = start_in_group(command(write_fd), env, log, cwd=cwd, stdin=subprocess.PIPE,
                                           pass_fds=(write_fd,))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the worker holds it: end of file here means the worker is gone
        self._reply_fd: int | None = read_fd
        self._pending = b""  # bytes after the last whole line: one read can bring several answers
        self._lines: collections.deque[str] = collections.deque()

    def send(self, request: dict[str, Any]) -> bool:
        """Write one request; False when the worker is gone (its end shows at the next `answer`)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # ValueError: stdin already closed
            return False
        return True

    def answer(self, deadline: float) -> Any | None:
        """The next answer, decoded; None when the worker ended without one; TimeoutError at `deadline`
        (time.monotonic())."""
        while not self._lines:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer by the deadline; see {self.log_path}")
            if self._reply_fd is None:
                return None
            ready, _, _ = select.select([self._reply_fd], [], [], min(left, POLL_S))
            if not ready:
                if self.proc.poll() is not None:
                    return None
                continue
            data = os.read(self._reply_fd, 1 << 16)
            if not data:
                return None
            *whole, self._pending = (self._pending + data).split(b"\n")
            self._lines.extend(line.decode() for line in whole if line.strip())
        return json.loads(self._lines.popleft())

    def wait_ended(self, grace_s: float = KILL_GRACE_S) -> int | None:
        """The exit code of a worker that is ending (None if it is still running after `grace_s`)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        return self.proc.returncode

    def close(self, grace_s: float = KILL_GRACE_S) -> None:
        """End the worker: close its stdin (it finishes the request in hand and exits), then stop its group."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            self.wait_ended(grace_s)
        self.kill()

    def kill(self) -> None:
        """Stop the worker's process group now and drop both pipes."""
        stop_group(self.proc)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self._reply_fd is not None:
            os.close(self._reply_fd)
            self._reply_fd = None
