"""Copy tables of an SQLite file into DuckDB staging tables, by column name, in batches.

DuckDB's own SQLite scanner is an extension that would be downloaded at run time, so SQLite is read otherwise,
read-only and immutable (nothing is written beside the file). A table whose values all have their column's type
(SQLite types each value, not each column: one SQL query finds any that does not) is read by ADBC's SQLite
driver straight into Arrow batches, in C (``ArrowReader``); any other through Python's ``sqlite3``, value by
value, each batch reaching DuckDB as an Arrow table built from its buffers (``ingest.columns.arrow_array``:
pyarrow's builders of Python values would import pandas, ~0.5 CPU-s of every process that reads a db export).
Columns are read by name: a spec lists, per staged column, its type and the source names it may have (schemas
differ across versions); a missing column is staged as NULL, a missing table as an empty table, and a value of
the wrong type as NULL — each counted, so the caller can say so.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import adbc_driver_manager
import adbc_driver_sqlite
import numpy as np
import pyarrow as pa

from ..columns import ARROW_TYPES, arrow_array

BATCH_ROWS = 65536
PENDING_ROWS = 4 * BATCH_ROWS
NONE = type(None)
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Col:
    name: str  # staged column name
    type: str  # BIGINT | DOUBLE | VARCHAR
    sources: tuple[str, ...]  # source column names, first match wins
    optional: bool = False  # only some versions have it: its absence is not reported


@dataclass
class Copied:
    table: str  # source table
    rows: int = 0
    present: bool = True
    missing: list[str] = field(default_factory=list)  # required spec columns the table does not have
    bad: dict[str, int] = field(default_factory=dict)  # column -> values of the wrong type, read as NULL


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection that writes nothing beside the file (no -shm/-wal, as even a read-only connection
    to a WAL database would make); raises ValueError when the file is not a readable SQLite database."""
    if not is_sqlite(path):
        raise ValueError("not an SQLite database")
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise ValueError(f"the SQLite database cannot be read: {exc}") from exc
    return con


def sidecar_notes(path: Path) -> list[str]:
    """A non-empty write-ahead log beside the database holds changes not merged into it: they are not read."""
    wal = path.with_name(path.name + "-wal")
    try:
        size = wal.stat().st_size
    except OSError:
        return []
    return [f"{wal.name} ({size} bytes) holds changes not yet merged into the database: not read (opening the "
            "database once with SQLite, where it may be written, merges them)"] if size else []


def tables(con: sqlite3.Connection) -> dict[str, str]:
    """Table names, keyed by upper-case name (table names are matched without regard to case)."""
    rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name.upper(): name for (name,) in rows}


def row_count(con: sqlite3.Connection, table: str) -> int:
    return con.execute(f"SELECT count(*) FROM {_ident(table)}").fetchone()[0]


def columns(con: sqlite3.Connection, table: str) -> dict[str, str]:
    """Column names, keyed by lower-case name."""
    return {r[1].lower(): r[1] for r in con.execute(f"PRAGMA table_info({_ident(table)})").fetchall()}


class ArrowReader:
    """A read-only, immutable ADBC connection to an SQLite file: a query's rows as Arrow batches, made in C."""

    def __init__(self, path: Path):
        self.db = adbc_driver_sqlite.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1")
        self.conn = adbc_driver_manager.AdbcConnection(self.db)

    @classmethod
    def open(cls, path: Path) -> ArrowReader | None:
        """The reader of ``path``, or None when ADBC cannot open it (then Python's ``sqlite3`` reads every table)."""
        try:
            return cls(path)
        except adbc_driver_manager.Error:
            return None

    def batches(self, sql: str):
        stmt = adbc_driver_manager.AdbcStatement(self.conn)
        try:
            stmt.set_options(**{adbc_driver_sqlite.StatementOptions.BATCH_ROWS.value: str(BATCH_ROWS)})
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            yield from pa.RecordBatchReader.from_stream(handle)
        finally:
            stmt.close()

    def close(self) -> None:
        self.conn.close()
        self.db.close()


# per staged type: the SQLite types (typeof) its values may have to be read as they are, and the expression
# that reads them so
CLEAN = {"BIGINT": ("'integer', 'null'", "{}"), "DOUBLE": ("'integer', 'real', 'null'", "CAST({} AS REAL)"),
         "VARCHAR": ("'integer', 'real', 'text', 'null'", "CAST({} AS TEXT)")}
FIRST = {"BIGINT": "0", "DOUBLE": "0.0", "VARCHAR": "''"}  # a row of the staged types, so ADBC types each column


def batches(con: sqlite3.Connection, present: dict[str, str], table: str, spec: tuple[Col, ...],
            result: Copied, fast: ArrowReader | None = None):
    """The rows of SQLite table ``table`` as Arrow tables of the ``spec`` columns, in rowid order (the order the
    profiler wrote), ``BATCH_ROWS`` at a time; ``result`` (a ``Copied`` of ``table``) counts them and says what
    was missing or of the wrong type. A table the database does not have yields nothing (``result.present``).
    With ``fast`` (the same file), a table whose values all have their column's type is read by it."""
    real = present.get(table.upper())
    if real is None:
        result.present = False
        return
    have = columns(con, real)
    srcs = []
    for c in spec:
        src = next((have[s.lower()] for s in c.sources if s.lower() in have), None)
        if src is None and not c.optional:
            result.missing.append(c.name)
        srcs.append(src)
    try:
        if fast is not None and _clean(con, real, spec, srcs):
            yield from _arrow_batches(fast, real, spec, srcs, result)
            return
        # TEXT columns may hold numbers (PYTORCH_API.startNs)
        exprs = ["NULL" if src is None else f"CAST({_ident(src)} AS TEXT)" if c.type == "VARCHAR" else _ident(src)
                 for c, src in zip(spec, srcs)]
        rows = con.execute(f"SELECT {', '.join(exprs)} FROM {_ident(real)}")
        while batch := rows.fetchmany(BATCH_ROWS):
            arrays = [arrow_array(_column(c, values, result), c.type) for c, values in zip(spec, zip(*batch))]
            result.rows += len(batch)
            yield pa.Table.from_arrays(arrays, names=[c.name for c in spec])
    except (sqlite3.Error, adbc_driver_manager.Error, pa.ArrowInvalid) as exc:
        raise ValueError(f"table {table} cannot be read: {exc}") from exc


def _clean(con: sqlite3.Connection, real: str, spec: tuple[Col, ...], srcs: list[str | None]) -> bool:
    """Whether every value of the read columns has a SQLite type its staged column takes as it is (no blob, no
    text in a number column, no real in an integer one): then ADBC reads the table as Python would."""
    dirty = [f"typeof({_ident(src)}) NOT IN ({CLEAN[c.type][0]})" for c, src in zip(spec, srcs) if src is not None]
    if not dirty:
        return True
    return not con.execute(f"SELECT EXISTS (SELECT 1 FROM {_ident(real)} WHERE {' OR '.join(dirty)})").fetchone()[0]


def _arrow_batches(fast: ArrowReader, real: str, spec: tuple[Col, ...], srcs: list[str | None], result: Copied):
    """The table's rows read by ADBC, after a first row of the staged types (ADBC types a column by its first
    values, and a column may begin with NULLs), as ``batches`` gives them; the strings valid UTF-8."""
    exprs = ["NULL" if src is None else CLEAN[c.type][1].format(_ident(src)) for c, src in zip(spec, srcs)]
    sql = (f"SELECT {', '.join(FIRST[c.type] for c in spec)} UNION ALL "
           f"SELECT {', '.join(exprs)} FROM {_ident(real)}")
    schema = pa.schema([(c.name, pa.large_string() if c.type == "VARCHAR" else ARROW_TYPES[c.type][0])
                        for c in spec])
    first = True
    for batch in fast.batches(sql):
        if first:
            batch, first = batch.slice(1), False
        if not batch.num_rows:
            continue
        out = pa.Table.from_batches([batch]).rename_columns(schema.names).cast(schema)
        out.validate(full=True)  # (a TEXT value may hold bytes that are not UTF-8: sqlite3 refuses those too)
        result.rows += out.num_rows
        yield out


class RankTables:
    """DuckDB tables of several ranks' SQLite tables: ``dest`` -> ``spec`` columns after a ``rank`` column, filled
    rank by rank in the order ranks are added, the rows of a table in rowid order. Batches of several small ranks
    go in one INSERT (a statement costs milliseconds whatever its size); a table's rows wait for ``BATCH_ROWS``
    of them, and all tables' for ``PENDING_ROWS`` in all (their memory stays bounded)."""

    def __init__(self, cur, tables: dict[str, tuple[Col, ...]]):
        self.cur, self.tables = cur, tables
        self.pending: dict[str, list[pa.Table]] = {dest: [] for dest in tables}
        ddl = {dest: ", ".join(f'"{c.name}" {c.type}' for c in spec) for dest, spec in tables.items()}
        cur.execute(";\n".join(f"CREATE OR REPLACE TABLE {dest} (rank INTEGER, {cols})" for dest, cols in ddl.items()))

    def add(self, dest: str, rank: int, batch: pa.Table) -> None:
        ranks = pa.Array.from_buffers(pa.int32(), batch.num_rows,
                                      [None, pa.py_buffer(np.full(batch.num_rows, rank, np.int32))])
        self.pending[dest].append(batch.add_column(0, "rank", ranks))  # (pa.array of numpy would import pandas)
        if sum(t.num_rows for t in self.pending[dest]) >= BATCH_ROWS:
            self.flush(dest)
        elif sum(t.num_rows for tables in self.pending.values() for t in tables) >= PENDING_ROWS:
            self.flush()

    def flush(self, dest: str | None = None) -> None:
        names = [name for name in ([dest] if dest is not None else list(self.pending)) if self.pending[name]]
        if not names:
            return
        self.cur.execute("BEGIN")  # (one commit for them all: a commit a table cost a third of the INSERTs)
        try:
            for name in names:
                batch = pa.concat_tables(self.pending[name])
                self.pending[name] = []
                self.cur.from_arrow(batch).insert_into(name)  # (no view registered and dropped around each INSERT)
        except BaseException:
            self.cur.execute("ROLLBACK")
            raise
        self.cur.execute("COMMIT")

    def drop_rank(self, rank: int) -> None:
        """Take out the rows of a rank whose database failed part way."""
        for name, batches_ in self.pending.items():
            self.pending[name] = [t for t in batches_ if t.column("rank")[0].as_py() != rank]
        for name in self.tables:
            self.cur.execute(f"DELETE FROM {name} WHERE rank = ?", [int(rank)])


def copy(con: sqlite3.Connection, present: dict[str, str], table: str, tables: RankTables, dest: str,
         rank: int, fast: ArrowReader | None = None) -> Copied:
    """Append SQLite table ``table`` of ``rank`` to ``dest`` of ``tables`` (an absent table adds no rows)."""
    result = Copied(table=table)
    for batch in batches(con, present, table, tables.tables[dest], result, fast):
        tables.add(dest, rank, batch)
    return result


def _column(col: Col, values: tuple, result: Copied):
    """The values as the column's Python type (None for NULL), ready to make an Arrow array of that type."""
    kinds = set(map(type, values))  # (in C: a Python loop a value cost more than the rest of the copy)
    if col.type == "BIGINT" and kinds <= {int, NONE}:  # (SQLite's integers fit int64)
        return values
    if col.type == "DOUBLE" and kinds <= {float, int, NONE}:
        return values if int not in kinds else [v if v is None or type(v) is float else float(v) for v in values]
    if col.type == "VARCHAR" and kinds <= {str, NONE}:
        return values
    # a column of mixed storage classes (SQLite types per value): convert one by one, NULL where impossible
    convert = {"BIGINT": _to_int, "DOUBLE": _to_float, "VARCHAR": str}[col.type]
    out = []
    for v in values:
        try:
            out.append(None if v is None else convert(v))
        except (TypeError, ValueError, OverflowError):
            out.append(None)
        if v is not None and out[-1] is None:
            result.bad[col.name] = result.bad.get(col.name, 0) + 1
    return out


def _to_int(v) -> int | None:
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError(v)
        v = int(v)
    elif isinstance(v, (str, bytes)):
        v = int(v)
    if not -(1 << 63) <= v < (1 << 63):
        raise OverflowError(v)
    return v


def _to_float(v) -> float:
    if isinstance(v, bytes):
        raise TypeError(v)
    return float(v)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def read_rows(con: sqlite3.Connection, present: dict[str, str], table: str,
              spec: tuple[Col, ...]) -> tuple[list[dict], Copied]:
    """A small table as dicts of its raw values (by staged name; NULL for a missing column)."""
    real = present.get(table.upper())
    if real is None:
        return [], Copied(table=table, present=False)
    have = columns(con, real)
    result = Copied(table=table)
    exprs = []
    for c in spec:
        src = next((have[s.lower()] for s in c.sources if s.lower() in have), None)
        if src is None and not c.optional:
            result.missing.append(c.name)
        exprs.append("NULL" if src is None else _ident(src))
    try:
        rows = con.execute(f"SELECT {', '.join(exprs)} FROM {_ident(real)}").fetchall()
    except sqlite3.Error as exc:
        raise ValueError(f"table {table} cannot be read: {exc}") from exc
    result.rows = len(rows)
    return [dict(zip((c.name for c in spec), r)) for r in rows], result
