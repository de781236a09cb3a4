"""The store's tables and their versioned migrations.

`schema_version` holds one row: the version the store is at. A write (ingest, forget, `history migrate`) applies
every migration above it in its own transaction, so an old store opens in a new release; a read never migrates
(`require_latest` says to run an ingest or `history migrate`); a store of a newer release is refused (one line).
An empty database gets the latest tables at once; an older store climbs the steps below one by one.
Versions:
  1  folders (one per ingested folder: commit, its first-parent order, scenario, machine, software, emulation)
     and points (a run's median, a plan's paired speed-up, an ab verdict; each with its CI and count)
  2  op_families: each run's top op families by time, from its trace tables
  3  a folder is what it measured, not where it lay: `identity` (its path) becomes `path`, and `run_key` (the run's
     own identity) decides whether new content replaces a stored run or adds a point; `commit_date` orders commits
     whose position is unknown (shallow clones), and positions shared by several commits (stored from a shallow
     clone, every commit at 1) are cleared for a full history to fill in; points carry their CI's `level` and `df`
"""

from __future__ import annotations

import hashlib
import json
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
    column,
    func,
    inspect,
    select,
    table,
    text,
    update,
)

from perfbench.analysis.stats import CI_LEVEL
from perfbench.errors import UserError

metadata = MetaData()

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))

folders = Table(
    "folders", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("path", String, nullable=False),  # where the folder lay when ingested (links; not its identity)
    Column("run_key", String, nullable=False),  # records.Snapshot.run_key
    Column("content_hash", String, nullable=False, unique=True),
    Column("kind", String, nullable=False),  # results | ab | baseline
    Column("sha", String),
    Column("dirty", Boolean),
    Column("commit_order", Integer),  # first-parent position; NULL: unknown (a shallow clone, or a one-off)
    Column("commit_date", String),  # committer date, ISO 8601 UTC; NULL: the commit was not in the repository
    Column("base_sha", String),  # ab folders: the base arm's commit
    Column("scenario", String, nullable=False),
    Column("machine_key", String, nullable=False),
    Column("software_key", String, nullable=False),
    Column("emulated", Boolean, nullable=False),
    Column("recorded_at", String, nullable=False),
    Column("ingested_at", String, nullable=False),
)
Index("folders_run_key", folders.c.run_key)
Index("folders_sha", folders.c.sha)

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
    Column("level", Float),  # the CI's confidence level (NULL in stores before version 3: 0.95)
    Column("df", Float),  # the t interval's degrees of freedom; NULL: a bootstrap or normal interval
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


def _create_latest(conn: Connection) -> None:
    metadata.create_all(conn)
    conn.execute(schema_version.insert().values(version=LATEST))


def _v2(conn: Connection) -> None:
    op_families.create(conn)


def run_key(kind: str, sha: str | None, scenario: str, machine_key: str, software_key: str, emulated: bool,
            recorded_at: str) -> str:
    """A run's own identity: a resumed sweep keeps it (new content replaces the stored run); another pipeline, or
    the same commit measured again later, has another (a new point)."""
    parts = [kind, sha or "", scenario, machine_key, software_key, "emulated" if emulated else "real", recorded_at]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _v3(conn: Connection) -> None:
    conn.execute(text("DROP INDEX IF EXISTS folders_identity"))
    conn.execute(text("ALTER TABLE folders RENAME COLUMN identity TO path"))
    for name in ("run_key", "commit_date"):
        conn.execute(text(f"ALTER TABLE folders ADD COLUMN {name} VARCHAR"))
    for name in ("level", "df"):
        conn.execute(text(f"ALTER TABLE points ADD COLUMN {name} FLOAT"))
    old = table("folders", column("id"), column("kind"), column("sha"), column("scenario"), column("machine_key"),
                column("software_key"), column("emulated"), column("recorded_at"), column("run_key"))
    rows = conn.execute(select(old.c.id, old.c.kind, old.c.sha, old.c.scenario, old.c.machine_key,
                               old.c.software_key, old.c.emulated, old.c.recorded_at)).all()
    for row in rows:
        conn.execute(update(old).where(old.c.id == row.id).values(run_key=run_key(
            row.kind, row.sha, row.scenario, row.machine_key, row.software_key, bool(row.emulated), row.recorded_at)))
    conn.execute(update(points).values(level=CI_LEVEL))  # every interval before version 3 was at 95%
    # a first-parent position belongs to one commit: one shared by several was read in a shallow clone
    shared = (select(folders.c.commit_order).where(folders.c.commit_order.is_not(None))
              .group_by(folders.c.commit_order).having(func.count(folders.c.sha.distinct()) > 1))
    conn.execute(update(folders).where(folders.c.commit_order.in_(shared)).values(commit_order=None))
    for index in folders.indexes:
        index.create(conn)


# version -> the step from the version below (version 1 is the first store: an empty one gets the latest tables)
MIGRATIONS: dict[int, Callable[[Connection], None]] = {2: _v2, 3: _v3}
LATEST = max(MIGRATIONS)


def version_of(conn: Connection) -> int:
    """0 for an empty database; refused when it holds other tables than a history store's."""
    names = set(inspect(conn).get_table_names())
    if "schema_version" not in names:
        if names:
            raise UserError(f"holds other tables ({', '.join(sorted(names)[:3])}), not a perfbench history store")
        return 0
    version = conn.execute(select(schema_version.c.version)).scalar()
    if not isinstance(version, int) or version < 1:
        raise UserError(f"schema_version holds {version!r}, not a version: not a perfbench history store")
    return version


def _refuse_newer(found: int) -> None:
    if found > LATEST:
        raise UserError(f"schema version {found} is newer than this perfbench reads ({LATEST}); upgrade perfbench")


def migrate(conn: Connection) -> int:
    """Bring the store to the latest version (inside the caller's write transaction); returns the version it was
    at (0: it was empty)."""
    found = version_of(conn)
    _refuse_newer(found)
    if found == 0:
        _create_latest(conn)
        return 0
    for version in range(found + 1, LATEST + 1):
        MIGRATIONS[version](conn)
        conn.execute(schema_version.update().values(version=version))
    return found


def require_latest(conn: Connection) -> bool:
    """For a read, which never migrates: False for an empty store (nothing stored yet), True at the latest
    version; an older store is refused with what to run."""
    found = version_of(conn)
    _refuse_newer(found)
    if 0 < found < LATEST:
        raise UserError(f"the store is at schema version {found}, this perfbench reads {LATEST}: run "
                        "`perfbench history migrate` (or an ingest) with this --db first")
    return found == LATEST
