"""noise.json: what `perfbench calibrate` recorded of this host's timing noise, for one scenario.

An A/A job (both arms the same code, through the ab engine) is cut into its epochs. Per epoch it keeps every
test's paired log ratios head / base (a test: one run and metric), their estimate (the epoch's 20%-trimmed mean,
perfbench/analysis/paired.py `cluster_estimate`) and the epoch's wall time; per job the start-up (and of it the
compile time), the host kind and its load. The simulated jobs of perfbench/analysis/calibration.py draw whole
epochs from it, so the correlation between the tests of one epoch stays.

Where a noise file for this host kind and scenario lives: the per-user cache (`noise_path`), so that `ab`,
`run` and `gate` find it and say what they could detect; `calibrate` also writes a copy into its result folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from perfbench.errors import UserError
from perfbench.results.host_kind import HostKind
from perfbench.results.op_noise_record import OpNoise
from perfbench.results.validation import record_error

NOISE_FILE = "noise.json"
NOISE_KIND: Final = "perfbench noise"
NOISE_VERSION = 1
MAX_NOISE_BYTES = 64 * 2**20  # a day of epochs is a few MB


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoiseEpoch(_Part):
    """One A/A epoch: its wall time and, per test ("<run_id>/<metric>"), the pairs' log ratios and their estimate."""

    seconds: float = Field(gt=0)
    estimates: dict[str, float]
    log_ratios: dict[str, list[float]] = Field(default_factory=dict)
    probe_ms: list[float] = Field(default_factory=list)


class HostLoad(_Part):
    """How busy the host was while the noise was recorded: the load average before and after, and the CPU time
    other processes took (the share of the host's cores) during the recording."""

    loadavg_before: float | None = None
    loadavg_after: float | None = None
    others_busy_share: float | None = None
    condition: str = ""  # as the user labelled it (--condition), e.g. "quiet" or "beside a niced spinner"


class Detectable(_Part):
    """What the simulation found at the recorded start-up: the smallest slowdown detected in 80% of jobs at `cap_s`,
    and the cap that decides 90% of A/A jobs (None: none up to the largest cap tried)."""

    cap_s: float
    smallest_change: float | None
    recommended_cap_s: float | None = None
    jobs: int = 0


class NoiseRecord(_Part):
    kind: Literal["perfbench noise"] = NOISE_KIND
    version: int = NOISE_VERSION
    scenario: str
    host: HostKind
    load: HostLoad = Field(default_factory=HostLoad)
    commit: str | None = None
    recorded: str = ""  # UTC date and time
    pairs_per_epoch: int = Field(ge=1)
    startup_s: float = Field(ge=0)
    compile_s: float | None = None
    tests: list[str]
    epochs: list[NoiseEpoch]
    detectable: Detectable | None = None
    ops: OpNoise | None = None  # calibrate --ops: op-level A/A noise and what it detects (op_noise_record.py)

    @field_validator("epochs")
    @classmethod
    def _enough(cls, epochs: list[NoiseEpoch]) -> list[NoiseEpoch]:
        if len(epochs) < 3:
            raise ValueError(f"needs at least 3 epochs to resample, has {len(epochs)}")
        return epochs

    def estimates(self, test: str) -> list[float]:
        return [e.estimates[test] for e in self.epochs if test in e.estimates]


NOISE_DIR_ENV = "PERFBENCH_NOISE_DIR"  # where noise files live instead of <per-user cache>/noise (tests set it)


def noise_path(cache: Path, host: HostKind, scenario: str) -> Path:
    """Where the noise file of `scenario` on this host kind lives: under $PERFBENCH_NOISE_DIR, else the per-user
    cache `cache`'s noise/ folder."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in scenario) or "scenario"
    root = Path(os.environ[NOISE_DIR_ENV]) if os.environ.get(NOISE_DIR_ENV) else cache / "noise"
    return root / host.key() / f"{safe}.json"


def read_noise(path: Path) -> NoiseRecord:
    """The noise file at `path`, or a one-line UserError naming the file and what is wrong."""
    try:
        if path.stat().st_size > MAX_NOISE_BYTES:
            raise UserError(f"{path}: {path.stat().st_size} bytes, over the {MAX_NOISE_BYTES} a noise file may have")
        raw = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise UserError(f"{path}: unreadable noise file ({' '.join(str(err).split())})") from None
    if not isinstance(raw, dict) or raw.get("kind") != NOISE_KIND:
        raise UserError(f"{path}: not a perfbench noise file")
    if isinstance(raw.get("version"), int) and raw["version"] > NOISE_VERSION:
        raise UserError(f"{path}: noise file version {raw['version']} is newer than this perfbench reads")
    try:
        return NoiseRecord.model_validate(raw)
    except ValidationError as err:
        raise UserError(record_error(err, f"{path}: noise file", NoiseRecord)) from None
