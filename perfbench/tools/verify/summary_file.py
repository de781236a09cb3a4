"""summary.json as `perfbench verify --read` accepts it: a typed record checked before anything is rendered, so a
bundle with a wrongly typed field is one line naming the file and the field, never a traceback. Torch-free."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from perfbench.errors import UserError
from perfbench.tools.verify.summary import FORMAT, Summary

Status = Literal["pass", "fail", "skipped"]


class _Part(BaseModel):
    # strict: a reason of 5 or a format of "1" is not what verify wrote; extra keys are a newer writer's
    model_config = ConfigDict(strict=True, extra="ignore")


class CheckFile(_Part):
    name: str
    status: Status
    detail: str = ""
    op: str = ""
    call: str = ""
    error: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class ItemFile(_Part):
    name: str
    status: Status
    reason: str = ""
    seconds: float = 0.0
    checks: list[CheckFile] = Field(default_factory=list)

    @field_validator("seconds", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            raise ValueError("expected a finite number")
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class SummaryFile(_Part):
    format: int = Field(ge=1, le=FORMAT)
    started: str
    platform: str
    series: str
    device_name: str
    device_count: int
    emulation: str | None = None
    quick: bool
    devices: int
    faults: list[str] = Field(default_factory=list)
    versions: dict[str, str | None]
    items: list[ItemFile]


def _field(error: Mapping[str, Any]) -> str:
    return ".".join(str(part) for part in error["loc"]) or "(the document)"


def summary_of(raw: Any, where: str) -> Summary:
    """The Summary of summary.json's parsed `raw`; UserError naming `where` and the first wrong field."""
    if isinstance(raw, dict) and isinstance(raw.get("format"), int) and not isinstance(raw["format"], bool) \
            and raw["format"] > FORMAT:
        raise UserError(f"{where}: summary format {raw['format']} is newer than this perfbench reads ({FORMAT})")
    try:
        parsed = SummaryFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        shown = repr(first.get("input"))
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise UserError(f"{where}: {_field(first)}: {first['msg']}, got {shown}{more}") from None
    return Summary.from_dict(parsed.model_dump())
