"""Which history store a command opens: `--db`, else PERFBENCH_HISTORY_DB, else a SQLite file in the per-user
data folder. A path is a SQLite file; a `postgresql://` URL is PostgreSQL (through psycopg 3)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import platformdirs
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from perfbench.errors import UserError

ENV_VAR = "PERFBENCH_HISTORY_DB"
WAIT_ENV_VAR = "PERFBENCH_HISTORY_WAIT_S"
DEFAULT_WAIT_S = 30.0  # how long a writer waits for another one (two CI jobs ingesting at once)


def default_path() -> Path:
    return Path(platformdirs.user_data_dir("perfbench")) / "history.sqlite"


def resolve(db: str | None) -> str:
    """The store as given (option, then environment), else the default SQLite path."""
    return db or os.environ.get(ENV_VAR) or str(default_path())


def is_url(db: str) -> bool:
    return "://" in db


def wait_s() -> float:
    raw = os.environ.get(WAIT_ENV_VAR)
    try:
        return float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        raise UserError(f"{WAIT_ENV_VAR}={raw!r}: not a number of seconds") from None


def shown(db: str) -> str:
    """The store for messages: a URL without its password."""
    if not is_url(db):
        return db
    try:
        return make_url(db).render_as_string(hide_password=True)
    except ArgumentError:
        return db.split("@")[-1]


def _sqlite_engine(path: Path, wait: float) -> Engine:
    if path.exists() and not path.is_file():
        raise UserError(f"--db {path}: not a file")
    parent = path.parent
    for ancestor in (parent, *parent.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                raise UserError(f"--db {path}: {ancestor} is a file, not a folder")
            break
    parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: the driver opens no transaction of its own; store.py says BEGIN IMMEDIATE so that
    # two writers queue on the file lock instead of failing on a lock upgrade
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": wait, "isolation_level": None})

    @event.listens_for(engine, "connect")
    def _pragmas(conn: sqlite3.Connection, _record: object) -> None:
        conn.execute("PRAGMA foreign_keys=ON")

    @event.listens_for(engine, "begin")
    def _begin(conn: object) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # type: ignore[attr-defined]

    return engine


def _postgres_engine(url: str, wait: float) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"--db {shown(url)}: not a database URL") from None
    if parsed.get_backend_name() != "postgresql":
        raise UserError(f"--db {shown(url)}: give a file path (SQLite) or a postgresql:// URL")
    parsed = parsed.set(drivername="postgresql+psycopg")
    return create_engine(parsed, connect_args={"connect_timeout": max(1, int(wait))}, pool_pre_ping=True)


def engine_for(db: str) -> Engine:
    wait = wait_s()
    return _postgres_engine(db, wait) if is_url(db) else _sqlite_engine(Path(db).expanduser(), wait)
