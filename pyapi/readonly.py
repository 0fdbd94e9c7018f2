"""Read-only SQL over a run database: the rules every user-written query goes through (``Run.sql`` here, and any
SQL console of the server), so that a query can read the documented tables (docs/schema.md) and nothing else.

* The connection is an in-memory one whose attached run files are read-only (a run file, its tables as views; or
  a sharded run: ``ingest.layout.connect``), and then ``enable_external_access`` is switched off and
  the configuration locked: no ``read_csv('/etc/passwd')``, no ``COPY … TO``, no ``ATTACH``, no ``INSTALL``/``LOAD``,
  and no ``SET`` that could turn it back on.
* A query must pass the rules of ``ascendscope.sqlrules`` (:func:`check_query`): exactly one reading statement,
  no function that runs SQL from a string or shows the server's paths and settings, no table function that reads
  a file (DuckDB lets a locked connection read its spill folder and its attached files) or names one, judged by
  DuckDB's own parse and plan of the query, whatever its spelling or depth.
* :func:`run_query` binds parameters, can interrupt a query past a deadline, and fetches the result.

The server's SQL console (``server/console.py``, ``server/queries/sql_console.py``) goes through these same
functions; each refusal carries a ``code`` its API answers with.

Only DuckDB: no web stack, no pandas.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb

from ascendscope.ingest import layout
from ascendscope.sqlrules import QueryTimedOut, ReadOnlyQueryError, check_query, first_line

__all__ = ["QueryTimedOut", "ReadOnlyQueryError", "check_query", "connect", "lock_down", "open_run", "run_query"]

FETCH_BATCH = 512


def lock_down(conn: duckdb.DuckDBPyConnection, *, memory_limit: str | None = None, threads: int | None = None,
              temp_dir: str | os.PathLike | None = None, max_temp_size: str | None = None
              ) -> duckdb.DuckDBPyConnection:
    """No file or network access from queries from now on, no extension installed or loaded on the fly, an optional
    memory limit (``'2GB'``), DuckDB threads, spill folder and its size limit (``'4GB'``), and no setting can be
    changed back."""
    if threads:
        conn.execute(f"SET threads = {int(threads)}")
    if temp_dir is not None:
        Path(temp_dir).mkdir(parents=True, exist_ok=True)
        conn.execute("SET temp_directory = ?", [str(temp_dir)])
    if max_temp_size:
        conn.execute("SET max_temp_directory_size = ?", [max_temp_size])
    conn.execute("SET enable_progress_bar = false")  # (it would print to the server's terminal)
    conn.execute("SET enable_external_access = false")
    conn.execute("SET autoinstall_known_extensions = false")
    conn.execute("SET autoload_known_extensions = false")
    if memory_limit:
        conn.execute("SET memory_limit = ?", [memory_limit])
    conn.execute("SET lock_configuration = true")
    return conn


def connect(path: str | os.PathLike, ranks: list[int] | None = None, *,
            memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """A locked-down read-only connection to a run: a ``.duckdb`` file, or a sharded run folder (its
    ``manifest.json``; ``ranks`` narrows the shards attached, None: all of them)."""
    return open_run(path, ranks, memory_limit=memory_limit)[0]


def open_run(path: str | os.PathLike, ranks: list[int] | None = None, *, memory_limit: str | None = None,
             **limits) -> tuple[duckdb.DuckDBPyConnection, list[int] | None]:
    """:func:`connect`, and the ranks whose shards were attached (None: a single-file run, every rank);
    ``limits``: :func:`lock_down`'s ``threads``, ``temp_dir``, ``max_temp_size``."""
    target = Path(path)
    if target.is_dir() and layout.is_sharded(target):
        conn, loaded = layout.connect(target, ranks)
        try:
            return lock_down(conn, memory_limit=memory_limit, **limits), loaded
        except BaseException:
            conn.close()
            raise
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
        lock_down(conn, memory_limit=memory_limit, **limits)
    except BaseException:
        conn.close()
        raise
    return conn, None


def run_query(conn: duckdb.DuckDBPyConnection, sql: str, params: list | tuple | dict | None = None, *,
              timeout_s: float | None = None, fetch: str = "df", max_rows: int | None = None,
              keep: Callable[[list[tuple]], bool] | None = None,
              watch: Callable[[Callable[[], None]], Callable[[], None]] | None = None):
    """Check ``sql``, run it on a fresh cursor of ``conn`` and fetch its result: ``"df"`` a pandas DataFrame,
    ``"arrow"`` a ``pyarrow.Table``, ``"rows"`` ``(column names, list of tuples)``, ``"typed"`` ``(column names,
    DuckDB type names, list of tuples)``; ``max_rows`` fetches at most that many rows (``rows``/``typed``). With
    ``keep`` (``rows``/``typed``), rows are fetched in batches of :data:`FETCH_BATCH`, each handed to ``keep`` and
    not kept here (the rows answered are ``[]``); ``keep`` returning False stops the fetch, so that a caller bounding
    its answer by size never holds more than a batch beyond it. A query still running after ``timeout_s`` is
    interrupted (:class:`QueryTimedOut`); ``watch`` is handed the query's interrupt to call when it must stop for
    another reason (its client went away) and returns what unregisters it."""
    if fetch not in ("df", "arrow", "rows", "typed"):
        raise ValueError(f"fetch must be df, arrow, rows or typed, not {fetch!r}")
    bound = params if isinstance(params, dict) else list(params or ())
    check_query(conn, sql, bound)
    cur = conn.cursor()
    timer = threading.Timer(timeout_s, cur.interrupt) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    unwatch = watch(cur.interrupt) if watch is not None else None
    try:
        if fetch == "arrow":  # through a relation: Arrow straight from DuckDB's result, no row copy
            return cur.sql(sql, params=bound or None).to_arrow_table()
        cur.execute(sql, bound)
        if fetch == "df":
            return cur.fetchdf()
        description = cur.description or []
        if keep is not None:
            rows, left = [], max_rows
            while left is None or left > 0:
                batch = cur.fetchmany(FETCH_BATCH if left is None else min(FETCH_BATCH, left))
                if not batch or not keep(batch):
                    break
                left = None if left is None else left - len(batch)
        else:
            rows = cur.fetchall() if max_rows is None else cur.fetchmany(max_rows)
        names = [d[0] for d in description]
        return (names, rows) if fetch == "rows" else (names, [str(d[1]) for d in description], rows)
    except duckdb.InterruptException:
        raise QueryTimedOut(f"the query took longer than {timeout_s:g} s and was stopped") from None
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(first_line(exc)) from None
    finally:
        if timer is not None:
            timer.cancel()
        if unwatch is not None:
            unwatch()
        cur.close()
