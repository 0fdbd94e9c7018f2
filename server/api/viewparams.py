"""What the operator, memory, summary and communication routers share: their query parameters (as ``Annotated``
aliases, so a handler's signature documents itself), CSV responses, and the time origin of a run without a trace.
A :class:`server.queries.QueryError` a query raises reaches the client through the app's one handler
(``server.errors``): routers just call the query.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from fastapi.responses import Response

from ascendscope.server.api.answers import INT64_MAX, Int64
from ascendscope.server.api.deps import RunDb
from ascendscope.server.queries import DEFAULT_PAGE_ROWS, MAX_CSV_ROWS, MAX_PAGE_ROWS, Csv, Page

RankQ = Annotated[Int64 | None, Query(description="rank; default: the first rank that has this data")]
StepQ = Annotated[Int64 | None, Query(description="step number (ProfilerStep#N)")]
SortQ = Annotated[str | None, Query(max_length=64, description="column to sort by (see the endpoint's list)")]
OrderQ = Annotated[str | None, Query(pattern="^(asc|desc)$", description="asc or desc (default desc)")]
FilterQ = Annotated[str | None, Query(max_length=200, description="case-insensitive substring of the name")]
OffsetQ = Annotated[int, Query(ge=0, le=INT64_MAX, description="rows to skip")]
LimitQ = Annotated[int, Query(ge=1, le=MAX_PAGE_ROWS, description=f"page size (at most {MAX_PAGE_ROWS})")]
AbsNsQ = Annotated[Int64 | None, Query(description="absolute epoch ns")]

DEFAULT_LIMIT = DEFAULT_PAGE_ROWS


def page(offset: int, limit: int) -> Page:
    return Page.of(offset, limit)


def csv_response(result: Csv, filename: str) -> Response:
    """``text/csv`` download; ``X-Row-Count`` and ``X-Truncated`` say whether the row cap cut it."""
    return Response(result.text, media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="{filename}"',
        "X-Row-Count": str(result.rows),
        "X-Row-Cap": str(MAX_CSV_ROWS),
        "X-Truncated": "true" if result.truncated else "false",
    })


def pick_rank(rank: int | None, available: list[int]) -> int | None:
    """The asked rank, else the first rank with data, else None (the run has none of this data)."""
    if rank is not None:
        return rank
    return available[0] if available else None


def origin_ns(db: RunDb, fallback_sql: str) -> int:
    """The run's time zero; runs without a trace have none, so the earliest time of the view's own data."""
    if db.info.origin_ns:
        return int(db.info.origin_ns)
    row = db.one(fallback_sql)
    return int(row[0]) if row and row[0] is not None else 0
