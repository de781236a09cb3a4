"""The history store: ingest snapshots in one transaction, read points back, forget folders.

A folder is what it measured, not where it lay (CI writes every pipeline's folder to one path): ingesting content
already stored (the same folder again, a copy, a baseline saved from it) changes nothing; new content of a run
already stored (a resumed sweep: same kind, commit, scenario, machine, software, emulation and start time)
replaces that run's rows; any other new content adds a point, whatever its path.

Writers are serialized (SQLite: BEGIN IMMEDIATE on the file lock; PostgreSQL: a transaction-scoped advisory
lock), so two jobs ingesting at once lose nothing; a write migrates an older store first. Reads take no lock and
never migrate: SQLite runs in write-ahead-log mode, so a reader sees the last commit while a writer's transaction
is open; PostgreSQL reads in a read-only transaction beside the writer. A read of an older store is refused with
what to run (`perfbench history migrate`, or an ingest).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, func, or_, select, text, update
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from perfbench.errors import UserError
from perfbench.history import location, schema
from perfbench.history.records import OpFamily, Point, Snapshot
from perfbench.results.timestamps import utc_timestamp

ADVISORY_LOCK = 0x70657266  # "perf": the one lock every PostgreSQL writer of a history store takes
SHA_PREFIX = re.compile(r"[0-9a-f]{4,64}")
# what SQLite says when it cannot write the file, its -wal or its -shm (a read-only mount or folder)
READ_ONLY = re.compile(r"unable to open database file|readonly database|read-only file system", re.IGNORECASE)


def _one_line(err: BaseException) -> str:
    """A driver's error as one line (they are often several, with SQL and a link)."""
    orig = getattr(err, "orig", None) or err
    first = str(orig).strip().splitlines()
    return first[0] if first else type(orig).__name__


@dataclass
class Store:
    db: str
    engine: Engine

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Errors as one line naming the store, its credentials masked."""
        try:
            yield
        except UserError as err:
            raise UserError(f"--db {location.shown(self.db)}: {location.mask_in(str(err), self.db)}") from None
        except (DBAPIError, SQLAlchemyError) as err:
            line = _one_line(err)
            if self.is_sqlite and READ_ONLY.search(line):
                line = (f"{line}: the store or its folder is read-only (a read-only mount?); an SQLite store is "
                        "kept in write-ahead-log mode, which needs its -wal and -shm files beside it even to read; "
                        "copy it to a writable folder and give that to --db")
            raise UserError(f"--db {location.shown(self.db)}: {location.mask_in(line, self.db)}") from None

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction, the store migrated to the latest schema inside it."""
        with self._errors():
            if self.is_sqlite:
                location.sqlite_path(self.db).parent.mkdir(parents=True, exist_ok=True)
            with self.engine.begin() as conn:
                if self.engine.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK})
                conn.info["perfbench_found_version"] = schema.migrate(conn)
                yield conn

    @contextmanager
    def reading(self) -> Iterator[Connection | None]:
        """A read: no lock, no migration, nothing created; None when nothing is stored yet."""
        if self.is_sqlite and not location.sqlite_path(self.db).exists():
            yield None
            return
        with self._errors(), self.engine.connect() as conn:
            conn.execution_options(perfbench_read=True, postgresql_readonly=True)
            with conn.begin():
                yield conn if schema.require_latest(conn) else None


def open_store(db: str | None) -> Store:
    resolved = location.resolve(db)
    return Store(resolved, location.engine_for(resolved))


def migrate_store(store: Store) -> str:
    """`history migrate`: the store brought to the latest schema (what a write does first), as one line."""
    with store.transaction() as conn:
        found = conn.info["perfbench_found_version"]
    if found == 0:
        return f"created an empty store at schema version {schema.LATEST}"
    if found == schema.LATEST:
        return f"already at schema version {schema.LATEST}"
    return f"migrated from schema version {found} to {schema.LATEST}"


def stored_paths(store: Store, hashes: Iterable[str]) -> dict[str, str]:
    """content hash -> the path it was stored from, for the hashes already stored (an unchanged folder costs
    this look-up only)."""
    wanted = sorted(set(hashes))
    out: dict[str, str] = {}
    with store.reading() as conn:
        if conn is None:
            return out
        f = schema.folders.c
        for first in range(0, len(wanted), 500):  # bound the query's parameters
            out.update(conn.execute(select(f.content_hash, f.path)
                                    .where(f.content_hash.in_(wanted[first:first + 500]))).tuples().all())
    return out


def _drop(conn: Connection, folder_ids: list[int]) -> None:
    conn.execute(delete(schema.points).where(schema.points.c.folder_id.in_(folder_ids)))
    conn.execute(delete(schema.op_families).where(schema.op_families.c.folder_id.in_(folder_ids)))
    conn.execute(delete(schema.folders).where(schema.folders.c.id.in_(folder_ids)))


def _replace_positions(conn: Connection, positions: Mapping[str, int]) -> int:
    """Stored commits whose position is unknown or differs from `positions` (a full first-parent history) are
    placed there; returns how many commits moved."""
    f = schema.folders.c
    stored = conn.execute(select(f.sha, f.commit_order).where(f.sha.is_not(None)).distinct()).tuples().all()
    moved = {sha: positions[sha] for sha, order in stored if sha in positions and order != positions[sha]}
    for sha, order in moved.items():
        conn.execute(update(schema.folders).where(f.sha == sha).values(commit_order=order))
    return len(moved)


def ingest(store: Store, snapshots: list[Snapshot], positions: Mapping[str, int] | None = None) -> list[str]:
    """Store every snapshot (all or nothing); one line per folder: added, replaced or unchanged. `positions`:
    sha -> first-parent position from a full history, which re-places stored commits whose position was unknown
    (ingested from a shallow clone) or wrong."""
    lines = []
    now = utc_timestamp()
    f = schema.folders.c
    with store.transaction() as conn:
        for snap in snapshots:
            same = conn.execute(select(f.path).where(f.content_hash == snap.content_hash)).first()
            if same is not None:
                lines.append(f"unchanged {snap.path}" + (f" (stored as {same.path})" if same.path != snap.path
                                                         else ""))
                continue
            older = list(conn.execute(select(f.id).where(f.run_key == snap.run_key)).scalars())
            if older:  # the same run, its content changed since (a resumed sweep): the new content replaces it
                _drop(conn, older)
            row = snap.model_dump(exclude={"points", "op_families"})
            inserted = conn.execute(schema.folders.insert().values(**row, ingested_at=now)).inserted_primary_key
            assert inserted is not None  # an INSERT of one row always has its key
            folder_id = inserted[0]
            if snap.points:
                conn.execute(schema.points.insert(), [{**p.model_dump(), "folder_id": folder_id} for p in snap.points])
            if snap.op_families:
                conn.execute(schema.op_families.insert(),
                             [{**fam.model_dump(), "folder_id": folder_id} for fam in snap.op_families])
            order = (f"commit #{snap.commit_order}" if snap.commit_order is not None
                     else f"committed {snap.commit_date}" if snap.commit_date else "one-off")
            lines.append(f"{'replaced' if older else 'added'} {snap.path} ({snap.kind}, "
                         f"{(snap.sha or 'no commit')[:10]}, {order}, {len(snap.points)} points)")
        moved = _replace_positions(conn, positions) if positions else 0
    if moved:
        lines.append(f"re-placed {moved} stored commit{'s' * (moved != 1)} on first-parent history")
    return lines


def forget(store: Store, content_hash: str | None, path: str | None, sha_prefix: str | None) -> list[str]:
    """Remove the folders stored with this content (else from this path), or of commits starting with
    `sha_prefix`; one line per folder removed. Nothing matching is an error (a typo must not look done)."""
    f = schema.folders.c
    if sha_prefix is not None and not SHA_PREFIX.fullmatch(sha_prefix):
        raise UserError(f"{sha_prefix!r}: neither a folder nor a commit (4 to 64 hex digits)")
    with store.transaction() as conn:
        if sha_prefix is not None:
            where = f.sha.startswith(sha_prefix, autoescape=True)
        else:
            where = or_(f.content_hash == content_hash, f.path == path)
        rows = conn.execute(select(f.id, f.path, f.kind, f.sha, func.count(schema.points.c.id))
                            .outerjoin(schema.points, schema.points.c.folder_id == f.id).where(where)
                            .group_by(f.id, f.path, f.kind, f.sha).order_by(f.id)).tuples().all()
        if not rows:
            raise UserError(f"{sha_prefix or path}: nothing stored matches (see `perfbench history show`)")
        _drop(conn, [row[0] for row in rows])
    return [f"forgot {p} ({kind}, {(sha or 'no commit')[:10]}, {count} points)" for _id, p, kind, sha, count in rows]


def snapshots(store: Store) -> list[Snapshot]:
    """Everything stored, folder by folder (export, and the round-trip check)."""
    with store.reading() as conn:
        if conn is None:
            return []
        folder_rows = conn.execute(select(schema.folders).order_by(schema.folders.c.id)).mappings().all()
        point_rows = conn.execute(select(schema.points).order_by(schema.points.c.id)).mappings().all()
        family_rows = conn.execute(select(schema.op_families).order_by(schema.op_families.c.id)).mappings().all()
    pts: dict[int, list[Point]] = {}
    for row in point_rows:
        pts.setdefault(row["folder_id"], []).append(Point.model_validate(
            {k: row[k] for k in Point.model_fields}))
    fams: dict[int, list[OpFamily]] = {}
    for row in family_rows:
        fams.setdefault(row["folder_id"], []).append(OpFamily.model_validate(
            {k: row[k] for k in OpFamily.model_fields}))
    return [Snapshot.model_validate({**{k: row[k] for k in Snapshot.model_fields if k in row},
                                     "points": pts.get(row["id"], []), "op_families": fams.get(row["id"], [])})
            for row in folder_rows]
