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
* It also calls none of :data:`BLOCKED_FUNCTIONS` (found in DuckDB's parse tree), and DuckDB's plan of it scans
  none of them (a catalog view such as ``duckdb_databases``, ``pragma_database_list``, ``pg_settings`` or
  ``information_schema.…`` is planned as the table function behind it): functions that run SQL from a string, or
  show the server's paths and settings, which the locks above do not cover. The refusal goes by what the query
  reads, not by how it spells it (case, quotes, schema, comments, an ``EXPLAIN`` prefix).
* :func:`run_query` binds parameters, can interrupt a query past a deadline, and fetches the result.

The server's SQL console (``server/console.py``, ``server/queries/sql_console.py``) goes through these same
functions; each refusal carries a ``code`` its API answers with.

Only DuckDB: no web stack, no pandas.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb

from ascendscope.ingest import layout

READING_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
MAX_QUERY_CHARS = 100_000
FETCH_BATCH = 512
# table functions and functions the locks leave open: SQL run from a string (its text is not checked here), the
# attached files' paths, settings (temp_directory…), environment variables
BLOCKED_FUNCTIONS = frozenset({
    "query", "query_table", "json_execute_serialized_sql", "current_setting", "getenv", "duckdb_databases",
    "duckdb_settings", "duckdb_temporary_files", "duckdb_extensions", "duckdb_secrets", "duckdb_memory",
    "duckdb_logs", "duckdb_log_contexts", "pragma_database_list", "pragma_database_size", "pragma_storage_info",
    "pragma_metadata_info", "pragma_user_agent", "pragma_platform", "which_secret",
})


class ReadOnlyQueryError(ValueError):
    """A query the read-only rules refuse, or one DuckDB could not run; the message says why and ``code`` names the
    rule (empty_query, query_too_long, syntax_error, one_statement, read_only, function_refused, query_failed,
    query_timeout)."""

    def __init__(self, message: str, code: str = "query_failed"):
        super().__init__(message)
        self.code = code


class QueryTimedOut(ReadOnlyQueryError):
    """The query ran past its deadline and was interrupted."""

    def __init__(self, message: str):
        super().__init__(message, "query_timeout")


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


def check_query(conn: duckdb.DuckDBPyConnection, sql: str, params: list | dict | None = None) -> None:
    """Raise :class:`ReadOnlyQueryError` unless ``sql`` is one reading statement that calls no blocked function and
    whose plan scans none. ``conn`` only parses and plans (a locked connection, or a cursor of one); ``params`` are
    the query's bound parameters (the plan needs them)."""
    if not isinstance(sql, str) or not sql.strip():
        raise ReadOnlyQueryError("the query is empty", "empty_query")
    if len(sql) > MAX_QUERY_CHARS:
        raise ReadOnlyQueryError(f"the query is longer than {MAX_QUERY_CHARS:,} characters", "query_too_long")
    try:
        statements = conn.extract_statements(sql)
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(_first_line(exc), "syntax_error") from None
    if len(statements) != 1:
        raise ReadOnlyQueryError(f"one statement at a time, please (this query has {len(statements)})",
                                 "one_statement")
    kind = statements[0].type
    if kind not in READING_STATEMENTS:
        raise ReadOnlyQueryError(f"only reading queries run here (SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN; "
                                 f"no ATTACH, COPY, INSTALL, LOAD or SET); this one is {kind.name}", "read_only")
    # by name first: a blocked scalar function may not survive planning (folded to its value, or failing)
    blocked = sorted(called_functions(conn, sql) & BLOCKED_FUNCTIONS) or sorted(
        scanned_functions(conn, sql, params) & BLOCKED_FUNCTIONS)
    if blocked:
        raise ReadOnlyQueryError(f"{', '.join(blocked)}: not available here (runs SQL from a string, or shows the "
                                 "server's files and settings)", "function_refused")


def called_functions(conn: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    """The (lower-case) names of the functions a reading statement calls: from DuckDB's parse tree of the query (of
    what an ``EXPLAIN`` explains), or, where DuckDB cannot serialise it (``DESCRIBE``, ``SHOW``…), every name in
    its text, quoted or not: more than it calls, never less."""
    inner = _explained(sql)
    cur = conn.cursor()
    try:
        tree = json.loads(cur.execute("SELECT json_serialize_sql(?::VARCHAR)", [inner]).fetchone()[0])
    except duckdb.Error:
        tree = {"error": True}
    finally:
        cur.close()
    if tree.get("error"):
        return _names(sql)
    out: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            name = node.get("function_name")
            if isinstance(name, str):
                out.add(name.lower())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def scanned_functions(conn: duckdb.DuckDBPyConnection, sql: str, params: list | dict | None = None) -> set[str]:
    """The (lower-case) table functions DuckDB's plan of ``sql`` (of what an ``EXPLAIN`` explains) scans: what a
    query reads, whatever it is spelled as — a catalog view (``duckdb_databases``, ``pg_settings``,
    ``information_schema.…``) is planned as the table function behind it. A query DuckDB cannot plan raises
    :class:`ReadOnlyQueryError`: it would not run either."""
    cur = conn.cursor()
    try:
        plan = cur.execute(f"EXPLAIN (FORMAT JSON) {_explained(sql)}", params or None).fetchall()
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(_first_line(exc)) from None
    finally:
        cur.close()
    out: set[str] = set()
    stack: list = [json.loads(text) for _kind, text in plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            extra = node.get("extra_info")
            if isinstance(extra, dict) and isinstance(extra.get("Function"), str):
                out.add(extra["Function"].lower())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def _tokens(sql: str) -> list[tuple[str, str]]:
    """(kind, text) of each token of ``sql`` by DuckDB's own tokenizer, comments dropped."""
    marks = duckdb.tokenize(sql)
    out = []
    for i, (pos, kind) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(sql)
        if kind != duckdb.token_type.comment:
            out.append((kind, sql[pos:end].strip()))
    return out


def _names(sql: str) -> set[str]:
    """Every identifier and keyword of ``sql``, unquoted and lower-case."""
    return {text.strip('"').lower() for kind, text in _tokens(sql)
            if kind in (duckdb.token_type.identifier, duckdb.token_type.keyword)}


def _explained(sql: str) -> str:
    """``sql`` without its ``EXPLAIN [ANALYZE] [(options)]`` prefixes (found by tokens, so a comment or no space
    between them changes nothing): the query it explains."""
    rest = sql.strip()
    while True:
        marks = [(pos, kind) for pos, kind in duckdb.tokenize(rest) if kind != duckdb.token_type.comment]
        if not marks or rest[marks[0][0]:marks[0][0] + 7].lower() != "explain" or len(marks) < 2:
            return rest
        i = 1
        word = rest[marks[i][0]:marks[i][0] + 7].lower()
        if word in ("analyze", "analyse") and len(marks) > 2:
            i += 1
        if rest[marks[i][0]] == "(":
            depth = 0
            while i < len(marks):
                ch = rest[marks[i][0]]
                depth += ch == "("
                depth -= ch == ")"
                i += 1
                if depth == 0 or i == len(marks):
                    break
        if i >= len(marks):
            return rest
        rest = rest[marks[i][0]:]


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
        raise ReadOnlyQueryError(_first_line(exc)) from None
    finally:
        if timer is not None:
            timer.cancel()
        if unwatch is not None:
            unwatch()
        cur.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
