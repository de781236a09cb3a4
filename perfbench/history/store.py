"""The history store: ingest snapshots in one transaction, read points back.

Ingest is idempotent: a folder is keyed by its content hash (results.jsonl and ab.json), so ingesting the same
folder again, or a copy of it (a baseline saved from it), changes nothing; a folder whose content changed (a
resumed sweep) replaces its earlier rows. Writers are serialized (SQLite: BEGIN IMMEDIATE on the file lock;
PostgreSQL: a transaction-scoped advisory lock), so two jobs ingesting at once lose nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, select, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from perfbench.errors import UserError
from perfbench.history import location, schema
from perfbench.history.records import OpFamily, Point, Snapshot
from perfbench.results.timestamps import utc_timestamp

ADVISORY_LOCK = 0x70657266  # "perf": the one lock every PostgreSQL writer of a history store takes


def _one_line(err: BaseException) -> str:
    """A driver's error as one line (they are often several, with SQL and a link)."""
    orig = getattr(err, "orig", None) or err
    first = str(orig).strip().splitlines()
    return first[0] if first else type(orig).__name__


@dataclass
class Store:
    db: str
    engine: Engine

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction, the store migrated to the latest schema inside it; errors as one line."""
        try:
            with self.engine.begin() as conn:
                if self.engine.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK})
                schema.migrate(conn)
                yield conn
        except UserError as err:
            raise UserError(f"--db {location.shown(self.db)}: {err}") from None
        except (DBAPIError, SQLAlchemyError) as err:
            raise UserError(f"--db {location.shown(self.db)}: {_one_line(err)}") from None

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read: an empty or older store is migrated first (the same transaction as a write)."""
        with self.transaction() as conn:
            yield conn


def open_store(db: str | None) -> Store:
    resolved = location.resolve(db)
    return Store(resolved, location.engine_for(resolved))


def ingest(store: Store, snapshots: list[Snapshot]) -> list[str]:
    """Store every snapshot (all or nothing); one line per folder: added, replaced or unchanged."""
    lines = []
    now = utc_timestamp()
    with store.transaction() as conn:
        for snap in snapshots:
            same = conn.execute(select(schema.folders.c.identity)
                                .where(schema.folders.c.content_hash == snap.content_hash)).first()
            if same is not None:
                lines.append(f"unchanged {snap.identity}" + (f" (stored as {same.identity})"
                                                             if same.identity != snap.identity else ""))
                continue
            older = conn.execute(select(schema.folders.c.id)
                                 .where(schema.folders.c.identity == snap.identity)).scalars().all()
            if older:  # the folder changed since: its new content replaces the old
                conn.execute(delete(schema.points).where(schema.points.c.folder_id.in_(older)))
                conn.execute(delete(schema.op_families).where(schema.op_families.c.folder_id.in_(older)))
                conn.execute(delete(schema.folders).where(schema.folders.c.id.in_(older)))
            row = snap.model_dump(exclude={"points", "op_families"})
            inserted = conn.execute(schema.folders.insert().values(**row, ingested_at=now)).inserted_primary_key
            assert inserted is not None  # a one-row insert reports its key
            folder_id = inserted[0]
            if snap.points:
                conn.execute(schema.points.insert(), [{**p.model_dump(), "folder_id": folder_id} for p in snap.points])
            if snap.op_families:
                conn.execute(schema.op_families.insert(),
                             [{**f.model_dump(), "folder_id": folder_id} for f in snap.op_families])
            order = "one-off" if snap.commit_order is None else f"commit #{snap.commit_order}"
            lines.append(f"{'replaced' if older else 'added'} {snap.identity} ({snap.kind}, "
                         f"{(snap.sha or 'no commit')[:10]}, {order}, {len(snap.points)} points)")
    return lines


def snapshots(store: Store) -> list[Snapshot]:
    """Everything stored, folder by folder (export, and the round-trip check)."""
    with store.reading() as conn:
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
