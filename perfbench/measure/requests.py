"""The worker's end of the worker protocol (the parent's is perfbench/run/worker_process.py): requests arrive on
stdin as JSON lines, one answer per request goes out on the reply pipe as a JSON line. stdout and stderr are the
worker's log, so nothing a library prints can corrupt an answer."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import IO, Any


def requests() -> Iterator[Any]:
    """The parent's requests, decoded, until it closes stdin."""
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def send_answer(reply: IO[str], answer: Any) -> None:
    """One answer line, flushed at once: the parent is waiting for it."""
    reply.write(json.dumps(answer) + "\n")
    reply.flush()
