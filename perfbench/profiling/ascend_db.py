"""ascend_pytorch_profiler_{rank}.db (torch_npu `export_type=db`) -> the same kernel table and host context as
the text export, so both exports give one events table (profiler_formats.md 6).

What is read, all times integer ns (epoch):
  TASK ⋈ COMPUTE_TASK_INFO (on globalTaskId)  compute kernels: name, op type, accelerator core, input shapes,
                                              stream, start/end; the rows of kernel_details.csv
  COMMUNICATION_OP                            collectives (`hcom_*`): the communication rows of kernel_details
  PYTORCH_API (type `op` of ENUM_API_TYPE)    the host ops and record_function ranges trace_view.json holds as
                                              cpu_op events (times are TEXT there)
  CONNECTION_IDS                              host op -> device work: PYTORCH_API.connectionId is an `id` here,
                                              its `connectionId`s are those of TASK / COMMUNICATION_OP rows
  STEP_TIME                                   step windows: the `Step Id` of a kernel without a step context
  TASK_PMU_INFO                               only whether it is there: AI Core metrics mean Level1 or 2
Names and types are STRING_IDS ids. Only STRING_IDS, TASK and COMPUTE_TASK_INFO (and their key columns) are
required; without PYTORCH_API the kernels have no phase/layer/module, as a folder without trace_view.json.

A file that is not SQLite, or lacks a required table or column, is a one-line UserError naming the file and
the table. So is one whose join keys repeat (`UNIQUE_KEYS`: the format's keys, the fixture's PRIMARY KEYs):
a join on a repeated key multiplies its rows, so a small crafted file would read as millions of kernels. Each
query is also capped at the rows of the table it reads (`_Db.query`'s `most`), whatever the keys hold. Rows
whose times are missing, not integers, negative, reversed or beyond `events.MAX_TIME_US` are skipped and counted
(`SkippedEvents`), as kernel_details.csv rows are.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfbench.bounded_files import check_size
from perfbench.errors import UserError
from perfbench.profiling.ascend_kernels import EXPECTED_COLUMNS, KernelDetails
from perfbench.profiling.events import MAX_TIME_US, SkippedEvents
from perfbench.profiling.scopes import OP, SCOPE, is_context_range
from perfbench.profiling.shapes import ascend_shapes_text
from perfbench.profiling.trace_view import DeviceTask, TraceView, assemble_view

DB_GLOB = "ascend_pytorch_profiler*.db"
REQUIRED = {"STRING_IDS": ("id", "value"), "TASK": ("startNs", "endNs", "globalTaskId"),
            "COMPUTE_TASK_INFO": ("globalTaskId", "name")}
# Read when present, each with the columns it cannot be used without
OPTIONAL = {"COMMUNICATION_OP": ("opName", "startNs", "endNs"),
            "PYTORCH_API": ("startNs", "endNs", "globalTid", "name"),
            "CONNECTION_IDS": ("id", "connectionId"), "STEP_TIME": ("id", "startNs", "endNs"),
            "ENUM_API_TYPE": ("id", "name"), "TASK_PMU_INFO": ("globalTaskId",)}
# Keys the joins rely on being unique (STRING_IDS.id and COMPUTE_TASK_INFO.globalTaskId are PRIMARY KEYs in a
# real export; TASK.globalTaskId identifies one task). Checked at open; a repeat is refused, not multiplied.
UNIQUE_KEYS = (("STRING_IDS", "id"), ("TASK", "globalTaskId"), ("COMPUTE_TASK_INFO", "globalTaskId"))
API_TYPE_OP = 50001  # ENUM_API_TYPE's documented id of `op`, used when the file has no ENUM_API_TYPE
COMMUNICATION_CORE = "COMMUNICATION"
_MAX_NS = int(MAX_TIME_US * 1000)
_MISSING = -1  # what `_ns` gives for a time that is not an integer ns (valid times are >= 0)
UNNAMED = "(unnamed)"  # a name id that STRING_IDS does not hold


@dataclass
class AscendDb:
    """One .db, read: `details` as kernel_details.csv would give it (canonical headers, `start_ns`), `view`
    as trace_view.json would (host ops with context, device tasks with their issuing op's context)."""

    path: Path
    details: KernelDetails
    view: TraceView
    has_host: bool  # PYTORCH_API was there: kernels can have context
    level_hint: str = "unknown"  # for want of profiler_info: Level0 (op types N/A), Level1+ (PMU table), unknown


def _ns(column: str) -> str:
    """SQL for a time column as integer ns, `_MISSING` when it is not one (SQLite keeps any type in any
    column; PYTORCH_API declares its times TEXT)."""
    return (f"COALESCE(CASE WHEN typeof({column}) = 'integer' THEN {column} "
            f"WHEN typeof({column}) = 'text' AND {column} <> '' AND {column} NOT GLOB '*[^0-9]*' "
            f"AND length({column}) <= 19 THEN CAST({column} AS INTEGER) END, {_MISSING})")


def _quoted(name: str) -> str:
    """An SQL identifier in double quotes, a quote inside it doubled (a table may be named `we"ird`)."""
    return '"' + name.replace('"', '""') + '"'


DB_BYTES = 64 * 1024**3  # far beyond any profiler export; SQLite itself reads only the pages a query needs


def _opened(uri: str) -> tuple[sqlite3.Connection, dict[str, set[str]]]:
    """The connection and each table's columns (a table name may hold any character, a quote too)."""
    conn = sqlite3.connect(uri, uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns = {t: {r[1] for r in conn.execute(f'PRAGMA table_info("{t.replace(chr(34), chr(34) * 2)}")')}
                   for t in tables}
    except sqlite3.Error:
        conn.close()
        raise
    return conn, columns


class _Db:
    """The open file and what it holds; every SQLite error becomes one line naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if check_size(path, DB_BYTES) == 0:  # SQLite reads pages as it needs them: the cap is a sanity bound
            raise UserError(f"{path}: empty file (0 bytes): not an ascend_pytorch_profiler .db")
        uri = f"{path.resolve().as_uri()}?mode=ro"
        try:
            try:
                self.conn, self.columns = _opened(uri)
            except sqlite3.OperationalError as err:
                if "unable to open" not in str(err):
                    raise
                # a WAL file (torch_npu writes them so) on a read-only mount: SQLite cannot create its -shm beside
                # it even to read; a profiler export is written once and closed, so it is read as immutable
                self.conn, self.columns = _opened(f"{uri}&immutable=1")
        except sqlite3.Error as err:
            raise UserError(f"{path}: not an SQLite database ({err})") from None
        for table, needed in REQUIRED.items():
            self._check(table, needed, required=True)
        for table, key in UNIQUE_KEYS:
            self._check_unique(table, key)

    def _check_unique(self, table: str, key: str) -> None:
        found = self.query(f"SELECT {_quoted(key)} AS k FROM {_quoted(table)} WHERE {_quoted(key)} IS NOT NULL "
                           f"GROUP BY {_quoted(key)} HAVING count(*) > 1 LIMIT 1")
        if len(found):
            shown = repr(found["k"].tolist()[0])
            raise UserError(f"{self.path}: table {table} repeats its key {key} ({shown[:40]}); a profiler export "
                            "holds each once, and a join on a repeated key would multiply its rows")

    def rows(self, table: str) -> int:
        """How many rows `table` holds (the cap of a query reading it)."""
        return int(self.query(f"SELECT count(*) AS n FROM {_quoted(table)}")["n"].iloc[0])

    def _check(self, table: str, needed: tuple[str, ...], required: bool) -> bool:
        if table not in self.columns:
            if required:
                raise UserError(f"{self.path}: no {table} table; an ascend_pytorch_profiler .db has "
                                f"{', '.join(REQUIRED)} (is it torch_npu's export_type=db output?)")
            return False
        missing = [c for c in needed if c not in self.columns[table]]
        if missing:
            raise UserError(f"{self.path}: table {table} lacks column(s) {', '.join(missing)}")
        return True

    def has(self, table: str) -> bool:
        return table in OPTIONAL and self._check(table, OPTIONAL[table], required=False)

    def column(self, table: str, alias: str, column: str) -> str:
        """`alias.column` as an integer (`_MISSING` when null or not an integer, so pandas keeps int64: a
        globalTid exceeds a float's 2**53), or `_MISSING` when the table has no such column (a column of a
        newer or older schema)."""
        return _ns(f"{alias}.{column}") if column in self.columns[table] else str(_MISSING)

    def query(self, sql: str, params: tuple = (), most: tuple[str, int] | None = None) -> pd.DataFrame:
        """The rows of `sql`; with `most` (table, its row count), more rows than that table holds is a
        one-line UserError instead of a fetch that grows with a join's product."""
        try:
            cursor = self.conn.execute(sql, params)
            if most is None:
                fetched = cursor.fetchall()
            else:
                table, limit = most
                fetched = []
                while chunk := cursor.fetchmany(10_000):
                    fetched += chunk
                    if len(fetched) > limit:
                        raise UserError(f"{self.path}: reading table {table} gives more rows than its {limit:,} "
                                        "(a key it is joined on repeats); not a profiler export this reader takes")
            return pd.DataFrame(fetched, columns=[d[0] for d in cursor.description])
        except sqlite3.Error as err:
            raise UserError(f"{self.path}: cannot read it ({err})") from None

    def close(self) -> None:
        self.conn.close()


def _usable(frame: pd.DataFrame, table: str, skipped: SkippedEvents) -> pd.DataFrame:
    """Rows whose start_ns / end_ns are usable times; the others counted in `skipped` by reason."""
    start, end = frame["start_ns"].to_numpy(dtype=np.int64), frame["end_ns"].to_numpy(dtype=np.int64)
    reasons = np.select(
        [start == _MISSING, end == _MISSING, (start > _MAX_NS) | (end > _MAX_NS), end < start],
        [f"{table} startNs is missing or not an integer ns", f"{table} endNs is missing or not an integer ns",
         f"{table} time beyond {MAX_TIME_US:.0e} µs", f"{table} endNs before startNs"], default="")
    for i in np.flatnonzero(reasons != "").tolist():
        skipped.add(str(reasons[i]), f"row {frame['row'].iloc[i]} {str(frame['name'].iloc[i])[:60]!r}")
    return frame[reasons == ""].reset_index(drop=True)


def _strings(db: _Db, table: str, alias: str, column: str) -> tuple[str, str]:
    """(select expression, join clause) of a STRING_IDS-coded column, NULL when the table lacks it."""
    if column not in db.columns[table]:
        return "NULL", ""
    return f"s_{column}.value", f" LEFT JOIN STRING_IDS s_{column} ON s_{column}.id = {alias}.{column}"


def _kernels(db: _Db, skipped: SkippedEvents) -> pd.DataFrame:
    selects, joins = [], ""
    for column, label in (("name", "name"), ("opType", "op_type"), ("taskType", "core"),
                          ("inputShapes", "shapes")):
        expr, join = _strings(db, "COMPUTE_TASK_INFO", "c", column)
        selects.append(f"{expr} AS {label}")
        joins += join
    sql = (f"SELECT t.rowid AS row, {_ns('t.startNs')} AS start_ns, {_ns('t.endNs')} AS end_ns, "
           f"{db.column('TASK', 't', 'streamId')} AS stream, {db.column('TASK', 't', 'connectionId')} AS conn, "
           f"{', '.join(selects)} FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId{joins} "
           "ORDER BY start_ns, t.rowid")
    return _usable(db.query(sql, most=("TASK", db.rows("TASK"))), "TASK", skipped)


def _collectives(db: _Db, skipped: SkippedEvents) -> pd.DataFrame:
    if not db.has("COMMUNICATION_OP"):
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("row", "start_ns", "end_ns", "conn") else "object")
                             for c in ("row", "start_ns", "end_ns", "conn", "name", "op_type")})
    name, name_join = _strings(db, "COMMUNICATION_OP", "o", "opName")
    op_type, type_join = _strings(db, "COMMUNICATION_OP", "o", "opType")
    sql = (f"SELECT o.rowid AS row, {_ns('o.startNs')} AS start_ns, {_ns('o.endNs')} AS end_ns, "
           f"{db.column('COMMUNICATION_OP', 'o', 'connectionId')} AS conn, {name} AS name, {op_type} AS op_type "
           f"FROM COMMUNICATION_OP o{name_join}{type_join} ORDER BY start_ns, o.rowid")
    return _usable(db.query(sql, most=("COMMUNICATION_OP", db.rows("COMMUNICATION_OP"))), "COMMUNICATION_OP", skipped)


def _host_ops(db: _Db, skipped: SkippedEvents) -> pd.DataFrame:
    """PYTORCH_API rows of type `op` (torch ops and record_function ranges, trace_view's cpu_op events)."""
    where = ""
    params: tuple[int, ...] = ()
    if "type" in db.columns["PYTORCH_API"]:
        op_id = API_TYPE_OP
        if db.has("ENUM_API_TYPE"):
            found = db.query("SELECT id FROM ENUM_API_TYPE WHERE name = 'op'")
            op_id = _integer(found["id"].iloc[0], f"{db.path}: ENUM_API_TYPE.id of 'op'") if len(found) else API_TYPE_OP
        where, params = " WHERE p.type = ?", (op_id,)
    name, join = _strings(db, "PYTORCH_API", "p", "name")
    sql = (f"SELECT p.rowid AS row, {_ns('p.startNs')} AS start_ns, {_ns('p.endNs')} AS end_ns, "
           f"{db.column('PYTORCH_API', 'p', 'globalTid')} AS global_tid, "
           f"{db.column('PYTORCH_API', 'p', 'connectionId')} AS link, {name} AS name "
           f"FROM PYTORCH_API p{join}{where} ORDER BY start_ns, p.rowid")
    return _usable(db.query(sql, params, most=("PYTORCH_API", db.rows("PYTORCH_API"))), "PYTORCH_API", skipped)


def _step_ids(db: _Db, starts: np.ndarray) -> list[int | None]:
    """STEP_TIME's step whose window holds each start, else None."""
    if not db.has("STEP_TIME") or len(starts) == 0:
        return [None] * len(starts)
    steps = db.query(f"SELECT id, {_ns('startNs')} AS start_ns, {_ns('endNs')} AS end_ns FROM STEP_TIME "
                     f"WHERE start_ns <> {_MISSING} AND end_ns <> {_MISSING} ORDER BY start_ns")
    if steps.empty:
        return [None] * len(starts)
    begin, end = steps["start_ns"].to_numpy(dtype=np.int64), steps["end_ns"].to_numpy(dtype=np.int64)
    index = np.searchsorted(begin, starts, side="right") - 1
    inside = (index >= 0) & (starts < end[np.maximum(index, 0)])
    ids = [None if v is None else _integer(v, f"{db.path}: STEP_TIME.id (row {k + 1})")
           for k, v in enumerate(steps["id"].tolist())]
    return [ids[i] if ok else None for i, ok in zip(index.tolist(), inside.tolist())]


def _integer(value: object, where: str) -> int:
    """An id column's value as an int; text or a fraction is a one-line UserError at `where`."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    shown = repr(value)
    raise UserError(f"{where}: expected an integer, got {shown if len(shown) <= 40 else shown[:37] + '...'}")


def _text(values: pd.Series) -> list[str | None]:
    """STRING_IDS values as kernel_details cells read: padding and quotes removed, N/A and empty as None."""
    return [ascend_shapes_text(v) for v in values.tolist()]


def _details(path: Path, kernels: pd.DataFrame, collectives: pd.DataFrame, step_ids: list[int | None],
             skipped: SkippedEvents) -> KernelDetails:
    """kernel_details.csv's table (canonical headers): the compute kernels, then the collectives."""
    n_comm = len(collectives)
    starts = np.concatenate([kernels["start_ns"].to_numpy(dtype=np.int64),
                             collectives["start_ns"].to_numpy(dtype=np.int64)])
    ends = np.concatenate([kernels["end_ns"].to_numpy(dtype=np.int64),
                           collectives["end_ns"].to_numpy(dtype=np.int64)])
    streams = [None if s == _MISSING else str(s) for s in kernels["stream"].tolist()]
    table = pd.DataFrame({
        "Step Id": pd.array(step_ids, dtype="Int64"),
        "Stream ID": streams + [None] * n_comm,
        "Name": [UNNAMED if n is None else str(n) for n in kernels["name"].tolist() + collectives["name"].tolist()],
        "Type": _text(kernels["op_type"]) + _text(collectives["op_type"]),
        "Accelerator Core": _text(kernels["core"]) + [COMMUNICATION_CORE] * n_comm,
        "Start Time(us)": [f"{s // 1000}.{s % 1000:03d}" for s in starts.tolist()],
        "Duration(us)": (ends - starts) / 1000.0,
        "Input Shapes": _text(kernels["shapes"]) + [None] * n_comm,
        "start_ns": starts,
    })
    all_na = [c for c in EXPECTED_COLUMNS if len(table) and table[c].isna().all()]
    return KernelDetails(path, table, [], all_na, skipped.total, skipped)


def _view(kernels: pd.DataFrame, collectives: pd.DataFrame, host: pd.DataFrame,
          links: pd.DataFrame) -> TraceView:
    """Host ops with context and the device tasks with the key of the op that issued each (CONNECTION_IDS)."""
    tid = np.maximum(host["global_tid"].to_numpy(dtype=np.int64), 0)
    pids, tids = (tid >> 32).tolist(), (tid & 0xFFFFFFFF).tolist()
    starts = host["start_ns"].to_numpy(dtype=np.int64)
    durs = host["end_ns"].to_numpy(dtype=np.int64) - starts
    names = [UNNAMED if n is None else str(n) for n in host["name"].tolist()]
    keys = list(zip(pids, tids, starts.tolist()))
    threads = {t: i for i, t in enumerate(dict.fromkeys(tid.tolist()))}
    # device connectionId -> the issuing op: the shortest (innermost) of the ops linked to it
    issuer: dict[int, tuple[int, int]] = {}  # connectionId -> (duration, host row index)
    if len(links):
        ops = pd.DataFrame({"id": host["link"].to_numpy(dtype=np.int64), "op": np.arange(len(host))})
        linked = links.merge(ops[ops["id"] != _MISSING], on="id")
        for conn, op in zip(linked["connectionId"].tolist(), linked["op"].tolist()):
            if conn != _MISSING and (conn not in issuer or durs[op] < issuer[conn][0]):
                issuer[conn] = (int(durs[op]), int(op))
    tasks = []
    for frame, communication in ((kernels, False), (collectives, True)):
        for name, start, end, stream, conn in zip(
                frame["name"].tolist(), frame["start_ns"].tolist(), frame["end_ns"].tolist(),
                frame["stream"].tolist() if "stream" in frame else [None] * len(frame), frame["conn"].tolist()):
            found = issuer.get(conn)
            task = DeviceTask(UNNAMED if name is None else str(name), int(start), (int(end) - int(start)) / 1000.0,
                              "" if stream in (None, _MISSING) else str(stream),
                              COMMUNICATION_CORE if communication else "", communication)
            tasks.append((task, keys[found[1]] if found else None))
    kinds = [SCOPE if is_context_range(n) else OP for n in names]
    return assemble_view([threads[t] for t in tid.tolist()], keys, durs.tolist(), kinds, names, tasks)


def _check_links(db: _Db, host: pd.DataFrame, links: pd.DataFrame) -> None:
    """The host op <-> CONNECTION_IDS merge `_view` does gives no more rows than CONNECTION_IDS holds when each
    op's connectionId is its own (as in a real export); a crafted file repeating them would multiply it."""
    if not len(links) or not len(host):
        return
    ops = pd.Series(host["link"].to_numpy(dtype=np.int64)).value_counts()
    linked = pd.Series(links["id"].to_numpy(dtype=np.int64)).value_counts()
    common = ops.index.intersection(linked.index).difference([_MISSING])
    size = int((ops[common] * linked[common]).sum())
    if size > len(links):
        raise UserError(f"{db.path}: joining PYTORCH_API.connectionId to CONNECTION_IDS.id gives {size:,} rows, more "
                        f"than CONNECTION_IDS' {len(links):,} (a connectionId repeats); not a profiler export this "
                        "reader takes")


def read_ascend_db(path: Path) -> AscendDb:
    """Read one ascend_pytorch_profiler_*.db (module docstring); UserError for a file that is not one."""
    db = _Db(Path(path))
    try:
        skipped = SkippedEvents()
        kernels, collectives = _kernels(db, skipped), _collectives(db, skipped)
        if skipped.total and kernels.empty and collectives.empty:
            raise UserError(f"{path}: no usable kernel row; skipped {skipped.summary()}")
        step_ids = _step_ids(db, np.concatenate([kernels["start_ns"].to_numpy(dtype=np.int64),
                                                  collectives["start_ns"].to_numpy(dtype=np.int64)]))
        has_host = db.has("PYTORCH_API")
        host = _host_ops(db, skipped) if has_host else pd.DataFrame(
            columns=["row", "start_ns", "end_ns", "global_tid", "link", "name"])
        details = _details(Path(path), kernels, collectives, step_ids, skipped)  # skipped host rows included
        links = (db.query(f"SELECT {db.column('CONNECTION_IDS', 'l', 'id')} AS id, "
                          f"{db.column('CONNECTION_IDS', 'l', 'connectionId')} AS connectionId FROM CONNECTION_IDS l")
                 if has_host and db.has("CONNECTION_IDS") else pd.DataFrame(columns=["id", "connectionId"]))
        _check_links(db, host, links)
        view = _view(kernels, collectives, host, links)
        if "Type" in details.all_na_columns:
            level = "Level0"
        elif db.has("TASK_PMU_INFO"):
            level = "Level1+"  # AI Core metrics are collected from Level1 on (a Level0 export has no such table)
        else:
            level = "unknown"
    finally:
        db.close()
    return AscendDb(Path(path), details, view, has_host, level)
