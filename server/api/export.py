"""``/api/runs/{id}/export/…``: a view's table, whole, as CSV or Parquet (the *Export* buttons of the views), and a
window of the timeline as Chrome/Perfetto trace JSON (the timeline's *Export*).

``GET /export/{table}.csv`` / ``.parquet``: the table is ``ascendscope.tables``' (the same function the Python API
calls, over the view's own query), with the view's filters as query parameters (``rank``, ``group_by``, ``kind``,
``step``, ``q``, ``sort``, ``order``, …; see ``tables.TABLES``); no ``rank``: every rank. ``GET
/export/timeline.json?ranks=0,1&start_ns=…&end_ns=…``: ``ascendscope.chrometrace``'s trace of those ranks (default
the loaded ones) in that window, refused (413) above :data:`MAX_TRACE_SLICES` slices: narrow it.
"""

from __future__ import annotations

import os
import tempfile
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask

from ascendscope import chrometrace, frames, tables
from ascendscope.server.api.answers import ApiError, Int64
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.db import parse_ranks

router = APIRouter(prefix="/api/runs/{run_id}/export", tags=["export"])

MEDIA = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet"}
MAX_TRACE_SLICES = 2_000_000
SCOPE_PARAMS = {"ranks"}  # the page's rank scope (server.db), sent with every request of a view
COUNT_SQL = """
SELECT count(*) FROM slices WHERE rank IN (SELECT unnest(?::INTEGER[])) AND ts_ns <= ? AND ts_ns + dur_ns >= ?
"""


def _filters(name: str, request: Request) -> dict:
    accepted = tables.TABLES[name][1]
    out = {}
    for key, value in request.query_params.items():
        if key in SCOPE_PARAMS:
            continue
        if key not in accepted:
            raise ApiError(400, "bad_parameter", f"table {name} has no filter {key!r}; it takes "
                                                 f"{', '.join(accepted)}", parameter=key)
        if value == "":
            continue
        try:
            out[key] = accepted[key](value)
        except ValueError:
            raise ApiError(422, "invalid_parameter", f"{key} must be an integer", parameter=key) from None
    return out


@router.get("/timeline.json")
def export_timeline(db: RunDbDep, ranks: str | None = None, start_ns: Int64 | None = None,
                    end_ns: Int64 | None = None):
    """The timeline of ``ranks`` (comma-separated; default: every loaded rank) between ``start_ns`` and
    ``end_ns`` (absolute epoch ns; default: all) as Chrome trace JSON for Perfetto / chrome://tracing."""
    try:
        chosen = list(parse_ranks(ranks) or ()) or list(db.info.loaded_ranks or db.info.ranks)
    except ValueError as exc:
        raise ApiError(422, "invalid_parameter", str(exc), parameter="ranks") from None
    lo = chrometrace.INT64_MIN if start_ns is None else start_ns
    hi = chrometrace.INT64_MAX if end_ns is None else end_ns
    if hi < lo:
        raise ApiError(400, "bad_range", "end_ns is before start_ns")
    unknown = sorted(set(chosen) - set(db.info.ranks))
    if unknown:
        raise ApiError(404, "rank_not_found", f"the run has no rank {', '.join(map(str, unknown))}")
    (count,) = db.one(COUNT_SQL, [chosen, hi, lo])
    if count > MAX_TRACE_SLICES:
        raise ApiError(413, "too_large", f"the window holds {count:,} slices; an export takes at most "
                                         f"{MAX_TRACE_SLICES:,}: narrow the time range or the ranks")
    fd, tmp = tempfile.mkstemp(prefix="ascendscope-trace-", suffix=".json")
    os.close(fd)
    try:
        with db.pool.slot(db.settings.query_timeout_s):
            chrometrace.write(db.cur, tmp, ranks=chosen, start_ns=start_ns, end_ns=end_ns)
    except BaseException:
        os.unlink(tmp)
        raise
    window = "" if start_ns is None else f"_{start_ns}-{end_ns}"
    return FileResponse(tmp, media_type="application/json", background=BackgroundTask(os.unlink, tmp),
                        filename=f"{db.run.id}_ranks{'-'.join(map(str, chosen))}{window}.trace.json")


@router.get("/{name}.{fmt}")
def export_table(db: RunDbDep, request: Request,
                 name: Annotated[str, Path(description="a table: " + ", ".join(tables.TABLES))],
                 fmt: Annotated[str, Path(description="csv or parquet")]):
    """A view's table, all of its rows, with the view's filters as query parameters."""
    if name not in tables.TABLES:
        raise ApiError(404, "table_not_found", f"no table {name!r}; tables: {', '.join(tables.TABLES)}")
    if fmt not in MEDIA:
        raise ApiError(404, "format_not_found", "export as csv or parquet")
    function, _ = tables.TABLES[name]
    frame = frames.to_frame(function(db, db.run.id, **_filters(name, request)))
    rank = request.query_params.get("rank")
    filename = f"{db.run.id}{'' if rank in (None, '') else f'_rank{rank}'}_{name}.{fmt}"
    return Response(frames.to_bytes(frame, fmt), media_type=MEDIA[fmt], headers={
        "Content-Disposition": f'attachment; filename="{filename}"', "X-Row-Count": str(len(frame))})
