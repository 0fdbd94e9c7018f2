"""``/api/runs/{id}/timeline/…``: tracks, viewport slices (exact or level-of-detail), counters, flows, one
slice's details, name search, range statistics (with self time, per-name instances and per-rank offsets) and the
match of a slice on another rank (to align ranks whose clocks differ).

Time: query parameters ``start_ns``/``end_ns`` are absolute epoch ns (integers in the query string). Epoch ns
(~1.7e18) exceed 2**53, the exact range of a JSON number, so responses carry ``origin_ns`` (a decimal string) and
every ``*_ns`` time in them is relative to it; durations are plain ns. Absolute values in responses are strings.

Bounds: every list has a row cap and a ``truncated`` flag; every query has a deadline (``query_timeout_s``).
"""

from __future__ import annotations

import json
from typing import Annotated

import numpy as np
import pandas as pd
from fastapi import APIRouter, Path, Query

from ascendscope.server.api import (
    INT64_MAX,
    INT64_MIN,
    ApiError,
    FastJSONResponse,
    Int64,
    RunDb,
    RunDbDep,
    fast_json,
    ns_str,
)
from ascendscope.server.api.timeline_sql import (
    ALIGN_MATCH_SQL,
    ALIGN_NEAREST_SQL,
    ALIGN_OCCURRENCE_SQL,
    CHILDREN_SQL,
    COUNTER_COUNT_SQL,
    COUNTER_EDGES_SQL,
    COUNTER_EXACT_SQL,
    COUNTER_LOD_SQL,
    COUNTER_SERIES_SQL,
    DENSITY_MARGIN,
    FLOW_CATEGORIES_SQL,
    FLOWS_IN_RANGE_SQL,
    KERNEL_SQL,
    RANGE_INSTANCES_SQL,
    RANGE_STATS_SQL,
    RANGE_TOTALS_SQL,
    SEARCH_AFTER_SQL,
    SEARCH_BEFORE_SQL,
    SEARCH_COUNT_SQL,
    SLICE_BRIEF_SQL,
    SLICE_FLOWS_SQL,
    SLICE_SQL,
    SLICES_EXACT_BATCH_SQL,
    SLICES_EXACT_SQL,
    SLICES_LOD_COUNT_SQL,
    SLICES_LOD_SQL,
    SLICES_PER_PX,
)
from ascendscope.server.queries import sources

router = APIRouter(prefix="/api/runs/{run_id}/timeline", tags=["timeline"])

RunId = Annotated[str, Path(description="run id")]
StartNs = Annotated[Int64 | None, Query(description="window start, absolute epoch ns (default: run start)")]
EndNs = Annotated[Int64 | None, Query(description="window end, absolute epoch ns, exclusive (default: run end)")]
TrackIds = Annotated[list[Int64], Query(description="track ids (repeat the parameter for several)")]


def _window(db: RunDb, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    start = db.info.start_ns if start_ns is None else start_ns
    end = db.info.end_ns if end_ns is None else end_ns
    if end <= start:
        end = start + 1 if start_ns is None or end_ns is None else end
    if end <= start:
        raise ApiError(400, "invalid_range", f"end_ns ({end}) must be greater than start_ns ({start})")
    return start, end


def _track(db: RunDb, track_id: int):
    track = db.info.tracks.get(track_id)
    if track is None:
        raise ApiError(404, "track_not_found", f"no track with id {track_id}")
    return track


def _rel(value: int | None, origin: int) -> int | None:
    return None if value is None else int(value) - origin


@router.get("/tracks")
@fast_json
def tracks(run_id: RunId, db: RunDbDep) -> FastJSONResponse:
    """Every track (lane) with its rank, kind, names, sort order and extent; counter tracks list their series.

    ``min_ts_ns``/``max_end_ns`` are relative to ``origin_ns``. ``flow_categories`` counts flows per ``cat``.
    """
    origin = db.info.origin_ns
    series: dict[int, list[dict]] = {}
    for track_id, name, points, lo, hi in db.rows(COUNTER_SERIES_SQL):
        series.setdefault(track_id, []).append({"series": name, "points": points, "min_value": lo, "max_value": hi})
    out = []
    for row in db.info.track_rows:
        item = {k: row[k] for k in ("track_id", "rank", "pid", "tid", "process_name", "thread_name", "kind", "label",
                                    "process_sort_index", "thread_sort_index", "sort_index", "counter_name",
                                    "slice_count", "max_depth", "max_dur_ns", "derived")}
        item["min_ts_ns"] = _rel(row["min_ts_ns"], origin)
        item["max_end_ns"] = _rel(row["max_end_ns"], origin)
        if row["kind"] == "counter":
            item["series"] = series.get(row["track_id"], [])
        out.append(item)
    return {
        "origin_ns": ns_str(origin), "start_ns": ns_str(db.info.start_ns), "end_ns": ns_str(db.info.end_ns),
        "duration_ns": db.info.end_ns - db.info.start_ns,
        "ranks": sorted({t["rank"] for t in out}),
        "tracks": out,
        "flow_categories": [{"cat": c, "count": n} for c, n in db.rows(FLOW_CATEGORIES_SQL)],
        "lod_levels": [{"level": lv, "bucket_ns": b} for lv, b in db.info.lod_levels],
        # ranks without a timeline, and the file or table that would have given them one
        "empty_sources": sources.explain(db, "timeline")["trace"],
    }


@router.get("/slices")
@fast_json
def slices(run_id: RunId, db: RunDbDep, track_id: TrackIds, start_ns: StartNs = None, end_ns: EndNs = None,
           width_px: Annotated[int, Query(ge=1, le=20_000, description="pixels the window is drawn on")] = 1000
           ) -> FastJSONResponse:
    """Slices of one or more tracks overlapping [start_ns, end_ns), in columns, names interned in ``names``.

    When a track holds more than ~2 slices per pixel in the window, it is answered from ``slice_lod`` at the level
    whose ``bucket_ns`` is just below (end - start) / (2 * width_px): ``lod: true``, one row per (depth, bucket)
    drawn over the extent of the bucket's slices, with ``slice_count`` and the ``slice_id``/``name`` of its
    longest slice.
    """
    if not track_id:
        raise ApiError(400, "missing_parameter", "give at least one track_id")
    if len(track_id) > db.settings.max_tracks_per_request:
        raise ApiError(400, "too_many_tracks", f"at most {db.settings.max_tracks_per_request} track_id values")
    start, end = _window(db, start_ns, end_ns)
    tracks = {tid: _track(db, tid) for tid in dict.fromkeys(track_id)}
    # per track, so that users who see some of the same tracks at the same window share the work
    answers = db.shared("slices", (start, end, width_px), list(tracks),
                        lambda ids: _factorized(_viewport_slices(db, [tracks[i] for i in ids], start, end, width_px)))
    out = [{"track_id": tid, **answers[tid][0], **answers[tid][1], "count": len(answers[tid][1]["slice_id"])}
           for tid in tracks]
    names = _intern([answers[tid][2] for tid in tracks], out)
    return {"origin_ns": ns_str(db.info.origin_ns), "start_ns": ns_str(start), "end_ns": ns_str(end),
            "width_px": width_px, "names": names, "tracks": out}


def _factorized(answers: dict[int, tuple[dict, dict]]) -> dict[int, tuple[dict, dict, tuple]]:
    """(flags, columns) → (flags, columns but name, (name codes, distinct names)): the costly part of interning
    names is done once per answer (then cached), so a response only merges the short lists of distinct names."""
    out = {}
    for tid, (flags, cols) in answers.items():
        codes, uniques = pd.factorize(np.asarray(cols["name"], dtype=object), use_na_sentinel=False)
        out[tid] = (flags, {k: v for k, v in cols.items() if k != "name"},
                    (codes, [None if isinstance(u, float) else u for u in uniques.tolist()]))
    return out


def _viewport_slices(db: RunDb, tracks: list, start: int, end: int, width_px: int) -> dict[int, tuple[dict, dict]]:
    """track_id → (flags, columns): dense tracks from one slice_lod scan, sparse ones exactly (batched)."""
    origin, cap = db.info.origin_ns, db.settings.max_slices_per_track
    threshold = SLICES_PER_PX * width_px
    lod = _lod_choice(db.info.lod_levels, (end - start) / (SLICES_PER_PX * width_px))
    # dense or sparse: from the track's extent when that is clear, else by counting (at most threshold + 1 rows)
    dense, sparse, unsure = [], [], []
    for track in tracks:
        guess = _estimate_rows(track, start, end)
        if lod is None or guess * DENSITY_MARGIN < threshold:
            sparse.append(track)
        elif guess > threshold * DENSITY_MARGIN:
            dense.append(track)
        else:
            unsure.append(track)
    if unsure:
        counts = _lod_counts(db, unsure, start, end)
        for track in unsure:
            (dense if counts.get(track.track_id, 0) > threshold else sparse).append(track)
    answers: dict[int, tuple[dict, dict]] = {}
    if dense:
        level, bucket_ns = lod
        ids = [t.track_id for t in dense]
        lo = start - max(t.max_dur_ns for t in dense)
        cols = db.arrays(SLICES_LOD_SQL, {"origin": origin, "level": level, "tracks": ids, "track_min": min(ids),
                                          "track_max": max(ids), "bucket_lo": lo // bucket_ns,
                                          "bucket_hi": (end - 1) // bucket_ns, "start": start, "end": end,
                                          "limit": cap * len(ids) + 1})
        answers.update(_split(cols, ids, cap, {"lod": True, "bucket_ns": bucket_ns, "level": level}))
    # sparse tracks whose longest slice is shorter than the window share one scan; the others go one by one
    batch = [t for t in sparse if t.max_dur_ns <= end - start]
    if len(batch) > 1:
        ids = [t.track_id for t in batch]
        los = [start - t.max_dur_ns for t in batch]
        cols = db.arrays(SLICES_EXACT_BATCH_SQL, {"origin": origin, "tracks": ids, "los": los, "track_min": min(ids),
                                                  "track_max": max(ids), "lo_min": min(los), "start": start,
                                                  "end": end, "limit": cap * len(ids) + 1})
        answers.update(_split(cols, ids, cap, {"lod": False, "bucket_ns": None}))
    for track in sparse:
        if track.track_id in answers:
            continue
        window = {"track": track.track_id, "lo": start - track.max_dur_ns, "end": end, "start": start}
        cols = db.arrays(SLICES_EXACT_SQL, window | {"origin": origin, "limit": cap + 1})
        answers[track.track_id] = ({"lod": False, "bucket_ns": None, "truncated": len(cols["slice_id"]) > cap},
                                   {k: v[:cap] for k, v in cols.items()})
    return answers


def _lod_counts(db: RunDb, tracks: list, start: int, end: int) -> dict[int, int]:
    """track_id → slices starting in the window, from the coarsest LOD level with at least 16 buckets in it."""
    levels = db.info.lod_levels
    level, bucket_ns = levels[0]
    for lv, b in levels:
        if b * 16 <= end - start:
            level, bucket_ns = lv, b
    ids = [t.track_id for t in tracks]
    rows = db.rows(SLICES_LOD_COUNT_SQL, {"level": level, "tracks": ids, "track_min": min(ids),
                                          "track_max": max(ids), "bucket_lo": start // bucket_ns,
                                          "bucket_hi": (end - 1) // bucket_ns})
    return {int(tid): int(n) for tid, n in rows}


def _split(cols: dict, ids: list[int], cap: int, flags: dict) -> dict[int, tuple[dict, dict]]:
    """Rows of several tracks (ordered by track_id) → per track (flags, columns), each capped at ``cap``; the last
    track of a result that hit the overall limit is marked truncated too."""
    by_track = cols.pop("track_id")
    complete = len(by_track) <= cap * len(ids)
    out = {}
    for tid in ids:
        a, b = np.searchsorted(by_track, tid, "left"), np.searchsorted(by_track, tid, "right")
        cut = b - a > cap or (not complete and tid == by_track[-1])
        out[tid] = (flags | {"truncated": bool(cut)}, {k: v[a:min(b, a + cap)] for k, v in cols.items()})
    return out


def _estimate_rows(track, start: int, end: int) -> float:
    """Slices of the track expected in the window if they were spread evenly over its extent."""
    lo, hi = track.row.get("min_ts_ns"), track.row.get("max_end_ns")
    if not track.slice_count or lo is None or hi is None:
        return 0.0
    overlap = min(end, hi) - max(start, lo)
    return track.slice_count * max(0, overlap) / max(1, hi - lo)


def _intern(parts: list[tuple[np.ndarray, list]], entries: list[dict]) -> list[str]:
    """One names table for the response from each entry's (codes, distinct names); each entry gets ``name_id``
    (indexes into it)."""
    index: dict = {}
    for entry, (codes, uniques) in zip(entries, parts):
        remap = np.fromiter((index.setdefault(u, len(index)) for u in uniques), dtype=np.int64, count=len(uniques))
        entry["name_id"] = remap[codes] if len(codes) else codes
    return list(index)


LOD_COARSER_OK = 4  # a level-0 bucket may span up to this many target widths (2 px) instead of exact rows


def _lod_choice(levels: list[tuple[int, int]], target_ns: float) -> tuple[int, int] | None:
    """(level, bucket_ns) of the coarsest level not coarser than the target. Level 0 is built only as fine as
    saves rows, so when it is a little coarser than the target (up to ``LOD_COARSER_OK`` times: one bucket per
    2 px) it is still used for dense tracks rather than sending every slice; None (exact) beyond that."""
    chosen = None
    for level, bucket_ns in levels:
        if bucket_ns <= target_ns:
            chosen = (level, bucket_ns)
    if chosen is None and levels and levels[0][1] <= target_ns * LOD_COARSER_OK:
        chosen = (levels[0][0], levels[0][1])
    return chosen


@router.get("/counters")
@fast_json
def counters(run_id: RunId, db: RunDbDep, track_id: TrackIds, start_ns: StartNs = None, end_ns: EndNs = None,
             width_px: Annotated[int, Query(ge=1, le=20_000)] = 1000) -> FastJSONResponse:
    """Counter samples of one or more counter tracks in [start_ns, end_ns), per series, in columns.

    Above ~2 samples per pixel the samples are bucketed (power-of-two ``bucket_ns``): ``value`` is the bucket's
    max and ``value_min`` its min. ``before``/``after`` are the nearest samples outside the window.
    """
    if len(track_id) > db.settings.max_tracks_per_request:
        raise ApiError(400, "too_many_tracks", f"at most {db.settings.max_tracks_per_request} track_id values")
    start, end = _window(db, start_ns, end_ns)
    origin, cap = db.info.origin_ns, db.settings.max_counter_points
    out = []
    for tid in dict.fromkeys(track_id):
        track = _track(db, tid)
        params = {"origin": origin, "track": tid, "start": start, "end": end, "limit": cap + 1}
        count = db.one(COUNTER_COUNT_SQL, {k: params[k] for k in ("track", "start", "end")})[0]
        bucket_ns = None
        if count > SLICES_PER_PX * width_px:
            bucket_ns = 1 << max(0, int((end - start) / (SLICES_PER_PX * width_px)).bit_length() - 1)
            rows = db.rows(COUNTER_LOD_SQL, params | {"bucket": bucket_ns})
        else:
            rows = [(s, t, v, None) for s, t, v in db.rows(COUNTER_EXACT_SQL, params)]
        edges = {r[0]: r[1:] for r in db.rows(COUNTER_EDGES_SQL, {k: params[k] for k in
                                                                  ("origin", "track", "start", "end")})}
        by_series: dict[str, dict] = {}
        for s, t, v, vmin in rows:
            item = by_series.setdefault(s, {"series": s, "ts_ns": [], "value": []} |
                                        ({"value_min": []} if bucket_ns else {}))
            item["ts_ns"].append(t)
            item["value"].append(v)
            if bucket_ns:
                item["value_min"].append(vmin)
        for s, (b_ts, b_val, a_ts, a_val) in edges.items():
            item = by_series.setdefault(s, {"series": s, "ts_ns": [], "value": []} |
                                        ({"value_min": []} if bucket_ns else {}))
            item["before"] = None if b_ts is None else {"ts_ns": b_ts, "value": b_val}
            item["after"] = None if a_ts is None else {"ts_ns": a_ts, "value": a_val}
        out.append({"track_id": tid, "name": track.row["counter_name"], "lod": bucket_ns is not None,
                    "bucket_ns": bucket_ns, "truncated": len(rows) > cap, "series": list(by_series.values())})
    return {"origin_ns": ns_str(origin), "start_ns": ns_str(start), "end_ns": ns_str(end), "tracks": out}


@router.get("/flows")
@fast_json
def flows(run_id: RunId, db: RunDbDep, start_ns: StartNs = None, end_ns: EndNs = None,
          cat: Annotated[list[str], Query(description="flow categories (repeatable); all when absent")] = []
          ) -> FastJSONResponse:  # FastAPI copies query defaults
    """Flows with an end in, or spanning, [start_ns, end_ns), in columns (with each end's slice depth)."""
    start, end = _window(db, start_ns, end_ns)
    cap = db.settings.max_flows
    cols = db.columns(FLOWS_IN_RANGE_SQL, {"origin": db.info.origin_ns, "cats": list(cat), "start": start,
                                           "end": end, "limit": cap + 1})
    truncated = len(cols["flow_id"]) > cap
    if truncated:
        cols = {k: v[:cap] for k, v in cols.items()}
    return {"origin_ns": ns_str(db.info.origin_ns), "start_ns": ns_str(start), "end_ns": ns_str(end),
            "count": len(cols["flow_id"]), "truncated": truncated, **cols}


@router.get("/slices/{slice_id}")
@fast_json
def slice_detail(run_id: RunId, slice_id: Int64, db: RunDbDep) -> FastJSONResponse:
    """One slice: all args, the call stack and input shapes split on ``;\\r\\n``, its parent and children, its
    flows with their other ends (slice, track, ts) and, for a device task, its ``kernel_details`` row."""
    origin = db.info.origin_ns
    rows = db.dicts(SLICE_SQL, {"id": slice_id})
    if not rows:
        raise ApiError(404, "slice_not_found", f"no slice with id {slice_id}")
    s = rows[0]
    track = db.info.tracks.get(s["track_id"])
    args = _json_obj(s["args"])
    result = {
        "origin_ns": ns_str(origin),
        "slice_id": s["slice_id"], "track_id": s["track_id"], "rank": s["rank"], "name": s["name"],
        "cat": s["cat"], "ph": s["ph"], "depth": s["depth"], "parent_id": s["parent_id"],
        "ts_ns": s["ts_ns"] - origin, "dur_ns": s["dur_ns"],
        "start_abs_ns": ns_str(s["ts_ns"]), "end_abs_ns": ns_str(s["ts_ns"] + s["dur_ns"]),
        "track": _track_brief(track),
        "args": args,
        "call_stack": _split_list(args.get("Call stack")),
        "input_shapes": _split_list(args.get("Input Dims"), keep_empty=True),
        "input_types": _split_list(args.get("Input type"), keep_empty=True),
    }
    # parent
    parent = None
    if s["parent_id"] is not None:
        p = db.dicts(SLICE_SQL, {"id": s["parent_id"]})
        if p:
            parent = {"slice_id": p[0]["slice_id"], "name": p[0]["name"], "ts_ns": p[0]["ts_ns"] - origin,
                      "dur_ns": p[0]["dur_ns"], "depth": p[0]["depth"]}
    result["parent"] = parent
    # children: same track, starting inside this slice
    cap = db.settings.max_children
    kids = db.rows(CHILDREN_SQL, {"origin": origin, "track": s["track_id"], "start": s["ts_ns"],
                                  "end": s["ts_ns"] + s["dur_ns"], "id": s["slice_id"], "limit": cap})
    total = kids[0][4] if kids else 0
    result["children"] = {"items": [{"slice_id": k[0], "ts_ns": k[1], "dur_ns": k[2], "name": k[3]} for k in kids],
                          "count": total, "truncated": total > len(kids)}
    result["flows"] = _slice_flows(db, s["slice_id"])
    result["kernel"] = None
    if track is not None and track.kind in ("hardware", "communication"):
        k = db.dicts(KERNEL_SQL, {"rank": s["rank"], "ts": s["ts_ns"]})
        if k:
            result["kernel"] = {key: (ns_str(v) if key == "start_ns" else v) for key, v in k[0].items()}
    return result


def _slice_flows(db: RunDb, slice_id: int) -> list[dict]:
    origin = db.info.origin_ns
    rows = db.dicts(SLICE_FLOWS_SQL, {"id": slice_id, "origin": origin, "limit": db.settings.max_children})
    other_ids = [r["dst_slice_id"] if r["outgoing"] else r["src_slice_id"] for r in rows]
    brief = {}
    wanted = [i for i in other_ids if i is not None]
    if wanted:
        for b in db.dicts(SLICE_BRIEF_SQL, {"origin": origin, "ids": wanted}):
            brief[b["slice_id"]] = b
    out = []
    for r, other_id in zip(rows, other_ids):
        side = "dst" if r["outgoing"] else "src"
        other_track = db.info.tracks.get(r[f"{side}_track_id"])
        other = {"slice_id": other_id, "track_id": r[f"{side}_track_id"], "ts_ns": r[f"{side}_ts_ns"],
                 "track": _track_brief(other_track)}
        if other_id in brief:
            b = brief[other_id]
            other |= {"name": b["name"], "slice_ts_ns": b["ts_ns"], "dur_ns": b["dur_ns"], "depth": b["depth"]}
        out.append({"flow_id": r["flow_id"], "cat": r["cat"], "name": r["name"],
                    "direction": "out" if r["outgoing"] else "in",
                    "src_ts_ns": r["src_ts_ns"], "dst_ts_ns": r["dst_ts_ns"],
                    "src_slice_id": r["src_slice_id"], "dst_slice_id": r["dst_slice_id"],
                    "src_track_id": r["src_track_id"], "dst_track_id": r["dst_track_id"], "other": other})
    return out


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
    limit = min(limit, db.settings.max_search_hits)
    origin, needle = db.info.origin_ns, q.lower()
    if after is not None and before is not None:
        raise ApiError(400, "invalid_parameter", "give after or before, not both")
    if before is not None:
        ts, sid = _cursor(before)
        rows = db.columns(SEARCH_BEFORE_SQL, {"origin": origin, "q": needle, "ts": ts, "id": sid, "limit": limit + 1})
        more = len(rows["slice_id"]) > limit
        rows = {k: list(reversed(v[:limit])) for k, v in rows.items()}
        has_before, has_after = more, True
    else:
        ts, sid = _cursor(after) if after is not None else (-(2 ** 63), -(2 ** 63))
        rows = db.columns(SEARCH_AFTER_SQL, {"origin": origin, "q": needle, "ts": ts, "id": sid, "limit": limit + 1})
        more = len(rows["slice_id"]) > limit
        rows = {k: v[:limit] for k, v in rows.items()}
        has_before, has_after = after is not None, more
    n = len(rows["slice_id"])
    total = db.one(SEARCH_COUNT_SQL, {"q": needle})[0] if after is None and before is None else None

    def cursor(i: int) -> str:
        return f"{rows['ts_ns'][i] + origin}:{rows['slice_id'][i]}"

    return {"origin_ns": ns_str(origin), "q": q, "total": total, "count": n, "hits": rows,
            "truncated": has_after if before is None else has_before,
            "next_after": cursor(n - 1) if n and has_after else None,
            "prev_before": cursor(0) if n and has_before else None}


OffsetRanks = Annotated[list[Int64], Query(description="ranks drawn shifted (the timeline's per-rank offsets); "
                                                        "pairs with offset_ns")]
OffsetNs = Annotated[list[Int64], Query(description="each offset_rank's shift in ns (drawn time = raw + shift)")]


def _range_params(db: RunDb, start_ns, end_ns, track_id: list[int], offset_rank: list[int],
                  offset_ns: list[int]) -> dict:
    """Bound parameters of the range queries: the window in drawn time, the tracks, the per-rank shifts, and raw
    start bounds that let the zone maps prune."""
    start, end = _window(db, start_ns, end_ns)
    if len(offset_rank) != len(offset_ns):
        raise ApiError(400, "invalid_parameter", "give one offset_ns per offset_rank")
    shifts = dict(zip(offset_rank, offset_ns))
    tracks = list(dict.fromkeys(track_id))
    for tid in tracks:
        _track(db, tid)
    pool = [db.info.tracks[t] for t in tracks] if tracks else list(db.info.tracks.values())
    longest = max((t.max_dur_ns for t in pool), default=0)
    lo_shift, hi_shift = min([0, *shifts.values()]), max([0, *shifts.values()])
    return {"tracks": tracks, "start": start, "end": end, "offset_ranks": list(shifts),
            "offset_ns": list(shifts.values()),
            "lo": _int64(start - longest - hi_shift), "hi": _int64(end - lo_shift),
            "kids_hi": _int64(end - lo_shift + longest)}


def _int64(value: int) -> int:
    """A raw bound clamped to BIGINT (a shift or a long slice may push it past either end)."""
    return max(INT64_MIN, min(INT64_MAX, value))


@router.get("/range_stats")
@fast_json
def range_stats(run_id: RunId, db: RunDbDep, start_ns: StartNs = None, end_ns: EndNs = None,
                track_id: Annotated[list[Int64], Query(description="limit to these tracks (all when absent)")] = [],
                offset_rank: OffsetRanks = [], offset_ns: OffsetNs = []) -> FastJSONResponse:
    """Per slice name over the slices overlapping [start_ns, end_ns) (all tracks, or the given ones): count,
    total, avg, min and max wall duration and self time (wall minus the part its children cover, never below 0)
    in ns, longest total first; ``totals`` over all of them."""
    params = _range_params(db, start_ns, end_ns, track_id, offset_rank, offset_ns)
    cap = db.settings.max_range_stat_names
    rows = db.columns(RANGE_STATS_SQL, params | {"limit": cap + 1})
    all_self = rows.pop("all_self_ns")
    count, total_ns, names = db.one(RANGE_TOTALS_SQL, {k: v for k, v in params.items() if k != "kids_hi"})
    truncated = len(rows["name"]) > cap
    if truncated:
        rows = {k: v[:cap] for k, v in rows.items()}
    return {"origin_ns": ns_str(db.info.origin_ns), "start_ns": ns_str(params["start"]),
            "end_ns": ns_str(params["end"]), "track_ids": params["tracks"],
            "totals": {"count": count, "total_ns": int(total_ns), "names": names,
                       "self_ns": int(all_self[0]) if all_self else 0},
            "truncated": truncated, **rows}


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
    params = _range_params(db, start_ns, end_ns, track_id, offset_rank, offset_ns)
    cols = db.columns(RANGE_INSTANCES_SQL, params | {"name": name, "origin": db.info.origin_ns, "limit": limit,
                                                     "offset": offset})
    totals = cols.pop("total")
    total = int(totals[0]) if totals else 0
    return {"origin_ns": ns_str(db.info.origin_ns), "name": name, "total": total, "offset": offset,
            "limit": limit, "truncated": offset + len(cols["slice_id"]) < total, **cols}


@router.get("/align")
@fast_json
def align(run_id: RunId, db: RunDbDep, slice_id: Annotated[Int64, Query(description="the slice to align")],
          rank: Annotated[Int64, Query(description="the reference rank")]) -> FastJSONResponse:
    """The slice on ``rank`` that matches ``slice_id`` (same name, lanes of the same kind, same occurrence in
    time order; the nearest in time when ``rank`` has fewer), and ``shift_ns``: its start minus the slice's, the
    offset that draws the slice where the match is."""
    rows = db.dicts(SLICE_SQL, {"id": slice_id})
    if not rows:
        raise ApiError(404, "slice_not_found", f"no slice with id {slice_id}")
    s = rows[0]
    kind = db.info.tracks[s["track_id"]].kind
    k = db.one(ALIGN_OCCURRENCE_SQL, {"rank": s["rank"], "kind": kind, "name": s["name"], "ts": s["ts_ns"],
                                      "id": s["slice_id"]})[0]
    match = db.dicts(ALIGN_MATCH_SQL, {"rank": rank, "kind": kind, "name": s["name"], "k": k})
    how = "occurrence"
    if not match:
        match = db.dicts(ALIGN_NEAREST_SQL, {"rank": rank, "kind": kind, "name": s["name"], "ts": s["ts_ns"]})
        how = "nearest"
    if not match:
        raise ApiError(404, "no_match", f"rank {rank} has no {kind} slice named {s['name'][:200]!r}")
    m, origin = match[0], db.info.origin_ns
    return {"origin_ns": ns_str(origin), "slice_id": s["slice_id"], "rank": s["rank"], "occurrence": k, "how": how,
            "match": {"slice_id": m["slice_id"], "track_id": m["track_id"], "rank": m["rank"], "name": m["name"],
                      "ts_ns": m["ts_ns"] - origin, "dur_ns": m["dur_ns"], "depth": m["depth"]},
            "shift_ns": int(m["ts_ns"]) - int(s["ts_ns"])}


def _cursor(text: str) -> tuple[int, int]:
    try:
        ts, sid = text.split(":")
        pair = int(ts), int(sid)
    except ValueError:
        pair = None
    if pair is None or not all(INT64_MIN <= v <= INT64_MAX for v in pair):
        raise ApiError(400, "invalid_cursor", f"bad cursor {text[:100]!r}: expected '<ts_ns>:<slice_id>' "
                                              "(64-bit integers)")
    return pair


def _json_obj(raw) -> FastJSONResponse:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {"_raw": str(raw)}
    return value if isinstance(value, dict) else {"_value": value}


def _split_list(value, *, keep_empty: bool = False) -> list[str]:
    """torch_npu joins list args with ``;\\r\\n`` (FORMATS.md §3.4)."""
    if value is None:
        return []
    parts = str(value).split(";\r\n")
    return parts if keep_empty else [p for p in parts if p.strip()]


def _track_brief(track) -> dict | None:
    if track is None:
        return None
    r = track.row
    return {"track_id": r["track_id"], "rank": r["rank"], "kind": r["kind"], "process_name": r["process_name"],
            "thread_name": r["thread_name"], "pid": r["pid"], "tid": r["tid"]}
