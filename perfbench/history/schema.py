"""The store's tables and their versioned migrations.

`schema_version` holds one row: the version the store is at. Opening a store applies every migration above it,
in one transaction, so an old store opens in a new release; a store of a newer release is refused (one line).
Versions:
  1  folders (one per ingested folder: commit, its first-parent order, scenario, machine, software, emulation)
     and points (a run's median, a plan's paired speed-up, an ab verdict; each with its CI and count)
  2  op_families: each run's top op families by time, from its trace tables
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    inspect,
    select,
)

from perfbench.errors import UserError

metadata = MetaData()

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))

folders = Table(
    "folders", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("identity", String, nullable=False),  # the folder's resolved path
    Column("content_hash", String, nullable=False, unique=True),
    Column("kind", String, nullable=False),  # results | ab | baseline
    Column("sha", String),
    Column("dirty", Boolean),
    Column("commit_order", Integer),  # first-parent position; NULL: a one-off outside the repository's history
    Column("base_sha", String),  # ab folders: the base arm's commit
    Column("scenario", String, nullable=False),
    Column("machine_key", String, nullable=False),
    Column("software_key", String, nullable=False),
    Column("emulated", Boolean, nullable=False),
    Column("recorded_at", String, nullable=False),
    Column("ingested_at", String, nullable=False),
)
Index("folders_identity", folders.c.identity)

points = Table(
    "points", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("folder_id", Integer, ForeignKey("folders.id", ondelete="CASCADE"), nullable=False),
    Column("family", String, nullable=False),  # median | speedup | ab | once (compile, first iteration)
    Column("run_id", String, nullable=False),
    Column("plan", String, nullable=False),
    Column("shape", String, nullable=False),
    Column("metric", String, nullable=False),
    Column("value", Float, nullable=False),
    Column("low", Float),
    Column("high", Float),
    Column("n", Integer, nullable=False),
    Column("verdict", String, nullable=False),
    Column("basis", String, nullable=False),
)
Index("points_series", points.c.family, points.c.plan, points.c.metric)
Index("points_folder", points.c.folder_id)

op_families = Table(
    "op_families", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("folder_id", Integer, ForeignKey("folders.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", String, nullable=False),
    Column("plan", String, nullable=False),
    Column("side", String, nullable=False),
    Column("family", String, nullable=False),
    Column("total_us", Float, nullable=False),
    Column("rank", Integer, nullable=False),
)
Index("op_families_folder", op_families.c.folder_id)


def _v1(conn: Connection) -> None:
    for table in (schema_version, folders, points):
        table.create(conn)
    conn.execute(schema_version.insert().values(version=0))


def _v2(conn: Connection) -> None:
    op_families.create(conn)


MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1, 2: _v2}
LATEST = max(MIGRATIONS)


def version_of(conn: Connection) -> int:
    """0 for an empty database; refused when it holds other tables than a history store's."""
    names = set(inspect(conn).get_table_names())
    if "schema_version" not in names:
        if names:
            raise UserError(f"holds other tables ({', '.join(sorted(names)[:3])}), not a perfbench history store")
        return 0
    version = conn.execute(select(schema_version.c.version)).scalar()
    if not isinstance(version, int):
        raise UserError("schema_version holds no version: not a perfbench history store")
    return version


def migrate(conn: Connection, up_to: int = LATEST) -> int:
    """Bring the store to `up_to` (inside the caller's transaction); returns the version it was at."""
    found = version_of(conn)
    if found > LATEST:
        raise UserError(f"schema version {found} is newer than this perfbench reads ({LATEST}); upgrade perfbench")
    for version in range(found + 1, up_to + 1):
        MIGRATIONS[version](conn)
        conn.execute(schema_version.update().values(version=version))
    return found
