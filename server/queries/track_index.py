"""Whole timeline tracks kept in memory, so a viewport on them is answered without a database query.

A viewport query on the ts-ordered ``slices`` table scans every track's rows in the window (and, for a track with
one long slice, everything since that slice began) to find one track's few: 4–8 ms of DuckDB per query on a 1 M
slice rank, most of a request's cost under many users (docs/benchmarks.md, issue #18). A track shown once is
therefore read whole (its slices in ``slice_id`` order; a level of its level of detail in ``(depth, bucket)``
order), written to an index file that every server process maps from then on (``server.indexfiles``; a process
reads it from the database only when no file was written yet, or none can be), and kept in the query pool's
``index`` store, an LRU bounded by ``track_cache_mb``; later windows on it are a mask over numpy arrays. A track
too large for that budget (for a quarter of it when it is kept in memory, with no file), a database of unknown
version (nothing may be cached) or a budget of 0 keep the SQL path of ``server.queries.timeline``.

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
BYTES_PER_SLICE = 32  # the arrays of one slice (about 22 bytes, narrowed) and a margin for its share of the names


def _admits(db, kind: str, params: tuple, item, size: int, load) -> bool:
    """Whether the entry (kind, params, item) of the index store answers now (``RunDb.index_ready``: when it is
    not kept but would be, ``load(db)`` reads it, on the pool's background thread unless the pool loads in the
    foreground; meanwhile the SQL path answers)."""
    if getattr(db.pool, "index_bytes", 0) <= 0:
        return False
    return db.index_ready(kind, params, item, size, load)  # (never when the database's version is unknown)


def usable(db, t, tables: dict[str, str]) -> bool:
    """Whether the track ``t`` is answered from memory: caching is possible (the database's version is known),
    and the track is kept already or the store admits it (``QueryPool.index_admits``: it has room, or what it
    would push out has not been used for a while, so tracks read in turn never push each other out)."""
    return _admits(db, "track_slices", (), t.track_id, t.slice_count * BYTES_PER_SLICE,
                   lambda bg: track_slices(bg, t.track_id, tables))


def usable_lod(db, t, level: int, tables: dict[str, str]) -> bool:
    """The same for one level of the track's level of detail (sized as if it held every slice: at most)."""
    return _admits(db, "track_lod", (level,), t.track_id, t.slice_count * BYTES_PER_SLICE,
                   lambda bg: track_lod(bg, t.track_id, level, tables))


def _read(db, table: str, where: str, params: dict, columns: str, order: str,
          key: str = "name") -> tuple[dict, np.ndarray, list]:
    """(columns, codes of ``key``, its distinct values) of the rows of ``table`` matching ``where``."""
    names = [r[0] for r in db.rows(KEYS_SQL.format(key=key, table=table, where=where), params)]
    cols = db.arrays(ROWS_SQL.format(key=key, table=table, where=where, columns=columns, order=order), params)
    codes = np.asarray(cols.pop("code"), dtype=np.int32)
    return cols, codes, names


def _nulls(values) -> np.ndarray | None:
    return np.fromiter((v is None for v in values), dtype=bool, count=len(values)) if isinstance(values, list) \
        else None


def _narrow(values) -> tuple:
    """(array, base, null mask or None) of an integer column: values - base in the narrowest signed type."""
    mask = _nulls(values)  # a column with NULLs comes as a list (server.db._plain)
    if mask is not None:
        values = [0 if v is None else v for v in values]
    values = np.asarray(values, dtype=np.int64)
    base = int(values.min()) if len(values) else 0
    span = int(values.max()) - base if len(values) else 0
    dtype = next(t for t in (np.int8, np.int16, np.int32, np.int64) if span <= np.iinfo(t).max)
    return (values - base).astype(dtype), base, mask


def _wide(packed: tuple, picked) -> np.ndarray:
    """The picked values of a column packed by :func:`_narrow`, as int64 (an object array with None where NULL)."""
    values, base, mask = packed
    out = values[picked].astype(np.int64) + base
    if mask is not None and mask[picked].any():
        out = out.astype(object)
        out[mask[picked]] = None
    return out


def load_slices(db, track_id: int, tables: dict[str, str]) -> dict:
    """A track's slices read whole from the database: the index entry ``track_slices`` (also what
    ``server.prewarm`` writes ahead)."""
    cols, codes, names = _read(db, tables["slices"], "track_id = $track", {"track": track_id}, SLICE_COLUMNS,
                               "slice_id")
    ts = np.asarray(cols["ts_ns"], dtype=np.int64)
    dur = np.asarray(cols["dur_ns"], dtype=np.int64)
    # (ids and depths in the narrowest type that holds them: about 23 bytes a slice instead of 44)
    return {"ts": ts, "end": ts + dur, "depth": _narrow(cols["depth"]), "slice_id": _narrow(cols["slice_id"]),
            "codes": codes.astype(np.int16) if len(codes) and codes.max() < 2 ** 15 else codes, "names": names,
            "sorted": bool(len(ts) < 2 or np.all(ts[1:] >= ts[:-1])),
            "max_dur": int(dur.max()) if len(dur) else 0}


def load_lod(db, track_id: int, level: int, tables: dict[str, str]) -> dict:
    """One level of a track's level of detail read whole: the index entry ``track_lod``."""
    cols, codes, names = _read(db, tables["slice_lod"], "level = $level AND track_id = $track",
                               {"track": track_id, "level": level}, LOD_COLUMNS, "depth, bucket")
    return {"bucket": np.asarray(cols["bucket"], dtype=np.int64),
            "min_ts": np.asarray(cols["min_ts_ns"], dtype=np.int64),
            "max_end": np.asarray(cols["max_end_ns"], dtype=np.int64), "depth": _narrow(cols["depth"]),
            "slice_id": _narrow(cols["slice_id"]), "slice_count": _narrow(cols["slice_count"]),
            "codes": codes, "names": names}


def track_slices(db, track_id: int, tables: dict[str, str]) -> dict:
    """The track's slices in memory (read once per process while the budget keeps them)."""
    return db.shared("track_slices", (), [track_id],
                     lambda ids: {i: _entry(db, "track_slices", (), i, lambda i=i: load_slices(db, i, tables))
                                  for i in ids}, store="index")[track_id]


def track_lod(db, track_id: int, level: int, tables: dict[str, str]) -> dict:
    """One level of the track's level of detail in memory."""
    return db.shared("track_lod", (level,), [track_id],
                     lambda ids: {i: _entry(db, "track_lod", (level,), i, lambda i=i: load_lod(db, i, level, tables))
                                  for i in ids}, store="index")[track_id]


def _entry(db, kind: str, params: tuple, item, read):
    """The index entry (kind, params, item): mapped from its file when one was written (by any server process,
    ``server.indexfiles``), else ``read()`` from the database and written there for the next."""
    files = getattr(db, "index_files", None)
    if files is None:
        return read()
    key = db.index_key(kind, params, item)
    found = files.load(key)
    if found is not None:
        return found
    value = read()
    return files.save(key, value) or value


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
    ts = ix["ts"]
    lo, hi = 0, len(ts)
    if ix["sorted"]:  # only rows starting in [start - longest slice, end) can overlap the window
        lo = int(np.searchsorted(ts, start - ix["max_dur"], "left"))
        hi = int(np.searchsorted(ts, end, "left"))
    part = slice(lo, hi)
    keep = (ts[part] < end) & ((ix["end"][part] > start) | (ts[part] >= start))
    picked = np.flatnonzero(keep) + lo
    truncated = len(picked) > cap
    picked = picked[:cap]
    cols = {"ts_ns": ts[picked] - origin, "dur_ns": ix["end"][picked] - ts[picked], "depth": _wide(ix["depth"], picked),
            "slice_id": _wide(ix["slice_id"], picked)}
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
    cols = {"ts_ns": lo_ts - origin, "dur_ns": ix["max_end"][picked] - lo_ts, "depth": _wide(ix["depth"], picked),
            "slice_id": _wide(ix["slice_id"], picked), "slice_count": _wide(ix["slice_count"], picked)}
    flags = {"lod": True, "bucket_ns": bucket_ns, "level": level, "truncated": bool(truncated)}
    return flags, cols, _names_of(ix, picked)


def lod_count(db, track_id: int, level: int, bucket_lo: int, bucket_hi: int, tables: dict[str, str]) -> int:
    """Slices starting in the buckets [bucket_lo, bucket_hi] of a level (``SLICES_LOD_COUNT_SQL``)."""
    ix = track_lod(db, track_id, level, tables)
    keep = (ix["bucket"] >= bucket_lo) & (ix["bucket"] <= bucket_hi)
    return int(_wide(ix["slice_count"], keep).sum())


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


def usable_counter(db, t, tables: dict[str, str]) -> bool:
    """Whether the counter track ``t`` is answered from memory (as :func:`usable` for slices)."""
    if getattr(db.pool, "index_bytes", 0) <= 0 or db.file_id is None:
        return False  # (before counting every counter track's samples for nothing)
    return _admits(db, "counter_samples", (), t.track_id, counter_points(db).get(t.track_id, 0) * BYTES_PER_POINT,
                   lambda bg: counter_samples(bg, t.track_id, tables))


def load_counter(db, track_id: int, tables: dict[str, str]) -> dict:
    """A counter track's samples read whole: the index entry ``counter_samples``."""
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
                   lambda ids: {i: _entry(db, "counter_samples", (), i, lambda i=i: load_counter(db, i, tables))
                                for i in ids}, store="index")[track_id]
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


# ---- flows -------------------------------------------------------------------------------------------------------
# A table's flows (a shard's, or the run's) with their ends' slice depths looked up once: the SQL path joins every
# window's flows with the slices of every shard, ~20 ms of a ~40 ms query at 8 ranks of 2.2 M slices. They are
# kept per (category, span class: the bit length of hi - lo) in order of their earlier end (lo); a flow overlaps
# [start, end) when lo < end and hi >= start, so a window's candidates in a class are two binary searches away.
# Integer columns are packed by ``_narrow``, a null mask beside any column that has NULLs.
FLOW_RANKS_SQL = "SELECT rank, count(*), min(flow_id) FROM flows GROUP BY rank"
FLOW_READ_COLUMNS = ("least(src_ts_ns, dst_ts_ns) AS lo, greatest(src_ts_ns, dst_ts_ns) AS hi, flow_id, src_ts_ns, "
                     "dst_ts_ns, src_track_id, src_slice_id, dst_track_id, dst_slice_id")
FLOW_CATS_SQL = "SELECT DISTINCT coalesce(cat, '') FROM {flows} ORDER BY 1"
# the category as its position in FLOW_CATS_SQL's list (a join with that list, as ``_read`` does, costs 1.5x)
FLOW_READ_SQL = """
SELECT {columns}, list_position($cats, coalesce(cat, '')) - 1 AS code FROM {flows}
WHERE least(src_ts_ns, dst_ts_ns) IS NOT NULL ORDER BY flow_id
"""
DEPTHS_SQL = "SELECT slice_id, depth FROM {slices}"
FLOW_COLUMNS = ("flow_id", "cat", "src_track_id", "src_ts_ns", "src_slice_id", "src_depth", "dst_track_id",
                "dst_ts_ns", "dst_slice_id", "dst_depth")
NARROW_COLUMNS = ("flow_id", "src_track_id", "src_slice_id", "src_depth", "dst_track_id", "dst_slice_id",
                  "dst_depth")
BYTES_PER_FLOW = 48  # about 39 bytes of arrays per flow (narrowed), and a margin


def flow_sources(db, tables) -> list[tuple[str, dict[str, str], int, int]] | None:
    """(flows table, the tables beside it, flows, smallest flow_id) of each table holding flows: a shard (of one
    rank or a group of ranks) when several are attached, else the run's (``tables(db, rank)`` says which); by
    smallest flow_id. Once per connection. None when a flow has no rank (the SQL path answers then)."""
    known = getattr(db.info, "flow_sources", False)
    if known is False:
        by_table: dict[str, list] = {}
        for rank, count, first in db.rows(FLOW_RANKS_SQL):
            if rank is None:
                by_table = None
                break
            names = tables(db, int(rank))
            entry = by_table.setdefault(names["flows"], [names, 0, int(first)])
            entry[1] += int(count)
            entry[2] = min(entry[2], int(first))
        known = None if by_table is None else sorted(((table, *entry) for table, entry in by_table.items()),
                                                     key=lambda source: source[3])
        db.info.flow_sources = known
    return known


def _depths(slice_ids, ids: np.ndarray, depths: np.ndarray) -> list | np.ndarray:
    """The depth of each slice of ``slice_ids`` (``ids`` sorted), None where it has none (a LEFT JOIN's NULL)."""
    nulls = _nulls(slice_ids)
    wanted = np.asarray([0 if v is None else v for v in slice_ids] if nulls is not None else slice_ids,
                        dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, wanted), max(len(ids) - 1, 0))
    found = (ids[at] == wanted) if len(ids) else np.zeros(len(wanted), dtype=bool)
    if nulls is not None:
        found &= ~nulls
    out = depths[at] if len(ids) else np.zeros(len(wanted), dtype=np.int64)
    return out if found.all() else [v if ok else None for v, ok in zip(out.tolist(), found.tolist())]


def load_flows(db, tables: dict[str, str]) -> dict:
    """A table of flows read whole, with each end's depth: the index entry ``flows``."""
    # in flow_id order, the category as codes (no Python string per flow); each end's depth is looked up in the
    # slices' (slice_id, depth), read once (a join of the two tables costs 3x as much)
    cat_names = [c for (c,) in db.rows(FLOW_CATS_SQL.format(**tables))]
    cols = db.arrays(FLOW_READ_SQL.format(columns=FLOW_READ_COLUMNS, **tables), {"cats": cat_names})
    cat_code = np.asarray(cols.pop("code"), dtype=np.int64)
    slices = db.arrays(DEPTHS_SQL.format(**tables))
    ids, depths = np.asarray(slices.pop("slice_id"), dtype=np.int64), np.asarray(slices.pop("depth"))
    if len(ids) > 1 and not np.all(ids[1:] >= ids[:-1]):  # (read in the table's order: slice_id order as written)
        order = np.argsort(ids, kind="stable")
        ids, depths = ids[order], depths[order]
    cols["src_depth"] = _depths(cols["src_slice_id"], ids, depths)
    cols["dst_depth"] = _depths(cols["dst_slice_id"], ids, depths)
    del ids, depths
    lo = np.asarray(cols["lo"], dtype=np.int64)
    hi = np.asarray(cols["hi"], dtype=np.int64)
    src_null = _nulls(cols["src_ts_ns"])
    dst_null = _nulls(cols.pop("dst_ts_ns"))
    src = np.asarray([lo[i] if v is None else v for i, v in enumerate(cols["src_ts_ns"])] if src_null is not None
                     else cols["src_ts_ns"], dtype=np.int64)
    # the span class (bit length of hi - lo): a window's candidates in a class start at most 2**class before it
    span = hi - lo
    cls = np.zeros(len(span), dtype=np.int8)
    cls[span > 0] = np.frexp(span[span > 0].astype(np.float64))[1]
    order = np.lexsort((lo, cls, cat_code))  # stable: flow_id order within equal (category, class, lo)
    key = cat_code[order].astype(np.int64) * 128 + cls[order]
    cuts = np.concatenate(([0], np.flatnonzero(key[1:] != key[:-1]) + 1, [len(key)])) if len(key) else [0]
    lo, hi = lo[order], hi[order]
    segments = [(int(cat_code[order[a]]), a, b, int((hi[a:b] - lo[a:b]).max()))
                for a, b in zip(np.asarray(cuts[:-1]).tolist(), np.asarray(cuts[1:]).tolist())]
    by_id = np.empty(len(order), dtype=np.int32)
    by_id[order] = np.arange(len(order), dtype=np.int32)  # flow_id order → position
    narrow = {}
    for name in NARROW_COLUMNS:
        values, base, mask = _narrow(cols[name])
        narrow[name] = (values[order], base, None if mask is None else mask[order])
    return {"segments": segments, "cat_code": cat_code[order].astype(np.int16),
            "cat_names": np.array([str(c) for c in cat_names], dtype=object), "lo": lo, "hi": hi,
            "src_is_hi": (src != lo[by_id])[order] if len(order) else np.zeros(0, dtype=bool),
            "src_null": None if src_null is None else src_null[order],
            "dst_null": None if dst_null is None else dst_null[order], "by_id": by_id, **narrow}


def table_flows(db, tables: dict[str, str]) -> dict:
    """The flows of one table (``flow_sources``) in memory."""
    return db.shared("flows", (), [tables["flows"]],
                     lambda keys: {k: _entry(db, "flows", (), k, lambda: load_flows(db, tables)) for k in keys},
                     store="index")[tables["flows"]]


def _window_rows(ix: dict, cats: list[str], start: int, end: int, limit: int) -> np.ndarray:
    """Positions of the first ``limit`` flows (by flow_id) of ``cats`` (all when empty) overlapping [start, end).
    The candidates of each (category, span class) are found by two binary searches on ``lo``; when they are many
    (a wide window), the flows are read in flow_id order instead, a chunk at a time, until ``limit`` overlap,
    whichever reads fewer rows."""
    wanted = np.array([not cats or name in cats for name in ix["cat_names"]], dtype=bool)
    lo, hi = ix["lo"], ix["hi"]
    bounds = []
    for code, a, b, span in ix["segments"]:
        if wanted[code]:
            i = a + int(np.searchsorted(lo[a:b], start - span, "left"))
            j = a + int(np.searchsorted(lo[a:b], end, "left"))
            if j > i:
                bounds.append((i, j))
    candidates = sum(j - i for i, j in bounds)
    if not candidates:
        return np.zeros(0, dtype=np.int64)
    ids = ix["flow_id"][0]
    if candidates <= limit * len(lo) // candidates:  # (about the rows the flow_id-order read would take)
        rows = np.concatenate([np.flatnonzero(hi[i:j] >= start) + i for i, j in bounds])
        if len(rows) > limit:
            rows = rows[np.argpartition(ids[rows], limit - 1)[:limit]]
        return rows[np.argsort(ids[rows], kind="stable")]
    found, total, by_id, step = [], 0, ix["by_id"], max(4 * limit, 1024)
    every = bool(wanted.all())
    for k in range(0, len(by_id), step):
        rows = by_id[k:k + step]
        keep = (lo[rows] < end) & (hi[rows] >= start)
        if not every:
            keep &= wanted[ix["cat_code"][rows]]
        found.append(rows[keep])
        total += len(found[-1])
        if total >= limit:
            break
    return np.concatenate(found).astype(np.int64)[:limit]


def flows_answer(db, start: int, end: int, cats: list[str], cap: int, tables) -> dict | None:
    """The flows of the window as ``FLOWS_IN_RANGE_SQL`` answers them (by flow_id, at most ``cap + 1``), from the
    tables' flows in memory; None when one of them is not kept (the SQL path answers then). Tables are read in
    order of their smallest flow_id, and no further once ``cap + 1`` flows with smaller ids are found.
    ``tables(db, rank)``: the tables a rank's viewport reads (``server.queries.timeline.tables``)."""
    if getattr(db.pool, "index_bytes", 0) <= 0 or db.file_id is None:
        return None  # (before counting every table's flows for nothing)
    sources = flow_sources(db, tables)
    if sources is None:
        return None
    ready = [_admits(db, "flows", (), table, count * BYTES_PER_FLOW,
                     lambda bg, names=names: table_flows(bg, names))
             for table, names, count, _ in sources]  # (each one not kept is read meanwhile, if it fits)
    found: list[tuple[dict, np.ndarray]] = []
    ids: list[np.ndarray] = []
    for at, (_, names, _, _) in enumerate(sources):
        if not ready[at]:
            return None
        ix = table_flows(db, names)
        rows = _window_rows(ix, cats, start, end, cap + 1)
        found.append((ix, rows))
        ids.append(ix["flow_id"][0][rows].astype(np.int64) + ix["flow_id"][1])
        total = np.sort(np.concatenate(ids))
        if len(total) > cap and at + 1 < len(sources) and total[cap] < sources[at + 1][3]:
            break
    origin = db.info.origin_ns
    parts = []
    for ix, rows in found:
        src_hi, lo, hi = ix["src_is_hi"][rows], ix["lo"][rows], ix["hi"][rows]
        part = {"flow_id": _wide(ix["flow_id"], rows), "cat": ix["cat_names"][ix["cat_code"][rows]],
                "src_ts_ns": np.where(src_hi, hi, lo) - origin, "dst_ts_ns": np.where(src_hi, lo, hi) - origin}
        for name in ("src_track_id", "src_slice_id", "src_depth", "dst_track_id", "dst_slice_id", "dst_depth"):
            part[name] = _wide(ix[name], rows)
        for end_name, mask in (("src_ts_ns", ix["src_null"]), ("dst_ts_ns", ix["dst_null"])):
            if mask is not None and mask[rows].any():
                part[end_name] = part[end_name].astype(object)
                part[end_name][mask[rows]] = None
        parts.append(part)
    if not parts:
        return {name: np.zeros(0, dtype=object if name == "cat" else np.int64) for name in FLOW_COLUMNS}
    order = np.argsort(np.concatenate([p["flow_id"] for p in parts]), kind="stable")[:cap + 1]
    out = {name: np.concatenate([p[name] for p in parts])[order] for name in FLOW_COLUMNS}
    # a column with NULLs is a list, as the SQL path gives it (server.db._plain)
    return {name: v.tolist() if name != "cat" and v.dtype == object else v for name, v in out.items()}
