"""``/api/runs/{id}/query``: the SQL console's API — one read-only SELECT over the run's documented tables
(``server/queries/sql_console.py``), on a locked connection of its own (``server/console.py``), time-limited and
row-capped; ``/query.csv`` the same as CSV; ``/query/schema`` the tables, their columns and the example queries.

A sharded run of more ranks than ``max_loaded_ranks`` answers from the ranks ``ranks=`` names (else the first);
the run-wide and ``cluster_*`` tables cover every rank whatever the scope. Answers say which ranks were loaded.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from ascendscope.server.api import ApiError, RunDep, StoreDep, fast_json, request_budget
from ascendscope.server.api.viewparams import csv_response
from ascendscope.server.console import Console, ConsoleDatabases
from ascendscope.server.db import DamagedDatabase, parse_ranks
from ascendscope.server.queries import MAX_CSV_ROWS, Csv, csv_text
from ascendscope.server.queries import sql_console as sc

router = APIRouter(prefix="/api/runs/{run_id}/query", tags=["sql console"])

SqlQ = Annotated[str, Query(max_length=sc.MAX_SQL_CHARS, description="one SELECT statement")]
RanksQ = Annotated[str | None, Query(max_length=4000, description="a sharded run's ranks to load (17,18)")]


def consoles(request: Request) -> ConsoleDatabases:
    state = request.app.state
    if getattr(state, "console", None) is None:  # an app built without one (tests build several)
        state.console = ConsoleDatabases(state.settings.max_loaded_ranks)
    return state.console


def console(run: RunDep, store: StoreDep, request: Request, ranks: RanksQ = None) -> Console:
    if run.status != "ready":
        raise ApiError(409, "run_not_ready", f"run {run.id!r} is {run.status}", run_status=run.status)
    try:
        asked = parse_ranks(ranks)
    except ValueError as exc:
        raise ApiError(422, "invalid_parameter", f"ranks: {exc}", parameter="ranks") from None
    try:
        return consoles(request).get(run.id, store.db_path(run.id), asked)
    except (FileNotFoundError, DamagedDatabase) as exc:
        # the console's own connection (memory, file handles, a lock) failing to open says nothing sure about the
        # run, which the views read through another: answer an error, do not mark the run failed for everyone
        raise ApiError(503, "console_unavailable", f"the SQL console could not open this run: "
                       f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}") from exc


ConsoleDep = Annotated[Console, Depends(console)]


def _run(c: Console, request: Request, sql: str, **caps) -> dict:
    """``sc.run`` in a heavy slot of the server's query pool (a console query may scan the whole run: it never
    makes a viewport request wait), within the request's deadline from its arrival (the wait for the slot
    included), interrupted when its client goes away."""
    budget = request_budget(request)
    timeout = request.app.state.settings.query_timeout_s
    deadline = budget["deadline"] if budget["deadline"] is not None else time.monotonic() + timeout
    with request.app.state.query_pool.slot(max(deadline - time.monotonic(), 0.0), heavy=True,
                                           cancel=budget["cancel"]):
        return sc.run(c.conn, sql, timeout_s=timeout, deadline=deadline, cancel=budget["cancel"], **caps)


def _scope(c: Console) -> dict:
    return {"loaded_ranks": c.loaded, "ranks": len(c.all_ranks) if c.loaded is not None else None}


@router.get("")
@fast_json
def run_query(c: ConsoleDep, request: Request, sql: SqlQ,
              limit: Annotated[int, Query(ge=1, le=sc.MAX_ROWS)] = sc.MAX_ROWS) -> dict:
    """Columns, their DuckDB types and at most ``limit`` rows within ``MAX_JSON_BYTES`` (``truncated`` and
    ``truncated_by`` when there were more)."""
    out = _run(c, request, sql, max_rows=limit)
    return out | _scope(c)


@router.get(".csv")
def run_query_csv(c: ConsoleDep, request: Request, sql: SqlQ):
    """The same rows as CSV (at most 100,000, and at most ``MAX_CSV_BYTES`` of them; ``X-Truncated`` says when
    there were more)."""
    out = _run(c, request, sql, max_rows=MAX_CSV_ROWS + 1, max_bytes=sc.MAX_CSV_BYTES)
    found = csv_text(out["columns"], out["rows"])
    if out["truncated_by"] == "bytes":  # cut by size before the row cap: say so too
        found = Csv(found.text, found.rows, True)
    return csv_response(found, "query.csv")


@router.get("/schema")
@fast_json
def query_schema(c: ConsoleDep) -> dict:
    """The tables the console sees (documented ones first, with a note), their columns, and example queries."""
    return {"tables": sc.schema(c.conn), "examples": sc.examples(), "row_cap": sc.MAX_ROWS,
            "max_sql_chars": sc.MAX_SQL_CHARS} | _scope(c)
