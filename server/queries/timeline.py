"""Timeline viewport queries: the tracks, their slices in a window (exact or from the level of detail), counter
samples and flows. The rule that picks between exact slices and the level of detail lives here, once.

Contract: every function takes the request's :class:`server.api.RunDb` (``db``: its cached ``info``, its
``settings`` row caps and its query methods), absolute epoch-ns windows, and returns JSON-ready dicts whose times
are relative to the run's ``origin_ns`` (sent as a decimal string). A client mistake raises
:class:`server.queries.QueryError` (400) or :class:`server.queries.NotFound` (404). Every list is capped and says
whether it was ``truncated``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ascendscope.server.queries import NotFound, QueryError, ns_str, shown_name, sources, track_index
from ascendscope.server.queries.timeline_sql import (
    COUNTER_COUNT_SQL,
    COUNTER_EDGES_SQL,
    COUNTER_EXACT_SQL,
    COUNTER_LOD_SQL,
    COUNTER_SERIES_SQL,
    FLOW_CATEGORIES_SQL,
    FLOWS_IN_RANGE_SQL,
    SLICES_EXACT_BATCH_SQL,
    SLICES_EXACT_SQL,
    SLICES_LOD_COUNT_SQL,
    SLICES_LOD_SQL,
)

SLICES_PER_PX = 2  # more slices (or counter samples) than this per pixel of the window: answer from the LOD
DENSITY_MARGIN = 8  # an extent-based estimate this far from the threshold decides without counting
LOD_COARSER_OK = 4  # a level-0 bucket may span up to this many target widths (2 px) instead of exact rows


def max_rows(width_px: int) -> int:
    """The most rows a window drawn on ``width_px`` pixels is answered with exactly; more go to the LOD."""
    return SLICES_PER_PX * width_px


def lod_target_ns(span_ns: float, width_px: int) -> float:
    """The bucket width that puts ``SLICES_PER_PX`` buckets on each pixel of a ``span_ns`` window."""
    return span_ns / max_rows(width_px)


def viewport_bucket_ns(span_ns: float, width_px: int, slices_per_px: int = SLICES_PER_PX) -> int:
    """The smallest power of two at least the LOD target (at least 1): the bucket the client quantises a viewport
    to (``geometry.js`` ``quantize``, given ``slices_per_px`` by ``/timeline/tracks``), so its windows and widths
    ask for whole buckets."""
    target = span_ns / (slices_per_px * width_px)
    bucket = 1
    while bucket < target:
        bucket <<= 1
    return bucket


def lod_choice(levels: list[tuple[int, int]], target_ns: float) -> tuple[int, int] | None:
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


def window(db, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    """[start, end) in absolute ns, the run's extent filling a missing bound; an empty window is a 400."""
    start = db.info.start_ns if start_ns is None else start_ns
    end = db.info.end_ns if end_ns is None else end_ns
    if end <= start:
        end = start + 1 if start_ns is None or end_ns is None else end
    if end <= start:
        raise QueryError("invalid_range", f"end_ns ({end}) must be greater than start_ns ({start})")
    return start, end


def track(db, track_id: int):
    """The cached :class:`server.db.Track`, or 404 ``track_not_found``."""
    found = db.info.tracks.get(track_id)
    if found is None:
        raise NotFound("track_not_found", f"no track with id {track_id}")
    return found


def _rel(value: int | None, origin: int) -> int | None:
    return None if value is None else int(value) - origin


def tracks(db) -> dict:
    """Every track with its rank, kind, names, sort order and extent (relative to ``origin_ns``); counter tracks
    list their series. ``slices_per_px`` is the LOD rule the client quantises its requests by."""
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
        "loaded_ranks": db.info.loaded_ranks,  # a sharded run: the ranks loaded (None: one file)
        # ranks still ingesting, read from their overview: every lane's busy time, coarse (the level of detail at
        # every zoom, no depth), and none of their slices yet: nothing is loaded exactly ([loaded_start_ns,
        # loaded_end_ns) is empty), everything is still coming until end_ns
        "partial_ranks": {str(r): {"overview": True, "loaded_start_ns": _rel(p["start_ns"], origin),
                                   "loaded_end_ns": _rel(p["start_ns"], origin), "end_ns": _rel(p["end_ns"], origin)}
                          for r, p in sorted(db.info.partial.items())},
        "tracks": out,
        "flow_categories": [{"cat": c, "count": n} for c, n in db.rows(FLOW_CATEGORIES_SQL)],
        # per rank: each shard of a sharded run has its own widths
        "lod_levels": {str(r): [{"level": lv, "bucket_ns": b} for lv, b in levels]
                       for r, levels in sorted(db.info.lod_levels.items())},
        "slices_per_px": SLICES_PER_PX,
        # ranks without a timeline, and the file or table that would have given them one
        "empty_sources": sources.explain(db, "timeline")["trace"],
    }


def slices(db, track_ids: list[int], start_ns: int | None, end_ns: int | None, width_px: int) -> dict:
    """Slices of the tracks overlapping the window, in columns, names interned in ``names`` (see
    :func:`viewport_slices` for exact versus LOD rows)."""
    start, end = window(db, start_ns, end_ns)
    wanted = {tid: track(db, tid) for tid in dict.fromkeys(track_ids)}
    answers = viewport_answers(db, wanted, start, end, width_px)
    out = [{"track_id": tid, **answers[tid][0], **answers[tid][1], "count": len(answers[tid][1]["slice_id"])}
           for tid in wanted]
    names = intern_names([answers[tid][2] for tid in wanted], out)
    return {"origin_ns": ns_str(db.info.origin_ns), "start_ns": ns_str(start), "end_ns": ns_str(end),
            "width_px": width_px, "names": names, "tracks": out}


def viewport_answers(db, by_id: dict, start: int, end: int, width_px: int) -> dict[int, tuple[dict, dict, tuple]]:
    """track_id → (flags, columns but name, (name codes, distinct names)) for the window; computed per track once
    for concurrent requests and cached, so users (and views: Compare shares it) who see the same tracks at the
    same window share the work."""
    return db.shared("slices", (start, end, width_px), list(by_id),
                     lambda ids: factorized(viewport_slices(db, [by_id[i] for i in ids], start, end, width_px)))


def factorized(answers: dict[int, tuple]) -> dict[int, tuple[dict, dict, tuple]]:
    """(flags, columns) → (flags, columns but name, (name codes, distinct names)): the costly part of interning
    names is done once per answer (then cached), so a response only merges the short lists of distinct names.
    An answer from memory (``track_index``) comes in the second shape already and passes as it is."""
    out = {}
    for tid, answer in answers.items():
        if len(answer) == 3:
            out[tid] = answer
            continue
        flags, cols = answer
        codes, uniques = pd.factorize(np.asarray(cols["name"], dtype=object), use_na_sentinel=False)
        out[tid] = (flags, {k: v for k, v in cols.items() if k != "name"},
                    (codes, [None if isinstance(u, float) else u for u in uniques.tolist()]))
    return out


def intern_names(parts: list[tuple[np.ndarray, list]], entries: list[dict]) -> list[str]:
    """One names table for the response from each entry's (codes, distinct names); each entry gets ``name_id``
    (indexes into it). A name longer than ``MAX_NAME_CHARS`` is answered cut (``shown_name``)."""
    index: dict = {}
    for entry, (codes, uniques) in zip(entries, parts):
        remap = np.fromiter((index.setdefault(u, len(index)) for u in uniques), dtype=np.int64, count=len(uniques))
        entry["name_id"] = remap[codes] if len(codes) else codes
    return [shown_name(name) if isinstance(name, str) else name for name in index]


SHARD_NAMES_SQL = "SELECT database_name FROM duckdb_databases() WHERE NOT internal"
VIEWPORT_TABLES = ("slices", "slice_lod", "counters", "flows")


def tables(db, rank: int) -> dict[str, str]:
    """The tables a viewport query of one rank's tracks reads: that rank's shard when the run is sharded and
    several shards are attached (``layout.connect`` names a shard ``r<its first rank>``; at 8 ranks a query on one
    shard costs a third of one on the union of all), else the run's views. Known from the connection's catalog,
    looked up once per connection."""
    shards = getattr(db.info, "viewport_shards", None)
    if shards is None:
        shards = set()
        if db.info.loaded_ranks is not None and len(db.info.loaded_ranks) > 1:
            shards = {name for (name,) in db.rows(SHARD_NAMES_SQL)}
        db.info.viewport_shards = shards
    shard = db.info.shard_aliases.get(int(rank)) if getattr(db.info, "shard_aliases", None) else None
    if shard in shards:
        return {t: f'{shard}."{t}"' for t in VIEWPORT_TABLES}
    return {t: t for t in VIEWPORT_TABLES}


def viewport_slices(db, tracks: list, start: int, end: int, width_px: int) -> dict[int, tuple[dict, dict]]:
    """Per rank (one shard each; see :func:`tables`), the answers of :func:`rank_viewport_slices`."""
    by_rank: dict[int, list] = {}
    for t in tracks:
        by_rank.setdefault(t.rank, []).append(t)
    answers: dict[int, tuple[dict, dict]] = {}
    for rank, group in by_rank.items():
        answers.update(rank_viewport_slices(db, group, start, end, width_px, tables(db, rank)))
    return answers


def rank_viewport_slices(db, tracks: list, start: int, end: int, width_px: int,
                         names: dict[str, str]) -> dict[int, tuple]:
    """track_id → (flags, columns). A track with more than ``max_rows(width_px)`` slices in the window is dense:
    answered from ``slice_lod`` at :func:`lod_choice` of :func:`lod_target_ns` (``lod: true``, one row per
    (depth, bucket) drawn over the extent of the bucket's slices, with ``slice_count`` and the ``slice_id``/``name``
    of its longest slice), all dense tracks in one scan; sparse tracks are answered exactly (batched). A track
    kept in memory (``track_index.usable``, ``usable_lod``) is answered from there, the same rows, as (flags,
    columns but name, (name codes, distinct names))."""
    origin, cap = db.info.origin_ns, db.settings.max_slices_per_track
    threshold = max_rows(width_px)
    target = lod_target_ns(end - start, width_px)
    # the level is chosen per rank: the shards of a sharded run each have their own widths
    lods = {t.track_id: lod_choice(db.info.levels(t.rank), target) for t in tracks}
    # dense or sparse: from the track's extent when that is clear, else by counting (at most threshold + 1 rows)
    dense, sparse, unsure = [], [], []
    for t in tracks:
        if t.rank in db.info.partial and db.info.levels(t.rank):  # an overview: its busy time at every zoom
            lods[t.track_id] = lods[t.track_id] or db.info.levels(t.rank)[0]
            dense.append(t)
            continue
        guess = _estimate_rows(t, start, end)
        if lods[t.track_id] is None or guess * DENSITY_MARGIN < threshold:
            sparse.append(t)
        elif guess > threshold * DENSITY_MARGIN:
            dense.append(t)
        else:
            unsure.append(t)
    if unsure:
        counts = _lod_counts(db, unsure, start, end, names)
        for t in unsure:
            (dense if counts.get(t.track_id, 0) > threshold else sparse).append(t)
    answers: dict[int, tuple] = {}
    for t in dense:
        level, bucket_ns = lods[t.track_id]
        if track_index.usable_lod(db, t, level, names):
            answers[t.track_id] = track_index.lod(db, t.track_id, level, bucket_ns, start, end, names)
    for t in sparse:
        if track_index.usable(db, t, names):
            answers[t.track_id] = track_index.exact(db, t.track_id, start, end, names)
    dense = [t for t in dense if t.track_id not in answers]
    sparse = [t for t in sparse if t.track_id not in answers]
    by_level: dict[tuple[int, int], list] = {}
    for t in dense:
        by_level.setdefault(lods[t.track_id], []).append(t)
    for (level, bucket_ns), group in sorted(by_level.items()):  # all dense tracks of a level in one scan
        ids = [t.track_id for t in group]
        lo = start - max(t.max_dur_ns for t in group)
        cols = db.arrays(SLICES_LOD_SQL.format(**names), {
            "origin": origin, "level": level, "tracks": ids, "track_min": min(ids), "track_max": max(ids),
            "bucket_lo": lo // bucket_ns, "bucket_hi": (end - 1) // bucket_ns, "start": start, "end": end,
            "limit": cap + 1})
        answers.update(_split(cols, ids, cap, {"lod": True, "bucket_ns": bucket_ns, "level": level}))
    # sparse tracks whose longest slice is shorter than the window share one scan; the others go one by one
    batch = [t for t in sparse if t.max_dur_ns <= end - start]
    if len(batch) > 1:
        ids = [t.track_id for t in batch]
        los = [start - t.max_dur_ns for t in batch]
        cols = db.arrays(SLICES_EXACT_BATCH_SQL.format(**names), {
            "origin": origin, "tracks": ids, "los": los, "track_min": min(ids), "track_max": max(ids),
            "lo_min": min(los), "start": start, "end": end, "limit": cap + 1})
        answers.update(_split(cols, ids, cap, {"lod": False, "bucket_ns": None}))
    for t in sparse:
        if t.track_id in answers:
            continue
        bounds = {"track": t.track_id, "lo": start - t.max_dur_ns, "end": end, "start": start}
        cols = db.arrays(SLICES_EXACT_SQL.format(**names), bounds | {"origin": origin, "limit": cap + 1})
        answers[t.track_id] = ({"lod": False, "bucket_ns": None, "truncated": len(cols["slice_id"]) > cap},
                               {k: v[:cap] for k, v in cols.items()})
    return answers


def _lod_counts(db, tracks: list, start: int, end: int, names: dict[str, str]) -> dict[int, int]:
    """track_id → slices starting in the window, from the coarsest LOD level of its rank with at least 16
    buckets in it (one scan per level chosen)."""
    by_level: dict[tuple[int, int], list[int]] = {}
    for t in tracks:
        levels = db.info.levels(t.rank)
        level, bucket_ns = levels[0]
        for lv, b in levels:
            if b * 16 <= end - start:
                level, bucket_ns = lv, b
        by_level.setdefault((level, bucket_ns), []).append(t.track_id)
    out: dict[int, int] = {}
    for (level, bucket_ns), ids in sorted(by_level.items()):
        kept = [tid for tid in ids if track_index.usable_lod(db, db.info.tracks[tid], level, names)]
        for tid in kept:
            out[tid] = track_index.lod_count(db, tid, level, start // bucket_ns, (end - 1) // bucket_ns, names)
        ids = [tid for tid in ids if tid not in out]
        if not ids:
            continue
        rows = db.rows(SLICES_LOD_COUNT_SQL.format(**names), {"level": level, "tracks": ids, "track_min": min(ids),
                                              "track_max": max(ids), "bucket_lo": start // bucket_ns,
                                              "bucket_hi": (end - 1) // bucket_ns})
        out.update({int(tid): int(n) for tid, n in rows})
    return out


def _split(cols: dict, ids: list[int], cap: int, flags: dict) -> dict[int, tuple[dict, dict]]:
    """Rows of several tracks (ordered by track_id, at most ``cap`` + 1 each) → per track (flags, columns), each
    capped at ``cap`` and marked truncated when it had more."""
    by_track = cols.pop("track_id")
    out = {}
    for tid in ids:
        a, b = np.searchsorted(by_track, tid, "left"), np.searchsorted(by_track, tid, "right")
        out[tid] = (flags | {"truncated": bool(b - a > cap)}, {k: v[a:min(b, a + cap)] for k, v in cols.items()})
    return out


def _estimate_rows(t, start: int, end: int) -> float:
    """Slices of the track expected in the window if they were spread evenly over its extent."""
    lo, hi = t.row.get("min_ts_ns"), t.row.get("max_end_ns")
    if not t.slice_count or lo is None or hi is None:
        return 0.0
    overlap = min(end, hi) - max(start, lo)
    return t.slice_count * max(0, overlap) / max(1, hi - lo)


def counters(db, track_ids: list[int], start_ns: int | None, end_ns: int | None, width_px: int) -> dict:
    """Counter samples of the counter tracks in the window, per series, in columns. Above ``max_rows(width_px)``
    samples they are bucketed (the power of two just below :func:`lod_target_ns`): ``value`` is the bucket's max
    and ``value_min`` its min. ``before``/``after`` are the nearest samples outside the window. Each track's answer
    is computed once for concurrent requests and cached, as the slices are (:func:`viewport_answers`)."""
    start, end = window(db, start_ns, end_ns)
    wanted = {tid: track(db, tid) for tid in dict.fromkeys(track_ids)}
    answers = db.shared("counters", (start, end, width_px), list(wanted),
                        lambda ids: {tid: counter_track(db, wanted[tid], start, end, width_px) for tid in ids})
    return {"origin_ns": ns_str(db.info.origin_ns), "start_ns": ns_str(start), "end_ns": ns_str(end),
            "tracks": [answers[tid] for tid in wanted]}


def counter_track(db, counter, start: int, end: int, width_px: int) -> dict:
    """One counter track's answer for the window (see :func:`counters`)."""
    origin, cap, tid = db.info.origin_ns, db.settings.max_counter_points, counter.track_id
    names = tables(db, counter.rank)
    params = {"origin": origin, "track": tid, "start": start, "end": end, "limit": cap + 1}
    # from memory when the track is kept there (track_index: the same rows), else three queries
    ix = track_index.counter_samples(db, tid, names) if track_index.usable_counter(db, counter, names) else None
    if ix is not None:
        count = track_index.counter_count(ix, start, end)
    else:
        count = db.one(COUNTER_COUNT_SQL.format(**names), {k: params[k] for k in ("track", "start", "end")})[0]
    bucket_ns = None
    if count > max_rows(width_px):
        bucket_ns = 1 << max(0, int(lod_target_ns(end - start, width_px)).bit_length() - 1)
    if ix is not None:
        cols = track_index.counter_rows(ix, start, end, origin, cap + 1, bucket_ns)
        edges = track_index.counter_edges(ix, start, end, origin)
    else:
        if bucket_ns is not None:
            cols = db.arrays(COUNTER_LOD_SQL.format(**names), params | {"bucket": bucket_ns})
        else:
            cols = db.arrays(COUNTER_EXACT_SQL.format(**names), params)
        edges = {r[0]: r[1:] for r in db.rows(COUNTER_EDGES_SQL.format(**names), {k: params[k] for k in
                                                                  ("origin", "track", "start", "end")})}
    # rows come ordered by series: each series is a slice of the columns (numpy, so they leave as typed arrays)
    names = np.asarray(cols["series"], dtype=object)
    cuts = [0, *(np.flatnonzero(names[1:] != names[:-1]) + 1).tolist(), len(names)]
    value_keys = ("value", "value_min") if bucket_ns else ("value",)
    values = {k: np.asarray(cols[k], dtype=np.float64) for k in value_keys}  # NULL → NaN → null in JSON
    ts = np.asarray(cols["ts_ns"], dtype=np.int64)
    by_series: dict[str, dict] = {}
    for a, b in zip(cuts[:-1], cuts[1:]):
        if b > a:
            by_series[names[a]] = {"series": names[a], "ts_ns": ts[a:b], **{k: v[a:b] for k, v in values.items()}}
    empty = {"ts_ns": ts[:0], **{k: v[:0] for k, v in values.items()}}
    for s, (b_ts, b_val, a_ts, a_val) in edges.items():
        item = by_series.setdefault(s, {"series": s, **empty})
        item["before"] = None if b_ts is None else {"ts_ns": b_ts, "value": b_val}
        item["after"] = None if a_ts is None else {"ts_ns": a_ts, "value": a_val}
    rows = names
    return {"track_id": tid, "name": counter.row["counter_name"], "lod": bucket_ns is not None,
            "bucket_ns": bucket_ns, "truncated": len(rows) > cap, "series": list(by_series.values())}


def flows(db, start_ns: int | None, end_ns: int | None, cats: list[str]) -> dict:
    """Flows with an end in, or spanning, the window, in columns (with each end's slice depth); computed once for
    concurrent requests of the same window and categories, and cached."""
    start, end = window(db, start_ns, end_ns)
    cap = db.settings.max_flows
    key = tuple(sorted(set(cats)))
    answer = db.shared("flows", (start, end), [key], lambda keys: {key: _flows(db, start, end, list(key), cap)})[key]
    return {"origin_ns": ns_str(db.info.origin_ns), "start_ns": ns_str(start), "end_ns": ns_str(end), **answer}


def _flows(db, start: int, end: int, cats: list[str], cap: int) -> dict:
    cols = track_index.flows_answer(db, start, end, cats, cap, tables)  # from memory, when all it reads is kept
    if cols is None:
        cols = db.arrays(FLOWS_IN_RANGE_SQL, {"origin": db.info.origin_ns, "cats": cats, "start": start,
                                              "end": end, "limit": cap + 1})
    truncated = len(cols["flow_id"]) > cap
    if truncated:
        cols = {k: v[:cap] for k, v in cols.items()}
    return {"count": len(cols["flow_id"]), "truncated": truncated, **cols}
