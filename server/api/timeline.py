"""``/api/runs/{id}/timeline/…``: tracks, viewport slices (exact or level-of-detail), counters, flows, one
slice's details, name search, range statistics (with self time, per-name instances and per-rank offsets) and the
match of a slice on another rank (to align ranks whose clocks differ). The router parses parameters; the queries
are :mod:`server.queries.timeline` (viewport, and the level-of-detail rule) and
:mod:`server.queries.timeline_details`.

Time: query parameters ``start_ns``/``end_ns`` are absolute epoch ns (integers in the query string). Epoch ns
(~1.7e18) exceed 2**53, the exact range of a JSON number, so responses carry ``origin_ns`` (a decimal string) and
every ``*_ns`` time in them is relative to it; durations are plain ns. Absolute values in responses are strings.

Bounds: every list has a row cap and a ``truncated`` flag; every query has a deadline (``query_timeout_s``). A
slice name longer than 2,000 characters is answered cut, ending with "…" (``…/slices/{id}/name`` gives it whole).

Slices, counters and flows answer JSON by default, or typed arrays when ``Accept`` names
``application/vnd.ascendscope.columns`` (:mod:`server.columns`: the same answer, smaller and cheaper to encode and
to read; the browser asks for it).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse

from ascendscope.server.api.answers import (
    COLUMN_RESPONSES,
    INT64_MAX,
    AcceptQ,
    ApiError,
    FastJSONResponse,
    Int64,
    ShiftNs,
    column_answer,
    fast_json,
)
from ascendscope.server.api.deps import RunDb, RunDbDep
from ascendscope.server.queries import timeline as tq
from ascendscope.server.queries import timeline_details as td

router = APIRouter(prefix="/api/runs/{run_id}/timeline", tags=["timeline"])

RunId = Annotated[str, Path(description="run id")]
StartNs = Annotated[Int64 | None, Query(description="window start, absolute epoch ns (default: run start)")]
EndNs = Annotated[Int64 | None, Query(description="window end, absolute epoch ns, exclusive (default: run end)")]
TrackIds = Annotated[list[Int64], Query(description="track ids (repeat the parameter for several)")]
WidthPx = Annotated[int, Query(ge=1, le=20_000, description="pixels the window is drawn on")]


def _tracks_allowed(db: RunDb, track_id: list[int]) -> None:
    if len(track_id) > db.settings.max_tracks_per_request:
        raise ApiError(400, "too_many_tracks", f"at most {db.settings.max_tracks_per_request} track_id values")


@router.get("/tracks")
@fast_json
def tracks(run_id: RunId, db: RunDbDep) -> FastJSONResponse:
    """Every track (lane) with its rank, kind, names, sort order and extent; counter tracks list their series.

    ``min_ts_ns``/``max_end_ns`` are relative to ``origin_ns``. ``flow_categories`` counts flows per ``cat``.
    ``slices_per_px``: above this many slices per pixel a window is answered from the level of detail (clients
    quantise their windows by it).
    """
    return tq.tracks(db)


@router.get("/slices", responses=COLUMN_RESPONSES)
def slices(run_id: RunId, db: RunDbDep, track_id: TrackIds, start_ns: StartNs = None, end_ns: EndNs = None,
           width_px: WidthPx = 1000, accept: AcceptQ = None) -> FastJSONResponse:
    """Slices of one or more tracks overlapping [start_ns, end_ns), in columns, names interned in ``names``.

    When a track holds more than ``slices_per_px`` (2) slices per pixel in the window, it is answered from
    ``slice_lod`` at the level whose ``bucket_ns`` is just below (end - start) / (2 * width_px): ``lod: true``, one
    row per (depth, bucket) drawn over the extent of the bucket's slices, with ``slice_count`` and the
    ``slice_id``/``name`` of its longest slice.
    """
    if not track_id:
        raise ApiError(400, "missing_parameter", "give at least one track_id")
    _tracks_allowed(db, track_id)
    return column_answer(tq.slices(db, track_id, start_ns, end_ns, width_px), accept)


@router.get("/counters", responses=COLUMN_RESPONSES)
def counters(run_id: RunId, db: RunDbDep, track_id: TrackIds, start_ns: StartNs = None, end_ns: EndNs = None,
             width_px: Annotated[int, Query(ge=1, le=20_000)] = 1000, accept: AcceptQ = None) -> FastJSONResponse:
    """Counter samples of one or more counter tracks in [start_ns, end_ns), per series, in columns.

    Above ~2 samples per pixel the samples are bucketed (power-of-two ``bucket_ns``): ``value`` is the bucket's
    max and ``value_min`` its min. ``before``/``after`` are the nearest samples outside the window.
    """
    _tracks_allowed(db, track_id)
    return column_answer(tq.counters(db, track_id, start_ns, end_ns, width_px), accept)


@router.get("/flows", responses=COLUMN_RESPONSES)
def flows(run_id: RunId, db: RunDbDep, start_ns: StartNs = None, end_ns: EndNs = None,
          cat: Annotated[list[str], Query(description="flow categories (repeatable); all when absent")] = [],
          accept: AcceptQ = None) -> FastJSONResponse:  # FastAPI copies query defaults
    """Flows with an end in, or spanning, [start_ns, end_ns), in columns (with each end's slice depth)."""
    return column_answer(tq.flows(db, start_ns, end_ns, cat), accept)


@router.get("/slices/{slice_id}")
@fast_json
def slice_detail(run_id: RunId, slice_id: Int64, db: RunDbDep) -> FastJSONResponse:
    """One slice: all args, the call stack and input shapes split on ``;\\r\\n``, its parent and children, its
    flows with their other ends (slice, track, ts) and, for a device task, its ``kernel_details`` row."""
    return td.slice_detail(db, slice_id)


@router.get("/slices/{slice_id}/name", response_class=PlainTextResponse)
def slice_name(run_id: RunId, slice_id: Int64, db: RunDbDep) -> PlainTextResponse:
    """One slice's whole name as text, however long: every other answer cuts a name at 2,000 characters and ends
    it with "…"."""
    return PlainTextResponse(td.slice_name(db, slice_id), headers={
        "Content-Disposition": f'inline; filename="slice-{slice_id}-name.txt"'})


@router.get("/search")
@fast_json
def search(run_id: RunId, db: RunDbDep,
           q: Annotated[str, Query(min_length=1, max_length=200, description="name substring, case-insensitive")],
           limit: Annotated[int, Query(ge=1, le=500)] = 50,
           after: Annotated[str | None, Query(description="cursor: hits after it (`next_after` of a page)")] = None,
           before: Annotated[str | None, Query(description="cursor: hits before it (`prev_before`)")] = None
           ) -> FastJSONResponse:
    """Slices whose name contains ``q``, across ranks, ordered by (ts, slice_id), one page at a time.

    Cursors are ``"<absolute ts_ns>:<slice_id>"``; the first page (no cursor) also says ``total``.
    """
    return td.search(db, q, limit, after, before)


OffsetRanks = Annotated[list[Int64], Query(description="ranks drawn shifted (the timeline's per-rank offsets); "
                                                        "pairs with offset_ns")]
OffsetNs = Annotated[list[ShiftNs], Query(description="each offset_rank's shift in ns (drawn time = raw + shift), "
                                                      "at most ±2^62")]


@router.get("/range_stats")
@fast_json
def range_stats(run_id: RunId, db: RunDbDep, start_ns: StartNs = None, end_ns: EndNs = None,
                track_id: Annotated[list[Int64], Query(description="limit to these tracks (all when absent)")] = [],
                offset_rank: OffsetRanks = [], offset_ns: OffsetNs = []) -> FastJSONResponse:
    """Per slice name over the slices overlapping [start_ns, end_ns) (all tracks, or the given ones): count,
    total, avg, min and max wall duration and self time (wall minus the part its children cover, never below 0)
    in ns, longest total first; ``totals`` over all of them."""
    return td.range_stats(db, start_ns, end_ns, track_id, offset_rank, offset_ns)


@router.get("/range_instances")
@fast_json
def range_instances(run_id: RunId, db: RunDbDep,
                    name: Annotated[str, Query(max_length=20_000, description="slice name, exact")],
                    start_ns: StartNs = None, end_ns: EndNs = None,
                    track_id: Annotated[list[Int64], Query(description="limit to these tracks")] = [],
                    offset_rank: OffsetRanks = [], offset_ns: OffsetNs = [],
                    offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
                    limit: Annotated[int, Query(ge=1, le=500)] = 100) -> FastJSONResponse:
    """The slices named ``name`` among those range_stats counts, in time order: ``ts_ns`` (drawn, relative to
    ``origin_ns``), duration, depth and self time; ``total`` of them, one page at a time."""
    return td.range_instances(db, name, start_ns, end_ns, track_id, offset_rank, offset_ns, offset, limit)


@router.get("/align")
@fast_json
def align(run_id: RunId, db: RunDbDep, slice_id: Annotated[Int64, Query(description="the slice to align")],
          rank: Annotated[Int64, Query(description="the reference rank")]) -> FastJSONResponse:
    """The slice on ``rank`` that matches ``slice_id`` (same name, lanes of the same kind, same occurrence in
    time order; the nearest in time when ``rank`` has fewer), and ``shift_ns``: its start minus the slice's, the
    offset that draws the slice where the match is."""
    return td.align(db, slice_id, rank)
