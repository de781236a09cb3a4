"""ab.json: the record of one `perfbench ab` job (perfbench/run/ab.py), read by the gate, the report and history.

Version 2 adds the one-process mode (epochs as clusters), the decision rule's margin, level and looks, Holm's
regressions and the job's status. A version-1 record (worker generations as clusters, no margin) loads with
its clusters read from `processes` / `generation` and the rule it was decided by left at the old values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from perfbench.bounded_files import METADATA_BYTES, read_capped
from perfbench.errors import UserError
from perfbench.results.op_ab_record import OpABRecord
from perfbench.results.records import RecordedCommit
from perfbench.results.validation import record_error
from perfbench.results.verdicts import Verdict

AB_FILE = "ab.json"
AB_BYTES: Final = METADATA_BYTES  # an ab.json holds a few hundred pairs: kilobytes; the cap is a sanity bound
AB_VERSION = 2
AB_KIND: Final = "perfbench ab"
# version 1 wrote no level: every one of its verdicts and looks was decided at 95% (analysis/stats.py CI_LEVEL
# may change; what an old record was decided at does not)
V1_LEVEL = 0.95


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ABArm(_Part):
    ref: str | None = None
    sha: RecordedCommit = None
    model: str | None = None  # the model package the arm imported
    dirty: bool = False


class ABJobSettings(_Part):
    """The settings a job ran with (run/ab.py ABSettings); every field any version wrote, unset when it did not.
    Version 1 called the band `threshold` and had `min_pairs`."""

    max_time_s: float | None = None
    pairs_per_epoch: int | None = None
    pairs_per_process: int | None = None
    min_pairs: int | None = None
    band: float | None = None
    margin: float | None = None
    looks: int | None = None
    processes: str | None = None
    seed: int | None = None
    budget_after_startup: bool | None = None  # --max-time counted from the end of start-up (gate --confirm)
    ops: bool | None = None  # --ops: op epochs after the timed ones

    @model_validator(mode="before")
    @classmethod
    def _version_1(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "threshold" in raw:
            raw = {**raw, "band": raw.get("band", raw["threshold"])}
            raw.pop("threshold")
        return raw


class ABVerdict(_Part):
    """head / base of one (run, metric), judged by perfbench/analysis/paired.py."""

    ratio: float
    ci_low: float
    ci_high: float
    pairs: int = 0
    clusters: int = 0
    band: float = 0.05
    margin: float = 0.0
    level: float = V1_LEVEL
    method: str = "bootstrap"
    verdict: Verdict
    p_slower: float | None = None
    regression: bool = False  # a "slower" that survives Holm across the job's (run, metric) tests
    clusters_needed: int | None = None
    seconds_needed: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _version_1(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "processes" in raw:
            raw = {**raw, "clusters": raw["processes"]}
            raw.pop("processes")
            raw.setdefault("regression", raw.get("verdict") == "slower")
        return raw


class ABTimed(_Part):
    """One arm's iteration of a pair (None: not measured)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    probe_ms: float | None = None  # the host probe read just before the pair


class ABPair(_Part):
    run_id: str
    cluster: int  # the epoch (one process) or worker generation (two processes)
    index: int  # the pair's number within its run and cluster
    base_first: bool
    base: ABTimed
    head: ABTimed

    @model_validator(mode="before")
    @classmethod
    def _version_1(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "generation" in raw:
            raw = {**raw, "cluster": raw["generation"]}
            raw.pop("generation")
        return raw


class ABLook(_Part):
    """One look of the sequential decision."""

    look: int
    final: bool = False
    elapsed_s: float
    pairs: int  # per run, the fewest
    clusters: int = 0
    level: float = V1_LEVEL
    verdicts: dict[str, dict[str, str]]

    @model_validator(mode="before")
    @classmethod
    def _version_1(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "generation" in raw:
            raw = {**raw, "look": raw["generation"], "clusters": raw["generation"]}
            raw.pop("generation")
        return raw


class ABRecord(_Part):
    kind: Literal["perfbench ab"] = AB_KIND
    version: int = AB_VERSION
    scenario: str = ""
    emulation: str | None = None  # emulated npu: CPU timings of emulated ops, never a real NPU's
    base: ABArm = Field(default_factory=ABArm)
    head: ABArm = Field(default_factory=ABArm)
    mode: Literal["one process", "two processes"] = "two processes"
    mode_reason: str = ""  # why two processes, when one was not possible
    settings: ABJobSettings = Field(default_factory=ABJobSettings)
    status: Literal["ok", "error", "interrupted"] = "ok"
    stopped: str = ""
    startup_s: float | None = None  # from the start of the job until every arm was built and ready
    compile_s: float | None = None  # of the start-up, the seconds the builds spent compiling
    epoch_seeds: list[int] = Field(default_factory=list)  # each cluster's order seed (a replay draws the same)
    cluster_seconds: list[float] = Field(default_factory=list)  # wall time of each epoch / worker generation
    exit_code: int = 3
    verdicts: dict[str, dict[str, ABVerdict]] = Field(default_factory=dict)
    trail: list[ABLook] = Field(default_factory=list)
    pairs: list[ABPair] = Field(default_factory=list)
    ops: OpABRecord | None = None  # `ab --ops`: which op groups moved (op_ab_record.py)

    @model_validator(mode="before")
    @classmethod
    def _version(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            version = raw.get("version", 1)
            if isinstance(version, int) and version > AB_VERSION:
                raise ValueError(f"version {version} is newer than this perfbench reads ({AB_VERSION})")
            raw = {**raw, "version": version}
        return raw

    def ratios(self) -> list[ABVerdict]:
        return [v for per in self.verdicts.values() for v in per.values()]


def read_ab_record(folder: Path, name: str | None = None) -> ABRecord:
    """The folder's ab.json as a typed record, or a one-line UserError naming the file and the field."""
    path = Path(folder) / AB_FILE
    where = name or str(path)
    try:
        raw = json.loads(read_capped(path, AB_BYTES))
    except (OSError, ValueError, RecursionError) as err:
        raise UserError(f"{where}: unreadable {AB_FILE} ({' '.join(str(err).split())})") from None
    if not isinstance(raw, dict) or raw.get("kind", AB_KIND) != AB_KIND:
        raise UserError(f"{where}: {AB_FILE} is not a perfbench ab record")
    try:
        return ABRecord.model_validate(raw)
    except ValidationError as err:
        raise UserError(record_error(err, f"{where}: {AB_FILE}", ABRecord)) from None


def is_ab_folder(folder: Path) -> bool:
    return (Path(folder) / AB_FILE).is_file()
