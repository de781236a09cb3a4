"""Which history store a command opens: `--db`, else PERFBENCH_HISTORY_DB, else a SQLite file in the per-user
data folder. A path is a SQLite file; a `postgresql://` URL is PostgreSQL (through psycopg 3).

A store URL is only ever shown through `shown`, which masks every credential it may hold: the password of the
authority (also one with an unencoded `@`, `/` or `?` in it) and the values of `password=`, `sslpassword=` and
any other key naming a password, secret or token."""

from __future__ import annotations

import math
import os
import re
import sqlite3
from pathlib import Path

import platformdirs
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from perfbench.errors import UserError

ENV_VAR = "PERFBENCH_HISTORY_DB"
WAIT_ENV_VAR = "PERFBENCH_HISTORY_WAIT_S"
DEFAULT_WAIT_S = 30.0  # how long a writer waits for another one (two CI jobs ingesting at once)
MASK = "***"
# a key=value pair (in a URL's query, or a libpq key=value string) whose value is a credential
_SECRET_VALUE = re.compile(r"(?i)((?:^|[?&;\s])[^=&;?\s]*(?:pass|secret|token)[^=&;?\s]*\s*=\s*)[^&;\s]*")
# where a URL's query begins: the first `?` followed by key=value (a `?` inside a password has an `@` after it)
_QUERY = re.compile(r"\?[^?@/]*=")


def default_path() -> Path:
    return Path(platformdirs.user_data_dir("perfbench")) / "history.sqlite"


def resolve(db: str | None) -> str:
    """The store as given (option, then environment), else the default SQLite path; an empty `--db` is refused
    (an unset CI variable, `--db "$UNSET"`, must not quietly pick the per-user store)."""
    if db is not None:
        if not db.strip():
            raise UserError("--db is empty: give a SQLite file path or a postgresql:// URL")
        return db
    return os.environ.get(ENV_VAR) or str(default_path())


def is_url(db: str) -> bool:
    return "://" in db


def wait_s() -> float:
    """Seconds a writer waits for another writer: a finite number >= 0."""
    raw = os.environ.get(WAIT_ENV_VAR)
    if not raw:
        return DEFAULT_WAIT_S
    try:
        wait = float(raw)
    except ValueError:
        wait = math.nan
    if not math.isfinite(wait) or wait < 0:
        raise UserError(f"{WAIT_ENV_VAR}={raw!r}: give a finite number of seconds, 0 or more")
    return wait


def shown(db: str) -> str:
    """The store for messages: every credential it may hold masked."""
    masked = _SECRET_VALUE.sub(lambda m: m.group(1) + MASK, db)
    if not is_url(masked):
        return masked
    scheme, _, rest = masked.partition("://")
    query = _QUERY.search(rest)
    authority_end = query.start() if query else len(rest)
    at = rest.rfind("@", 0, authority_end)
    if at < 0:
        return masked
    user, colon, _password = rest[:at].partition(":")
    return f"{scheme}://{user}{colon and ':' + MASK}@{rest[at + 1:]}"


def mask_in(message: str, db: str) -> str:
    """A driver's message with the store's password (in whichever form it was given) masked."""
    out = message
    if is_url(db):
        try:
            password = make_url(db).password
        except (ArgumentError, ValueError):
            password = None
        if password:
            out = out.replace(str(password), MASK)
    return _SECRET_VALUE.sub(lambda m: m.group(1) + MASK, out.replace(db, shown(db)))


def sqlite_path(db: str) -> Path:
    return Path(db).expanduser()


def _check_sqlite_path(path: Path) -> None:
    if path.exists() and not path.is_file():
        raise UserError(f"--db {path}: not a file")
    for ancestor in path.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise UserError(f"--db {path}: {ancestor} is a file, not a folder")
            break


def _sqlite_engine(path: Path, wait: float) -> Engine:
    _check_sqlite_path(path)
    # isolation_level=None: the driver opens no transaction of its own; a write says BEGIN IMMEDIATE so that two
    # writers queue on the file lock instead of failing on a lock upgrade, a read a plain (deferred) BEGIN
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": wait, "isolation_level": None})

    @event.listens_for(engine, "connect")
    def _pragmas(conn: sqlite3.Connection, _record: object) -> None:
        conn.execute("PRAGMA foreign_keys=ON")
        try:
            # write-ahead log: readers see the last commit while a writer's transaction is open (kept in the file)
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError:
            pass  # not a database, or locked by a writer of an older perfbench: the first query says which

    @event.listens_for(engine, "begin")
    def _begin(conn: object) -> None:
        reading = conn.get_execution_options().get("perfbench_read", False)  # type: ignore[attr-defined]
        conn.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")  # type: ignore[attr-defined]

    return engine


def postgres_url(db: str) -> URL:
    """The parsed URL; one line for a URL that does not parse (a port that is not a number, a bad scheme)."""
    try:
        parsed = make_url(db)
        parsed.port  # noqa: B018  (make_url keeps the port as text until asked; a bad one raises here)
    except (ArgumentError, ValueError):
        raise UserError(f"--db {shown(db)}: not a database URL (a postgresql://user@host:port/db URL, the port a "
                        "number)") from None
    if parsed.get_backend_name() != "postgresql":
        raise UserError(f"--db {shown(db)}: give a file path (SQLite) or a postgresql:// URL")
    return parsed


def _postgres_engine(db: str, wait: float) -> Engine:
    parsed = postgres_url(db).set(drivername="postgresql+psycopg")
    # lock_timeout: a writer waits for another writer's advisory lock at most `wait` (0: PostgreSQL's "forever"
    # is never meant, so at least 1 ms)
    options = f"-c lock_timeout={max(1, int(wait * 1000))}"
    return create_engine(parsed, connect_args={"connect_timeout": max(1, int(wait)), "options": options},
                         pool_pre_ping=True)


def engine_for(db: str) -> Engine:
    wait = wait_s()
    return _postgres_engine(db, wait) if is_url(db) else _sqlite_engine(sqlite_path(db), wait)
