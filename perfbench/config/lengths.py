"""Length distributions for ragged workloads: a JSONL of request lengths (no text), one request a line,
`{"input_len": 120, "output_len": 48}`; a run's batch is drawn from it with the scenario's seed.

Shipped (perfbench/config/lengths/): `chat_synthetic` (200 requests; prompt lengths lognormal around 200
tokens, 8-2048, outputs around 48, 4-512; drawn with numpy's default_rng(20261202): synthetic, not a measured
trace; docs/ragged.md says how it was made).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, PositiveInt, ValidationError

from perfbench.errors import UserError

LENGTHS_DIR = Path(__file__).resolve().parent / "lengths"
KEY = "perfbench.workload.lengths"


class RequestLengths(BaseModel):
    """One request of a length distribution."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input_len: PositiveInt
    output_len: PositiveInt


class Draw(BaseModel):
    """A batch drawn from a distribution: each request's lengths, in draw order."""

    model_config = ConfigDict(extra="forbid")

    input_lens: list[int]
    output_lens: list[int]


def lengths_path(name: str) -> Path:
    """A shipped distribution's name, or a path to a JSONL file; UserError when neither exists."""
    shipped = LENGTHS_DIR / f"{name}.jsonl"
    if shipped.is_file():
        return shipped
    path = Path(name).expanduser()
    if path.is_file():
        return path
    names = sorted(p.stem for p in LENGTHS_DIR.glob("*.jsonl"))
    raise UserError(f"{KEY}: {name!r} is no JSONL file and no shipped distribution (shipped: {', '.join(names)})")


def load_lengths(name: str) -> list[RequestLengths]:
    """Every request of the distribution; UserError (one line, naming the line) for a malformed file."""
    path = lengths_path(name)
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(RequestLengths.model_validate(json.loads(line)))
        except (ValueError, ValidationError) as err:
            first = str(err).splitlines()[0] if not isinstance(err, ValidationError) else (
                f"{'.'.join(map(str, err.errors()[0]['loc'])) or 'line'}: {err.errors()[0]['msg']}")
            raise UserError(f"{KEY}: {path.name} line {number}: expected {{\"input_len\": n, \"output_len\": m}} "
                            f"with positive integers ({first})") from None
    if not out:
        raise UserError(f"{KEY}: {path.name} holds no request")
    return out


def draw(requests: list[RequestLengths], batch: int, seed: int) -> Draw:
    """`batch` requests drawn with replacement, reproducibly from (seed, batch)."""
    rng = random.Random(f"lengths-{seed}-{batch}")
    chosen = [rng.choice(requests) for _ in range(batch)]
    return Draw(input_lens=[r.input_len for r in chosen], output_lens=[r.output_len for r in chosen])
