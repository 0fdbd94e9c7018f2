"""``/api/runs/{id}/query``: the SQL console's API — one read-only SELECT over the run's documented tables
(``server/queries/sql_console.py``), answered by a console worker process (``server/consolepool.py``): its own
memory limit, its own deadline (from the request's arrival), answers cut before they leave it; ``/query.csv`` the
same as CSV; ``/query/schema`` the tables, their columns and the example queries.

The handlers are ``async``: a request waiting for a worker holds no thread. A sharded run of more ranks than
``max_loaded_ranks`` answers from the ranks ``ranks=`` names (else the first); the run-wide and ``cluster_*``
tables cover every rank whatever the scope. Answers say which ranks were loaded.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ascendscope.server.api.answers import ApiError, FastJSONResponse
from ascendscope.server.api.deps import RunDep, StoreDep, request_budget
from ascendscope.server.consolepool import ConsoleBusy, ConsoleFailed, ConsolePool, client_key
from ascendscope.server.db import parse_ranks
from ascendscope.server.queries import MAX_CSV_ROWS
from ascendscope.server.queries import sql_console as sc

router = APIRouter(prefix="/api/runs/{run_id}/query", tags=["sql console"])

SqlQ = Annotated[str, Query(max_length=sc.MAX_SQL_CHARS, description="one SELECT statement")]
RanksQ = Annotated[str | None, Query(max_length=4000, description="a sharded run's ranks to load (17,18)")]
# a worker's error code -> HTTP status (any other code: 400, a query the rules or DuckDB refused)
STATUSES = {"console_unavailable": 503, "internal_error": 500, "answer_too_large": 500}


def pool(request: Request) -> ConsolePool:
    state = request.app.state
    if not isinstance(getattr(state, "console", None), ConsolePool):  # an app built without one (tests)
        settings = state.settings
        state.console = ConsolePool(settings.data_dir, size=state.query_pool.heavy_slots,
                                    timeout_s=settings.query_timeout_s, max_loaded_ranks=settings.max_loaded_ranks)
    return state.console


def job(run, store, what: str, ranks: str | None, **more) -> dict:
    if run.status != "ready":
        raise ApiError(409, "run_not_ready", f"run {run.id!r} is {run.status}", run_status=run.status)
    try:
        asked = parse_ranks(ranks)
    except ValueError as exc:
        raise ApiError(422, "invalid_parameter", f"ranks: {exc}", parameter="ranks") from None
    return {"kind": "console", "what": what, "run_id": run.id, "path": str(store.db_path(run.id)),
            "ranks": None if asked is None else tuple(asked), **more}


async def answer(request: Request, work: dict) -> tuple[dict, bytes]:
    """``work`` done by a console worker within the request's deadline; errors as the API answers them."""
    budget = request_budget(request)
    deadline = budget["deadline"]
    if deadline is None:
        deadline = time.monotonic() + request.app.state.settings.query_timeout_s
    try:
        return await pool(request).run(work, client=client_key(request), deadline=deadline, cancel=budget["cancel"])
    except ConsoleBusy as exc:
        raise Busy(exc) from None
    except ConsoleFailed as exc:
        raise ApiError(STATUSES.get(exc.code, 400), exc.code, str(exc)) from None


class Busy(Exception):
    """The console could not take the request now: answered 429 with Retry-After (:func:`busy_response`)."""

    def __init__(self, exc: ConsoleBusy):
        super().__init__(str(exc))
        self.retry_after_s = exc.retry_after_s


def busy_response(exc: Busy) -> Response:
    body = ApiError(429, "console_busy", str(exc), retry_after_s=exc.retry_after_s).body()
    return FastJSONResponse(body, status_code=429, headers={"Retry-After": str(exc.retry_after_s)})


@router.get("")
async def run_query(run: RunDep, store: StoreDep, request: Request, sql: SqlQ,
                    limit: Annotated[int, Query(ge=1, le=sc.MAX_ROWS)] = sc.MAX_ROWS, ranks: RanksQ = None):
    """Columns, their DuckDB types and at most ``limit`` rows within ``MAX_JSON_BYTES`` (``truncated`` and
    ``truncated_by`` when rows were left out, ``cells_cut`` when long values were shortened)."""
    work = job(run, store, "json", ranks, sql=sql, max_rows=limit, max_bytes=sc.MAX_JSON_BYTES)
    try:
        meta, body = await answer(request, work)
    except Busy as exc:
        return busy_response(exc)
    return Response(body, media_type=meta["media_type"])


@router.get(".csv")
async def run_query_csv(run: RunDep, store: StoreDep, request: Request, sql: SqlQ, ranks: RanksQ = None):
    """The same rows as CSV (at most 100,000, and at most ``MAX_CSV_BYTES`` of them; ``X-Truncated`` says when
    there were more)."""
    work = job(run, store, "csv", ranks, sql=sql, max_rows=MAX_CSV_ROWS + 1, max_bytes=sc.MAX_CSV_BYTES)
    try:
        meta, body = await answer(request, work)
    except Busy as exc:
        return busy_response(exc)
    return Response(body, media_type=meta["media_type"], headers={
        "Content-Disposition": 'attachment; filename="query.csv"', "X-Row-Count": str(meta["rows"]),
        "X-Row-Cap": str(MAX_CSV_ROWS), "X-Truncated": "true" if meta["truncated"] else "false"})


@router.get("/schema")
async def query_schema(run: RunDep, store: StoreDep, request: Request, ranks: RanksQ = None):
    """The tables the console sees (documented ones first, with a note), their columns, and example queries."""
    try:
        meta, body = await answer(request, job(run, store, "schema", ranks))
    except Busy as exc:
        return busy_response(exc)
    return Response(body, media_type=meta["media_type"])
