"""Timeline detail queries: one slice's details, name search, range statistics (with self time, per-name
instances and per-rank offsets) and the match of a slice on another rank (to align ranks whose clocks differ).

Same contract as :mod:`server.queries.timeline`: ``db`` is the request's :class:`server.api.RunDb`, windows are
absolute epoch ns, answers are JSON-ready with times relative to ``origin_ns``, a client mistake raises
:class:`server.queries.QueryError` (400) or :class:`server.queries.NotFound` (404), and every list is capped.
"""

from __future__ import annotations

import json

from ascendscope.ingest import jsonfile
from ascendscope.ingest.trace import MAX_ARGS_DEPTH
from ascendscope.server.queries import NotFound, QueryError, cut_prefix, ns_str, shown_name
from ascendscope.server.queries.timeline import track, window
from ascendscope.server.queries.timeline_sql import (
    ALIGN_MATCH_SQL,
    ALIGN_NEAREST_SQL,
    ALIGN_OCCURRENCE_SQL,
    CHILDREN_SQL,
    KERNEL_SQL,
    RANGE_INSTANCES_CUT_SQL,
    RANGE_INSTANCES_SQL,
    RANGE_STATS_SQL,
    RANGE_TOTALS_SQL,
    SEARCH_AFTER_SQL,
    SEARCH_BEFORE_SQL,
    SEARCH_COUNT_SQL,
    SLICE_BRIEF_SQL,
    SLICE_FLOWS_SQL,
    SLICE_NAME_SQL,
    SLICE_SQL,
)

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def slice_detail(db, slice_id: int) -> dict:
    """One slice: all args, the call stack and input shapes split on ``;\\r\\n``, its parent and children, its
    flows with their other ends (slice, track, ts) and, for a device task, its ``kernel_details`` row."""
    origin = db.info.origin_ns
    rows = db.dicts(SLICE_SQL, {"id": slice_id})
    if not rows:
        raise NotFound("slice_not_found", f"no slice with id {slice_id}")
    s = rows[0]
    lane = db.info.tracks.get(s["track_id"])
    args = _json_obj(s["args"])
    result = {
        "origin_ns": ns_str(origin),
        "slice_id": s["slice_id"], "track_id": s["track_id"], "rank": s["rank"], "name": shown_name(s["name"]),
        "name_chars": len(s["name"] or ""), "name_truncated": shown_name(s["name"]) != s["name"],
        "cat": s["cat"], "ph": s["ph"], "depth": s["depth"], "parent_id": s["parent_id"],
        "ts_ns": s["ts_ns"] - origin, "dur_ns": s["dur_ns"],
        "start_abs_ns": ns_str(s["ts_ns"]), "end_abs_ns": ns_str(s["ts_ns"] + s["dur_ns"]),
        "track": _track_brief(lane),
        "args": args,
        "call_stack": _split_list(args.get("Call stack")),
        "input_shapes": _split_list(args.get("Input Dims"), keep_empty=True),
        "input_types": _split_list(args.get("Input type"), keep_empty=True),
    }
    parent = None
    if s["parent_id"] is not None:
        p = db.dicts(SLICE_SQL, {"id": s["parent_id"]})
        if p:
            parent = {"slice_id": p[0]["slice_id"], "name": shown_name(p[0]["name"]), "ts_ns": p[0]["ts_ns"] - origin,
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
    if lane is not None and lane.kind in ("hardware", "communication"):
        k = db.dicts(KERNEL_SQL, {"rank": s["rank"], "ts": s["ts_ns"]})
        if k:
            result["kernel"] = {key: (ns_str(v) if key == "start_ns" else v) for key, v in k[0].items()}
    return result


def slice_name(db, slice_id: int) -> str:
    """A slice's whole name, however long (a view's answers cut it at ``MAX_NAME_CHARS``)."""
    rows = db.rows(SLICE_NAME_SQL, {"id": slice_id})
    if not rows:
        raise NotFound("slice_not_found", f"no slice with id {slice_id}")
    return rows[0][0] or ""


def _slice_flows(db, slice_id: int) -> list[dict]:
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


def search(db, q: str, limit: int, after: str | None, before: str | None) -> dict:
    """Slices whose name contains ``q`` (case-insensitive), across ranks, ordered by (ts, slice_id), one page at a
    time. Cursors are ``"<absolute ts_ns>:<slice_id>"``; the first page (no cursor) also says ``total``."""
    limit = min(limit, db.settings.max_search_hits)
    origin, needle = db.info.origin_ns, q.lower()
    if after is not None and before is not None:
        raise QueryError("invalid_parameter", "give after or before, not both")
    if before is not None:
        ts, sid = _cursor(before)
        rows = db.columns(SEARCH_BEFORE_SQL, {"origin": origin, "q": needle, "ts": ts, "id": sid, "limit": limit + 1})
        more = len(rows["slice_id"]) > limit
        rows = {k: list(reversed(v[:limit])) for k, v in rows.items()}
        has_before, has_after = more, True
    else:
        ts, sid = _cursor(after) if after is not None else (INT64_MIN, INT64_MIN)
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


def _range_params(db, start_ns, end_ns, track_ids: list[int], offset_rank: list[int],
                  offset_ns: list[int]) -> dict:
    """Bound parameters of the range queries: the window in drawn time, the tracks, the per-rank shifts, and raw
    start bounds that let the zone maps prune."""
    start, end = window(db, start_ns, end_ns)
    if len(offset_rank) != len(offset_ns):
        raise QueryError("invalid_parameter", "give one offset_ns per offset_rank")
    shifts = dict(zip(offset_rank, offset_ns))
    tracks = list(dict.fromkeys(track_ids))
    for tid in tracks:
        track(db, tid)
    pool = [db.info.tracks[t] for t in tracks] if tracks else list(db.info.tracks.values())
    longest = max((t.max_dur_ns for t in pool), default=0)
    lo_shift, hi_shift = min([0, *shifts.values()]), max([0, *shifts.values()])
    ends = max((int(t.row.get("max_end_ns") or 0) for t in pool), default=0)
    if ends + hi_shift > INT64_MAX:  # the SQL adds the shift to a slice's start, then its duration
        raise QueryError("invalid_parameter", f"offset_ns: a shift of {hi_shift} ns moves this run's slices past "
                                              f"the int64 range of ns")
    return {"tracks": tracks, "start": start, "end": end, "offset_ranks": list(shifts),
            "offset_ns": list(shifts.values()),
            "lo": _int64(start - longest - hi_shift), "hi": _int64(end - lo_shift),
            "kids_hi": _int64(end - lo_shift + longest)}


def _int64(value: int) -> int:
    """A raw bound clamped to BIGINT (a shift or a long slice may push it past either end)."""
    return max(INT64_MIN, min(INT64_MAX, value))


def range_stats(db, start_ns, end_ns, track_ids: list[int], offset_rank: list[int], offset_ns: list[int]) -> dict:
    """Per slice name over the slices overlapping the window (all tracks, or the given ones): count, total, avg,
    min and max wall duration and self time (wall minus the part its children cover, never below 0) in ns, longest
    total first; ``totals`` over all of them."""
    params = _range_params(db, start_ns, end_ns, track_ids, offset_rank, offset_ns)
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


def range_instances(db, name: str, start_ns, end_ns, track_ids: list[int], offset_rank: list[int],
                    offset_ns: list[int], offset: int, limit: int) -> dict:
    """The slices named ``name`` among those :func:`range_stats` counts, in time order: ``ts_ns`` (drawn, relative
    to ``origin_ns``), duration, depth and self time; ``total`` of them, one page at a time. A name as range_stats
    answered it cut stands for every longer name that starts with its kept part."""
    params = _range_params(db, start_ns, end_ns, track_ids, offset_rank, offset_ns)
    prefix = cut_prefix(name)
    cols = db.columns(RANGE_INSTANCES_SQL if prefix is None else RANGE_INSTANCES_CUT_SQL,
                      params | {"name": name if prefix is None else prefix, "origin": db.info.origin_ns,
                                "limit": limit, "offset": offset})
    totals = cols.pop("total")
    total = int(totals[0]) if totals else 0
    return {"origin_ns": ns_str(db.info.origin_ns), "name": name, "total": total, "offset": offset,
            "limit": limit, "truncated": offset + len(cols["slice_id"]) < total, **cols}


def align(db, slice_id: int, rank: int) -> dict:
    """The slice on ``rank`` that matches ``slice_id`` (same name, lanes of the same kind, same occurrence in
    time order; the nearest in time when ``rank`` has fewer), and ``shift_ns``: its start minus the slice's."""
    rows = db.dicts(SLICE_SQL, {"id": slice_id})
    if not rows:
        raise NotFound("slice_not_found", f"no slice with id {slice_id}")
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
        raise NotFound("no_match", f"rank {rank} has no {kind} slice named {s['name'][:200]!r}")
    m, origin = match[0], db.info.origin_ns
    return {"origin_ns": ns_str(origin), "slice_id": s["slice_id"], "rank": s["rank"], "occurrence": k, "how": how,
            "match": {"slice_id": m["slice_id"], "track_id": m["track_id"], "rank": m["rank"],
                      "name": shown_name(m["name"]), "ts_ns": m["ts_ns"] - origin, "dur_ns": m["dur_ns"],
                      "depth": m["depth"]},
            "shift_ns": int(m["ts_ns"]) - int(s["ts_ns"])}


def _cursor(text: str) -> tuple[int, int]:
    try:
        ts, sid = text.split(":")
        pair = int(ts), int(sid)
    except ValueError:
        pair = None
    if pair is None or not all(INT64_MIN <= v <= INT64_MAX for v in pair):
        raise QueryError("invalid_cursor", f"bad cursor {text[:100]!r}: expected '<ts_ns>:<slice_id>' "
                                           "(64-bit integers)")
    return pair


def _json_obj(raw) -> dict:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    # a run ingested before args depth was bounded may hold some: parsing (or encoding) them would recurse too deep
    if isinstance(raw, str) and raw.count("{") + raw.count("[") > MAX_ARGS_DEPTH and \
            jsonfile.max_depth(raw) > MAX_ARGS_DEPTH:
        return {"args": f"not shown: nested deeper than {MAX_ARGS_DEPTH} levels"}
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


def _track_brief(lane) -> dict | None:
    if lane is None:
        return None
    r = lane.row
    return {"track_id": r["track_id"], "rank": r["rank"], "kind": r["kind"], "process_name": r["process_name"],
            "thread_name": r["thread_name"], "pid": r["pid"], "tid": r["tid"]}
