"""What `perfbench verify` found: checks grouped into items, the one-page summary text and summary.md.

Torch-free: `perfbench verify --read` renders a bundle's summary.json with exactly the `render` that printed it
when the bundle was written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tabulate import tabulate

from perfbench.terminal_text import escaped

FORMAT = 1  # summary.json's layout; a reader refuses a newer one
ITEM_NAMES = ("environment", "ops", "model", "parallel", "profile")
PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
MAX_LISTED = 10  # failures (and skips) the one-page summary lists; summary.md lists all


@dataclass
class Check:
    """One verdict inside an item: `detail` says what was measured (or why it was skipped); a failure names
    the NPU `op` involved, the exact `call` where one is known, and the `error`."""

    name: str
    status: str
    detail: str = ""
    op: str = ""
    call: str = ""
    error: str = ""
    data: dict[str, Any] = field(default_factory=dict)  # measured values: results/<item>.json only

    def brief(self) -> dict[str, Any]:
        """The check without its data, as summary.json holds it."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "data"}


@dataclass
class ItemResult:
    name: str
    status: str
    reason: str = ""  # skipped: why; otherwise the first failure, or ""
    seconds: float = 0.0
    checks: list[Check] = field(default_factory=list)

    @classmethod
    def of_checks(cls, name: str, checks: list[Check], seconds: float) -> ItemResult:
        """fail if any check failed; skipped if every check was skipped (or there were none); else pass."""
        failed = [c for c in checks if c.status == FAIL]
        if failed:
            return cls(name, FAIL, f"{failed[0].name}: {failed[0].error or failed[0].detail}", seconds, checks)
        if all(c.status == SKIPPED for c in checks):
            reason = checks[0].detail if checks else "nothing to check"
            return cls(name, SKIPPED, reason, seconds, checks)
        return cls(name, PASS, "", seconds, checks)

    def counts(self) -> str:
        parts = [f"{sum(c.status == s for c in self.checks)} {s}" for s in (PASS, FAIL, SKIPPED)]
        return ", ".join(p for p in parts if not p.startswith("0 "))

    def to_dict(self, with_data: bool = False) -> dict[str, Any]:
        checks = [dataclasses.asdict(c) if with_data else c.brief() for c in self.checks]
        return {"name": self.name, "status": self.status, "reason": self.reason, "seconds": self.seconds,
                "checks": checks}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ItemResult:
        return cls(raw["name"], raw["status"], raw.get("reason", ""), float(raw.get("seconds", 0.0)),
                   [Check(**c) for c in raw.get("checks", [])])


@dataclass
class Summary:
    started: str  # ISO time, UTC
    platform: str  # "910b", "910_93" or "950"
    series: str  # "A2", "A3" or "950"
    device_name: str
    device_count: int
    emulation: str | None  # "emulated npu (910b)", or None on real hardware
    quick: bool
    devices: int
    faults: list[str]  # injected faults (PERFBENCH_VERIFY_FAULT), if any
    versions: dict[str, str | None]
    items: list[ItemResult]
    format: int = FORMAT

    @property
    def failed(self) -> list[ItemResult]:
        return [i for i in self.items if i.status == FAIL]

    @property
    def exit_code(self) -> int:
        """0: nothing failed (skipped items say why they were skipped), 1: some item failed."""
        return 1 if self.failed else 0

    def to_dict(self) -> dict[str, Any]:
        raw = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "items"}
        return {**raw, "items": [i.to_dict() for i in self.items]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Summary:
        fields = {f.name for f in dataclasses.fields(cls)} - {"items"}
        return cls(**{k: raw[k] for k in fields if k in raw}, items=[ItemResult.from_dict(i) for i in raw["items"]])


def _header(s: Summary) -> list[str]:
    # every string here may come from a bundle someone attached (verify --read): escaped, never raw
    mode = "quick" if s.quick else "full"
    versions = "  ".join(f"{escaped(name)} {escaped(value or '-')}" for name, value in s.versions.items())
    lines = [f"perfbench verify ({mode}), started {escaped(s.started)}"]
    if s.emulation:
        lines.append(f"EMULATED: {escaped(s.emulation)}: NPU code paths on CPU under the NPU emulator; its timings "
                     "are CPU timings; nothing here was measured on an Ascend NPU")
    lines += [f"device    {escaped(s.device_name)} x{s.device_count} (platform {escaped(s.platform)}, "
              f"{escaped(s.series)}); --devices {s.devices}",
              f"versions  {versions}"]
    if s.faults:
        lines.append(f"faults    {', '.join(escaped(f) for f in s.faults)} injected (PERFBENCH_VERIFY_FAULT, a test "
                     "hook of the emulator): the failures they cause are expected")
    return lines


def _shorten(text: str, width: int) -> str:
    """One line of at most `width` characters, whitespace joined and control characters escaped."""
    text = escaped(" ".join(text.split()))
    return text if len(text) <= width else text[: width - 3] + "..."


def render(s: Summary) -> str:
    """The one-page summary: header, one row per item, then the failures (op, call, error) and the skips."""
    rows = [(escaped(i.name), i.status.upper() if i.status == FAIL else escaped(i.status), i.counts(),
             f"{i.seconds:.1f}s", _shorten(i.reason, 70)) for i in s.items]
    lines = [*_header(s), "", tabulate(rows, headers=["item", "result", "checks", "time", "detail"],
                                       tablefmt="simple", disable_numparse=True)]
    failures = [(i.name, c) for i in s.items for c in i.checks if c.status == FAIL]
    if failures:
        lines += ["", "failures"]
        for item, c in failures[:MAX_LISTED]:
            lines.append(f"  {escaped(item)} / {escaped(c.name)}" + (f": op {escaped(c.op)}" if c.op else ""))
            if c.call:
                lines.append(f"    call   {_shorten(c.call, 110)}")
            lines.append(f"    error  {_shorten(c.error or c.detail, 110)}")
        if len(failures) > MAX_LISTED:
            lines.append(f"  ... {len(failures) - MAX_LISTED} more in summary.md")
    skips = [f"{escaped(i.name)}: {i.reason}" for i in s.items if i.status == SKIPPED]
    skips += [f"{escaped(i.name)} / {escaped(c.name)}: {c.detail}" for i in s.items if i.status != SKIPPED
              for c in i.checks if c.status == SKIPPED]
    if skips:
        lines += ["", "skipped"]
        lines += [f"  {_shorten(line, 116)}" for line in skips[:MAX_LISTED]]
        if len(skips) > MAX_LISTED:
            lines.append(f"  ... {len(skips) - MAX_LISTED} more in summary.md")
    verdict = "FAIL" if s.failed else "PASS"
    lines += ["", f"result: {verdict} ({len(s.failed)} of {len(s.items)} items failed); exit code {s.exit_code}"]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """One markdown table cell: one line, pipes escaped."""
    return escaped(" ".join(text.split())).replace("|", "\\|")


def render_markdown(s: Summary) -> str:
    """summary.md: the one-page summary, then every check of every item."""
    parts = ["# perfbench verify", "", "```text", render(s), "```"]
    for item in s.items:
        parts += ["", f"## {_cell(item.name)}: {_cell(item.status)}", ""]
        if item.reason:
            parts += [_cell(item.reason), ""]
        rows = [tuple(_cell(v) for v in (c.name, c.status, c.detail, c.op, c.call, c.error)) for c in item.checks]
        if rows:
            parts.append(tabulate(rows, headers=["check", "result", "detail", "op", "call", "error"],
                                  tablefmt="github", disable_numparse=True))
    return "\n".join(parts) + "\n"
