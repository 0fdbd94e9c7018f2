"""The rules a user-written query must pass before it runs (``Run.sql`` and the server's SQL console): exactly one
reading statement that calls no refused function, scans no table function but those of :data:`TABLE_FUNCTIONS`
and names no file. :func:`check_query` decides, by DuckDB's own parse and plan of the query; each refusal is a
:class:`ReadOnlyQueryError` whose ``code`` names the rule.

* One statement, of a reading kind (``SELECT`` — which covers ``WITH``, ``FROM t``, ``VALUES``, ``DESCRIBE``,
  ``SHOW``, ``SUMMARIZE`` — or ``EXPLAIN``); anything else (``CREATE``, ``PRAGMA``, ``SET``, ``ATTACH``…) never
  reaches the database: ``read_only``, ``one_statement``.
* No function of :data:`BLOCKED_FUNCTIONS` (SQL run from a string, the server's paths, settings and logs), found
  in the parse tree and in the plan, where a catalog view (``duckdb_databases``, ``pg_settings``) is the table
  function behind it: ``function_refused``.
* No table function outside :data:`TABLE_FUNCTIONS` (series, unnesting, JSON, the catalog of the run's own
  tables). A locked DuckDB connection still lets a query read its own spill folder and the files it has attached
  (a run's shards), whatever ``enable_external_access`` says, so every function that reads a file (``read_csv``,
  ``read_text``, ``read_blob``, ``glob``, ``parquet_*``, ``read_duckdb``…, the list taken from DuckDB's own
  catalog) is refused by name before the query is planned (binding one reads the file), and by the plan after;
  a table named by a path (``FROM 'x.csv'``, which DuckDB reads as a file) is refused before planning too:
  ``file_access``. Other table functions (``checkpoint``, ``enable_logging``…): ``function_refused``.
* A query nested deeper than Python's recursion (a 600-term sum) is checked all the same: the trees are read as
  flat token streams, never parsed into nested objects; anything that still recurses too deep is
  ``query_too_deep``, never an internal error.

Only DuckDB: no web stack, no pandas.
"""

from __future__ import annotations

import json
import re

import duckdb

READING_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
MAX_QUERY_CHARS = 100_000
# functions the locks leave open: SQL run from a string (its text is not checked here), the attached files' paths,
# settings (temp_directory…), environment variables, the log
BLOCKED_FUNCTIONS = frozenset({
    "query", "query_table", "json_execute_serialized_sql", "current_setting", "getenv", "duckdb_databases",
    "duckdb_settings", "duckdb_temporary_files", "duckdb_extensions", "duckdb_secrets", "duckdb_memory",
    "duckdb_logs", "duckdb_log_contexts", "pragma_database_list", "pragma_database_size", "pragma_storage_info",
    "pragma_metadata_info", "pragma_user_agent", "pragma_platform", "which_secret", "write_log",
})
# the table functions a query may scan (an allowlist: a new DuckDB's new table functions stay refused until added)
TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree", "summary",
    "histogram", "histogram_values", "duckdb_columns", "duckdb_tables", "duckdb_views", "duckdb_schemas",
    "duckdb_types", "duckdb_functions", "duckdb_keywords", "duckdb_constraints", "duckdb_indexes",
    "duckdb_sequences", "duckdb_dependencies", "duckdb_optimizers", "pragma_table_info", "pragma_show",
    "pragma_version", "pragma_collations", "pg_timezone_names", "icu_calendar_names",
})
FILE_PARAMETERS = frozenset({"path", "paths", "pattern", "file"})  # a table function taking one reads files
PATH_CHARS = re.compile(r"[./\\:*?~]")  # a table name holding one is a file name to DuckDB (FROM 'x.csv')
# one JSON string (escapes included), and whether a colon follows (a key); outside strings JSON has no quotes, so
# matching from the start keeps every match on a real string
_JSON_STRING = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"(\s*:)?')
_CATALOG: dict[str, tuple[frozenset, frozenset, frozenset]] = {}


class ReadOnlyQueryError(ValueError):
    """A query the read-only rules refuse, or one DuckDB could not run; the message says why and ``code`` names the
    rule (empty_query, query_too_long, syntax_error, one_statement, read_only, function_refused, file_access,
    query_too_deep, query_failed, query_timeout, out_of_memory, query_crashed)."""

    def __init__(self, message: str, code: str = "query_failed"):
        super().__init__(message)
        self.code = code


class QueryTimedOut(ReadOnlyQueryError):
    """The query ran past its deadline and was interrupted."""

    def __init__(self, message: str):
        super().__init__(message, "query_timeout")


def check_query(conn: duckdb.DuckDBPyConnection, sql: str, params: list | dict | None = None) -> None:
    """Raise :class:`ReadOnlyQueryError` unless ``sql`` passes the rules of the module note. ``conn`` only parses
    and plans (a locked connection, or a cursor of one); ``params`` are the query's bound parameters (the plan
    needs them)."""
    if not isinstance(sql, str) or not sql.strip():
        raise ReadOnlyQueryError("the query is empty", "empty_query")
    if len(sql) > MAX_QUERY_CHARS:
        raise ReadOnlyQueryError(f"the query is longer than {MAX_QUERY_CHARS:,} characters", "query_too_long")
    try:
        _check(conn, sql, params)
    except RecursionError:
        raise ReadOnlyQueryError("the query nests too deeply to be checked: write it with fewer levels",
                                 "query_too_deep") from None


def _check(conn, sql: str, params) -> None:
    try:
        statements = conn.extract_statements(sql)
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(first_line(exc), "syntax_error") from None
    if len(statements) != 1:
        raise ReadOnlyQueryError(f"one statement at a time, please (this query has {len(statements)})",
                                 "one_statement")
    kind = statements[0].type
    if kind not in READING_STATEMENTS:
        raise ReadOnlyQueryError(f"only reading queries run here (SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN; "
                                 f"no ATTACH, COPY, INSTALL, LOAD or SET); this one is {kind.name}", "read_only")
    tables, readers, other = _catalog(conn)
    # by name first, before DuckDB binds the query: a blocked scalar may not survive planning (folded, or failing),
    # and binding a file-reading function already reads its file
    called, named = _parsed(conn, sql)
    _refuse(called & BLOCKED_FUNCTIONS, (called & tables) - TABLE_FUNCTIONS - other, readers)
    paths = sorted(n for n in named if PATH_CHARS.search(n))
    if paths:
        raise ReadOnlyQueryError(f"{paths[0]!r}: the console reads the run's tables, not files (a table name with a "
                                 "dot, slash or colon is a file name to DuckDB)", "file_access")
    scanned = scanned_functions(conn, sql, params)
    _refuse(scanned & BLOCKED_FUNCTIONS, (scanned & tables) - TABLE_FUNCTIONS, readers)


def _refuse(blocked: set[str], unlisted: set[str], readers: frozenset) -> None:
    if blocked:
        raise ReadOnlyQueryError(f"{', '.join(sorted(blocked))}: not available here (runs SQL from a string, or "
                                 "shows the server's files and settings)", "function_refused")
    files = sorted(unlisted & readers)
    if files:
        raise ReadOnlyQueryError(f"{', '.join(files)}: reads files, which the console never does, whatever the "
                                 "folder: it reads the run's tables", "file_access")
    if unlisted:
        raise ReadOnlyQueryError(f"{', '.join(sorted(unlisted))}: not available here (only the table functions "
                                 f"{', '.join(sorted(TABLE_FUNCTIONS - {'summary'}))})", "function_refused")


def _catalog(conn) -> tuple[frozenset, frozenset, frozenset]:
    """(table functions, those of them that read files, names of scalar and aggregate functions and macros) of
    this DuckDB, from its own catalog, once per process."""
    found = _CATALOG.get(duckdb.__version__)
    if found is None:
        cur = conn.cursor()
        try:
            rows = cur.execute("SELECT lower(function_name), function_type, parameters FROM duckdb_functions()"
                               ).fetchall()
        finally:
            cur.close()
        tables = frozenset(n for n, kind, _ in rows if kind in ("table", "table_macro"))
        readers = frozenset(n for n, kind, params in rows
                            if kind == "table" and params and str(params[0]).lower() in FILE_PARAMETERS)
        other = frozenset(n for n, kind, _ in rows if kind in ("scalar", "aggregate", "macro"))
        found = _CATALOG[duckdb.__version__] = (tables, readers, other)
    return found


def called_functions(conn: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    """The (lower-case) names of the functions a reading statement calls (see :func:`_parsed`)."""
    return _parsed(conn, sql)[0]


def _parsed(conn, sql: str) -> tuple[set[str], set[str]]:
    """(functions called, tables named): from DuckDB's parse tree of the query (of what an ``EXPLAIN`` explains),
    or, where DuckDB cannot serialise it (``PIVOT``…), every name in its text, quoted or not, and every string in
    it as a table name: more than it uses, never less."""
    cur = conn.cursor()
    try:
        text = cur.execute("SELECT json_serialize_sql(?::VARCHAR)", [_explained(sql)]).fetchone()[0]
    except duckdb.Error:
        text = '{"error": true}'
    finally:
        cur.close()
    if text.startswith('{"error":true') or text.startswith('{"error": true'):
        return _names(sql), {t.strip("'") for kind, t in _tokens(sql) if kind == duckdb.token_type.string_const}
    found = json_values(text, ("function_name", "table_name"))
    return {n.lower() for n in found["function_name"]}, found["table_name"]


def scanned_functions(conn: duckdb.DuckDBPyConnection, sql: str, params: list | dict | None = None) -> set[str]:
    """The (lower-case) table functions DuckDB's plan of ``sql`` (of what an ``EXPLAIN`` explains) scans: what a
    query reads, whatever it is spelled as — a catalog view (``duckdb_databases``, ``pg_settings``,
    ``information_schema.…``) is planned as the table function behind it, a file name as ``read_csv_auto``… A
    query DuckDB cannot plan raises :class:`ReadOnlyQueryError`: it would not run either."""
    cur = conn.cursor()
    try:
        plan = cur.execute(f"EXPLAIN (FORMAT JSON) {_explained(sql)}", params or None).fetchall()
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(first_line(exc)) from None
    finally:
        cur.close()
    out: set[str] = set()
    for _kind, text in plan:
        out |= {name.lower() for name in json_values(text, ("Function",))["Function"]}
    return out


def json_values(text: str, keys: tuple[str, ...]) -> dict[str, set[str]]:
    """The string values of ``keys`` anywhere in the JSON ``text``, read as a stream of strings: no nesting is
    built, so a tree deeper than Python's recursion limit reads as well as a flat one."""
    out: dict[str, set[str]] = {k: set() for k in keys}
    want = None
    for m in _JSON_STRING.finditer(text):
        value = json.loads(f'"{m.group(1)}"') if "\\" in m.group(1) else m.group(1)
        if m.group(2):  # a key: its value is the next string, if the value is one
            want = value if value in out else None
        elif want is not None:
            out[want].add(value)
            want = None
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


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
