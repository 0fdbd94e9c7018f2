"""Read-only SQL over a run database: the rules every user-written query goes through (``Run.sql`` here, and any
SQL console of the server), so that a query can read the documented tables (docs/schema.md) and nothing else.

* The connection is an in-memory one whose attached run files are read-only (a run file, its tables as views; or
  a sharded run: ``ingest.layout.connect``), and then ``enable_external_access`` is switched off and
  the configuration locked: no ``read_csv('/etc/passwd')``, no ``COPY … TO``, no ``ATTACH``, no ``INSTALL``/``LOAD``,
  and no ``SET`` that could turn it back on.
* A query is exactly one statement, of a reading kind (``SELECT`` — which covers ``WITH``, ``FROM t``, ``VALUES``,
  ``DESCRIBE``, ``SHOW``, ``SUMMARIZE`` — or ``EXPLAIN``): :func:`check_query` refuses anything else by DuckDB's own
  parse of it, before it runs, so ``CREATE``/``INSERT``/``PRAGMA``/``SET`` never reach the database (an in-memory
  connection would otherwise accept a ``CREATE TABLE``).
* :func:`run_query` binds parameters, can interrupt a query past a deadline, and fetches the result.

Only DuckDB: no web stack, no pandas.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import duckdb

from ascendscope.ingest import layout

READING_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
MAX_QUERY_CHARS = 100_000


class ReadOnlyQueryError(ValueError):
    """A query the read-only rules refuse, or one DuckDB could not run; the message says why."""


def lock_down(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """No file or network access from queries from now on, and no setting can be changed back."""
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")
    return conn


def connect(path: str | os.PathLike, ranks: list[int] | None = None) -> duckdb.DuckDBPyConnection:
    """A locked-down read-only connection to a run: a ``.duckdb`` file, or a sharded run folder (its
    ``manifest.json``; ``ranks`` narrows the shards attached, None: all of them)."""
    target = Path(path)
    if target.is_dir() and layout.is_sharded(target):
        conn, _ = layout.connect(target, ranks)
        return lock_down(conn)
    if target.is_dir():
        raise FileNotFoundError(f"{target} holds no run (no {layout.MANIFEST})")
    if not target.is_file():
        raise FileNotFoundError(f"no such file: {target}")
    # attached to a connection of its own, not opened with duckdb.connect(path): that would share (and lock down)
    # the instance other code of this process, a server, already has open on the same file
    conn = duckdb.connect(":memory:")
    try:
        conn.execute(f"ATTACH '{str(target).replace(chr(39), chr(39) * 2)}' AS run (READ_ONLY)")
        for (table,) in conn.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'run' "
                                     "ORDER BY table_name").fetchall():
            conn.execute(f'CREATE VIEW main."{table}" AS SELECT * FROM run."{table}"')
    except BaseException:
        conn.close()
        raise
    return lock_down(conn)


def check_query(conn: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise :class:`ReadOnlyQueryError` unless ``sql`` is one reading statement."""
    if not isinstance(sql, str) or not sql.strip():
        raise ReadOnlyQueryError("the query is empty")
    if len(sql) > MAX_QUERY_CHARS:
        raise ReadOnlyQueryError(f"the query is longer than {MAX_QUERY_CHARS:,} characters")
    try:
        statements = conn.extract_statements(sql)
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(_first_line(exc)) from None
    if len(statements) != 1:
        raise ReadOnlyQueryError(f"one statement at a time, please (this query has {len(statements)})")
    kind = statements[0].type
    if kind not in READING_STATEMENTS:
        raise ReadOnlyQueryError(f"only reading queries run here (SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN); "
                                 f"this one is {kind.name}")


def run_query(conn: duckdb.DuckDBPyConnection, sql: str, params: list | tuple | dict | None = None, *,
              timeout_s: float | None = None, fetch: str = "df"):
    """Check ``sql``, run it on a fresh cursor of ``conn`` and fetch its result: ``"df"`` a pandas DataFrame,
    ``"arrow"`` a ``pyarrow.Table``, ``"rows"`` ``(column names, list of tuples)``. A query still running after
    ``timeout_s`` is interrupted (:class:`ReadOnlyQueryError`)."""
    if fetch not in ("df", "arrow", "rows"):
        raise ValueError(f"fetch must be df, arrow or rows, not {fetch!r}")
    check_query(conn, sql)
    bound = params if isinstance(params, dict) else list(params or ())
    cur = conn.cursor()
    timer = threading.Timer(timeout_s, cur.interrupt) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        if fetch == "arrow":  # through a relation: Arrow straight from DuckDB's result, no row copy
            return cur.sql(sql, params=bound or None).to_arrow_table()
        cur.execute(sql, bound)
        if fetch == "df":
            return cur.fetchdf()
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.InterruptException:
        raise ReadOnlyQueryError(f"the query took longer than {timeout_s:g} s and was stopped") from None
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(_first_line(exc)) from None
    finally:
        if timer is not None:
            timer.cancel()
        cur.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
