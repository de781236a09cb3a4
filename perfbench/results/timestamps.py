"""The one timestamp format of records: UTC, ISO 8601, whole seconds ("2026-12-01T23:05:00+00:00")."""

from __future__ import annotations

import datetime


def utc_timestamp(when: datetime.datetime | None = None) -> str:
    """`when` (default now) as a record's timestamp."""
    moment = when or datetime.datetime.now(datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")
