"""The SQL behind the operator, memory, summary and communication views.

Contract: every function takes a *runner* (anything with ``rows(sql, params)`` and ``dicts(sql, params)``: the
request's :class:`server.api.RunDb`, or :class:`DuckRunner` over a plain connection in tests and scripts) and
returns plain JSON-ready values. SQL text is made of named constants and of fragments chosen from whitelists in
this package; user input only ever travels as a bound ``?`` parameter. Lists are bounded: a page has at most
``MAX_PAGE_ROWS`` rows, a CSV at most ``MAX_CSV_ROWS``, and every list says whether it was ``truncated``.

Absolute timestamps (epoch ns, beyond 2**53) leave as decimal strings; durations stay integers in ns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ascendscope.ingest.breakdown import ConnRunner

MAX_PAGE_ROWS = 500
# a slice name in a view's answer, as the SQL console cuts a cell: a longer one is cut and ends with "…" (the whole
# name: GET …/timeline/slices/{id}/name)
MAX_NAME_CHARS = 2_000
CUT_MARK = "…"
DEFAULT_PAGE_ROWS = 50
MAX_CSV_ROWS = 100_000
SORT_ORDERS = {"asc": "ASC", "desc": "DESC"}

# the table (or view) a query's unqualified name reads: a sharded run's connection also attaches cluster.duckdb
# (whose empty schema holds every table with all its columns) and the shards, whose same-named tables must not count
TABLE_COLUMNS_SQL = """
SELECT column_name FROM duckdb_columns()
WHERE table_name = ? AND database_name = current_database() AND schema_name = current_schema()
ORDER BY column_index
"""


class Runner(Protocol):
    def rows(self, sql: str, params: list | tuple = ()) -> list[tuple]: ...

    def dicts(self, sql: str, params: list | tuple = ()) -> list[dict]: ...


# a Runner over a DuckDB connection (tests, scripts): the one ingest uses for the step breakdown
DuckRunner = ConnRunner


class QueryError(ValueError):
    """A parameter the client got wrong (unknown sort column, bad group key…): the API answers 400
    (``server.errors`` maps it)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class NotFound(QueryError):
    """What a parameter names does not exist (a track, a slice, a rank…): the API answers 404."""


def table_columns(db: Runner, table: str) -> set[str]:
    """The columns a CSV-backed table has in this run (they follow the source files' headers)."""
    return {r[0] for r in db.rows(TABLE_COLUMNS_SQL, [table])}


def col_or_null(columns: set[str], name: str, sql_type: str = "VARCHAR") -> str:
    """``name`` when the table has it, else a typed NULL under that name. ``name`` comes from our own constants."""
    return name if name in columns else f"NULL::{sql_type} AS {name}"


def shown_name(name: str | None) -> str | None:
    """A name as a view answers it: cut at :data:`MAX_NAME_CHARS` characters, with :data:`CUT_MARK`."""
    if name is None or len(name) <= MAX_NAME_CHARS:
        return name
    return name[:MAX_NAME_CHARS] + CUT_MARK


def shown_name_sql(column: str) -> str:
    """:func:`shown_name` in SQL, for the column ``column`` (one of our own constants)."""
    return (f"CASE WHEN length({column}) > {MAX_NAME_CHARS} THEN left({column}, {MAX_NAME_CHARS}) || '{CUT_MARK}' "
            f"ELSE {column} END")


def cut_prefix(name: str) -> str | None:
    """The kept part of a name :func:`shown_name` cut (None for a name it left whole): what a client sends back."""
    return name[:-1] if len(name) == MAX_NAME_CHARS + 1 and name.endswith(CUT_MARK) else None


def ns_str(value) -> str | None:
    return None if value is None else str(int(value))


def order_by(sort: str | None, order: str | None, whitelist: dict[str, str], default: str) -> str:
    """An ``ORDER BY`` body from a whitelisted sort key; ``whitelist`` maps API names to SQL expressions."""
    key = sort or default
    if key not in whitelist:
        raise QueryError("bad_sort", f"cannot sort by {key!r}; choose one of: {', '.join(sorted(whitelist))}")
    direction = SORT_ORDERS.get((order or "desc").lower())
    if direction is None:
        raise QueryError("bad_order", "order must be 'asc' or 'desc'")
    return f"{whitelist[key]} {direction} NULLS LAST"


@dataclass
class Page:
    offset: int = 0
    limit: int = DEFAULT_PAGE_ROWS

    @classmethod
    def of(cls, offset: int | None, limit: int | None, cap: int = MAX_PAGE_ROWS) -> Page:
        off = max(0, int(offset or 0))
        lim = DEFAULT_PAGE_ROWS if limit is None else int(limit)
        return cls(off, max(1, min(lim, cap)))


class Where:
    """``WHERE`` clauses assembled from fixed fragments, with their bound parameters kept alongside."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.params: list = []

    def add(self, fragment: str, *params) -> Where:
        self.parts.append(fragment)
        self.params.extend(params)
        return self

    def sql(self) -> str:
        return " AND ".join(self.parts) if self.parts else "TRUE"


def paged(rows: list, page: Page, total: int) -> dict:
    return {"rows": rows, "total": total, "offset": page.offset, "limit": page.limit,
            "truncated": page.offset + len(rows) < total}


def ratio(part, whole) -> float | None:
    return None if not whole else float(part or 0) / float(whole)


@dataclass
class Csv:
    """A CSV download: the text, its data-row count, and whether the ``MAX_CSV_ROWS`` cap cut it short."""

    text: str
    rows: int
    truncated: bool


def csv_text(columns: Sequence[str], rows: Iterable[Sequence]) -> Csv:
    """Rows as RFC 4180 CSV (``\\r\\n`` line ends, like the profiler's own files). Callers fetch
    ``MAX_CSV_ROWS + 1`` rows so that a cut can be told from an exact fit."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(columns)
    n = 0
    truncated = False
    for r in rows:
        if n == MAX_CSV_ROWS:
            truncated = True
            break
        w.writerow(["" if v is None else v for v in r])
        n += 1
    return Csv(buf.getvalue(), n, truncated)
