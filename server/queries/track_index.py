"""Whole timeline tracks kept in memory, so a viewport on them is answered without a database query.

A viewport query on the ts-ordered ``slices`` table scans every track's rows in the window (and, for a track with
one long slice, everything since that slice began) to find one track's few: 4–8 ms of DuckDB per query on a 1 M
slice rank, most of a request's cost under many users (docs/benchmarks.md, issue #18). A track shown once is
therefore read whole, once per server process (its slices in ``slice_id`` order; a level of its level of detail in
``(depth, bucket)`` order), and kept in the query pool's ``index`` store, an LRU bounded by ``track_cache_mb``;
later windows on it are a mask over numpy arrays. A track too large for a quarter of that budget, a database of
unknown version (nothing may be cached) or a budget of 0 keep the SQL path of ``server.queries.timeline``.

Every answer here equals the SQL one row for row (``tests/server/test_track_index.py`` compares them): the same
overlap test, order, columns, cap and flags, with names interned per answer in order of first appearance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# a key column (a slice's name, a counter's series) comes as codes into the track's distinct values (sorted,
# NULL last): Python never builds a string per row
KEYS_SQL = "SELECT DISTINCT {key} FROM {table} WHERE {where} ORDER BY {key} NULLS LAST"
ROWS_SQL = """
WITH s AS (SELECT {columns}, {key} FROM {table} WHERE {where}),
n AS (SELECT {key}, row_number() OVER (ORDER BY {key} NULLS LAST) - 1 AS code FROM (SELECT DISTINCT {key} FROM s))
SELECT {columns}, n.code FROM s JOIN n ON n.{key} IS NOT DISTINCT FROM s.{key} ORDER BY {order}
"""
SLICE_COLUMNS = "ts_ns, dur_ns, depth, slice_id"
LOD_COLUMNS = "bucket, min_ts_ns, max_end_ns, depth, slice_id, slice_count"
BYTES_PER_SLICE = 48  # the arrays of one slice (about 40 bytes) and a margin for its share of the names


def _admits(db, kind: str, params: tuple, track_id: int, size: int) -> bool:
    if getattr(db.pool, "index_bytes", 0) <= 0:
        return False
    return db.index_admits(kind, params, track_id, size)  # (never when the database's version is unknown)


def usable(db, t) -> bool:
    """Whether the track ``t`` is answered from memory: caching is possible (the database's version is known),
    and the track is kept already or the store admits it (``QueryPool.index_admits``: it has room, or what it
    would push out has not been used for a while, so tracks read in turn never push each other out)."""
    return _admits(db, "track_slices", (), t.track_id, t.slice_count * BYTES_PER_SLICE)


def usable_lod(db, t, level: int) -> bool:
    """The same for one level of the track's level of detail (sized as if it held every slice: at most)."""
    return _admits(db, "track_lod", (level,), t.track_id, t.slice_count * BYTES_PER_SLICE)


def _read(db, table: str, where: str, params: dict, columns: str, order: str,
          key: str = "name") -> tuple[dict, np.ndarray, list]:
    """(columns, codes of ``key``, its distinct values) of the rows of ``table`` matching ``where``."""
    names = [r[0] for r in db.rows(KEYS_SQL.format(key=key, table=table, where=where), params)]
    cols = db.arrays(ROWS_SQL.format(key=key, table=table, where=where, columns=columns, order=order), params)
    codes = np.asarray(cols.pop("code"), dtype=np.int32)
    return cols, codes, names


def _load_slices(db, track_id: int, tables: dict[str, str]) -> dict:
    cols, codes, names = _read(db, tables["slices"], "track_id = $track", {"track": track_id}, SLICE_COLUMNS,
                               "slice_id")
    ts = np.asarray(cols["ts_ns"], dtype=np.int64)
    dur = np.asarray(cols["dur_ns"], dtype=np.int64)
    return {"ts": ts, "end": ts + dur, "dur": dur, "depth": np.asarray(cols["depth"]),
            "slice_id": np.asarray(cols["slice_id"]), "codes": codes, "names": names,
            "sorted": bool(len(ts) < 2 or np.all(ts[1:] >= ts[:-1])),
            "max_dur": int(dur.max()) if len(dur) else 0}


def _load_lod(db, track_id: int, level: int, tables: dict[str, str]) -> dict:
    cols, codes, names = _read(db, tables["slice_lod"], "level = $level AND track_id = $track",
                               {"track": track_id, "level": level}, LOD_COLUMNS, "depth, bucket")
    return {"bucket": np.asarray(cols["bucket"], dtype=np.int64),
            "min_ts": np.asarray(cols["min_ts_ns"], dtype=np.int64),
            "max_end": np.asarray(cols["max_end_ns"], dtype=np.int64), "depth": np.asarray(cols["depth"]),
            "slice_id": np.asarray(cols["slice_id"]), "slice_count": np.asarray(cols["slice_count"]),
            "codes": codes, "names": names}


def track_slices(db, track_id: int, tables: dict[str, str]) -> dict:
    """The track's slices in memory (read once per process while the budget keeps them)."""
    return db.shared("track_slices", (), [track_id],
                     lambda ids: {i: _load_slices(db, i, tables) for i in ids}, store="index")[track_id]


def track_lod(db, track_id: int, level: int, tables: dict[str, str]) -> dict:
    """One level of the track's level of detail in memory."""
    return db.shared("track_lod", (level,), [track_id],
                     lambda ids: {i: _load_lod(db, i, level, tables) for i in ids}, store="index")[track_id]


def _names_of(index: dict, picked: np.ndarray) -> tuple[np.ndarray, list]:
    """(codes, distinct names) of the picked rows, in order of first appearance (as ``pd.factorize`` gives them
    for the SQL answer)."""
    codes, firsts = pd.factorize(index["codes"][picked])
    names = index["names"]
    return codes, [names[i] for i in firsts.tolist()]


def exact(db, track_id: int, start: int, end: int, tables: dict[str, str]) -> tuple[dict, dict, tuple]:
    """(flags, columns but name, (name codes, distinct names)) of the slices overlapping [start, end), as
    ``SLICES_EXACT_SQL`` answers them: by slice_id, capped at ``max_slices_per_track``."""
    ix = track_slices(db, track_id, tables)
    cap, origin = db.settings.max_slices_per_track, db.info.origin_ns
    ts, end_ns = ix["ts"], ix["end"]
    lo, hi = 0, len(ts)
    if ix["sorted"]:  # only rows starting in [start - longest slice, end) can overlap the window
        lo = int(np.searchsorted(ts, start - ix["max_dur"], "left"))
        hi = int(np.searchsorted(ts, end, "left"))
    part = slice(lo, hi)
    keep = (ts[part] < end) & ((end_ns[part] > start) | (ts[part] >= start))
    picked = np.flatnonzero(keep) + lo
    truncated = len(picked) > cap
    picked = picked[:cap]
    cols = {"ts_ns": ts[picked] - origin, "dur_ns": ix["dur"][picked], "depth": ix["depth"][picked],
            "slice_id": ix["slice_id"][picked]}
    return {"lod": False, "bucket_ns": None, "truncated": bool(truncated)}, cols, _names_of(ix, picked)


def lod(db, track_id: int, level: int, bucket_ns: int, start: int, end: int,
        tables: dict[str, str]) -> tuple[dict, dict, tuple]:
    """The track's rows of one level-of-detail level drawn in [start, end), as ``SLICES_LOD_SQL`` answers them:
    by (depth, bucket), each over its bucket's extent, capped at ``max_slices_per_track``."""
    ix = track_lod(db, track_id, level, tables)
    cap, origin = db.settings.max_slices_per_track, db.info.origin_ns
    picked = np.flatnonzero((ix["max_end"] > start) & (ix["min_ts"] < end))
    truncated = len(picked) > cap
    picked = picked[:cap]
    lo_ts = ix["min_ts"][picked]
    cols = {"ts_ns": lo_ts - origin, "dur_ns": ix["max_end"][picked] - lo_ts, "depth": ix["depth"][picked],
            "slice_id": ix["slice_id"][picked], "slice_count": ix["slice_count"][picked]}
    flags = {"lod": True, "bucket_ns": bucket_ns, "level": level, "truncated": bool(truncated)}
    return flags, cols, _names_of(ix, picked)


def lod_count(db, track_id: int, level: int, bucket_lo: int, bucket_hi: int, tables: dict[str, str]) -> int:
    """Slices starting in the buckets [bucket_lo, bucket_hi] of a level (``SLICES_LOD_COUNT_SQL``)."""
    ix = track_lod(db, track_id, level, tables)
    keep = (ix["bucket"] >= bucket_lo) & (ix["bucket"] <= bucket_hi)
    return int(ix["slice_count"][keep].sum())


# ---- counter tracks ----------------------------------------------------------------------------------------------
# A counter track's samples in (series, ts, value) order, series as codes into its sorted distinct names
# (``_read``); each series is then one contiguous, ts-sorted run of the arrays.
COUNTER_POINTS_SQL = "SELECT track_id, count(*) FROM counters GROUP BY track_id"
BYTES_PER_POINT = 24


def counter_points(db) -> dict[int, int]:
    """track_id → samples of every counter track (one query per connection, then kept with its info)."""
    known = getattr(db.info, "counter_points", None)
    if known is None:
        known = {int(t): int(n) for t, n in db.rows(COUNTER_POINTS_SQL)}
        db.info.counter_points = known
    return known


def usable_counter(db, t) -> bool:
    """Whether the counter track ``t`` is answered from memory (as :func:`usable` for slices)."""
    if getattr(db.pool, "index_bytes", 0) <= 0 or db.file_id is None:
        return False  # (before counting every counter track's samples for nothing)
    return _admits(db, "counter_samples", (), t.track_id, counter_points(db).get(t.track_id, 0) * BYTES_PER_POINT)


def _load_counter(db, track_id: int, tables: dict[str, str]) -> dict:
    cols, codes, names = _read(db, tables["counters"], "track_id = $track", {"track": track_id}, "ts_ns, value",
                               "n.code, ts_ns, value NULLS LAST", key="series")
    values = cols["value"]
    complete = not isinstance(values, list)  # a NULL value makes the column a list (server.db._plain)
    values = np.asarray(values, dtype=np.float64) if complete else np.zeros(len(codes))
    cuts = np.searchsorted(codes, np.arange(len(names) + 1), "left")
    return {"names": names, "cuts": cuts, "ts": np.asarray(cols["ts_ns"], dtype=np.int64), "value": values,
            "complete": complete}


def counter_samples(db, track_id: int, tables: dict[str, str]) -> dict | None:
    """The counter track's samples in memory; None when one of its values is NULL (the SQL path handles those:
    its aggregates skip them)."""
    ix = db.shared("counter_samples", (), [track_id],
                   lambda ids: {i: _load_counter(db, i, tables) for i in ids}, store="index")[track_id]
    return ix if ix["complete"] else None


def _series_runs(ix: dict, start: int, end: int):
    """Per series: (name, its ts and values, index of its first sample ≥ start, of its first ≥ end)."""
    ts, values, cuts = ix["ts"], ix["value"], ix["cuts"]
    for i, name in enumerate(ix["names"]):
        s_ts, s_val = ts[cuts[i]:cuts[i + 1]], values[cuts[i]:cuts[i + 1]]
        yield name, s_ts, s_val, int(np.searchsorted(s_ts, start, "left")), int(np.searchsorted(s_ts, end, "left"))


def counter_count(ix: dict, start: int, end: int) -> int:
    """Samples in [start, end) (``COUNTER_COUNT_SQL``)."""
    return sum(b - a for _, _, _, a, b in _series_runs(ix, start, end))


def counter_rows(ix: dict, start: int, end: int, origin: int, limit: int, bucket_ns: int | None) -> dict:
    """The samples in [start, end) by (series, ts, value), or with ``bucket_ns`` their per-bucket max and min by
    (series, bucket), at most ``limit`` rows: ``COUNTER_EXACT_SQL`` / ``COUNTER_LOD_SQL``."""
    parts: list[tuple] = []
    total = 0
    for name, s_ts, s_val, a, b in _series_runs(ix, start, end):
        if total >= limit:
            break
        if b <= a:
            continue
        w_ts, w_val = s_ts[a:b], s_val[a:b]
        if bucket_ns is None:
            part = (name, w_ts - origin, w_val)
        else:
            keys = w_ts // bucket_ns
            firsts = np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1))
            part = (name, keys[firsts] * bucket_ns - origin, np.maximum.reduceat(w_val, firsts),
                    np.minimum.reduceat(w_val, firsts))
        n = min(len(part[1]), limit - total)
        parts.append((part[0], *(p[:n] for p in part[1:])))
        total += n
    series = np.empty(total, dtype=object)
    at = 0
    for part in parts:
        series[at:at + len(part[1])] = part[0]
        at += len(part[1])
    empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    cols = {"series": series, "ts_ns": np.concatenate([p[1] for p in parts]) if parts else empty_i,
            "value": np.concatenate([p[2] for p in parts]) if parts else empty_f}
    if bucket_ns is not None:
        cols["value_min"] = np.concatenate([p[3] for p in parts]) if parts else empty_f
    return cols


def counter_edges(ix: dict, start: int, end: int, origin: int) -> dict:
    """series → (before_ts_ns, before_value, after_ts_ns, after_value): the last sample before the window and
    the first after it (``COUNTER_EDGES_SQL``; ties at one time broken by value the same way), for every series
    with a sample outside the window."""
    out = {}
    for name, s_ts, s_val, a, b in _series_runs(ix, start, end):
        if a == 0 and b == len(s_ts):
            continue
        before = (int(s_ts[a - 1]) - origin, float(s_val[a - 1])) if a > 0 else (None, None)
        after = (int(s_ts[b]) - origin, float(s_val[b])) if b < len(s_ts) else (None, None)
        out[name] = (*before, *after)
    return out
