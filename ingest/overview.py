"""Every lane of a big rank at the end of its parse: a coarse overview, published as a database of its own while
the rest of the rank is derived.

A shard of one big rank is published only when all of it is written: minutes for a trace of several GB. As soon
as the rank's events are read and its tracks named, ``ingest.trace`` makes its slices' spans (``{p}ov``: track,
start and duration of every slice, B and E events paired, in no particular order; no name, category or args, and
no sort), and its overview is computed from them before anything else is derived (on a cursor of its
own) and written to ``<shard>.overview.duckdb``:

* ``tracks``: every track of the rank with its final id, names, kind and order, and its figures from its slices
  (count, longest, first start, last end) but for the depth: an overview has none (``max_depth`` 0);
* ``slice_lod`` and ``lod_levels``: per lane and bucket of ``bucket_ns`` (at most ``BUCKETS`` buckets over the
  rank's time, a level of detail coarser than the shard's), one row of the lane's *busy time* in the bucket: the
  length of the union of its slices there (``total_dur_ns``), drawn from the first busy instant to the last
  (``min_ts_ns``, ``max_end_ns``), named ``busy``, with the slices starting in it (``slice_count``); coarser levels
  as ``ingest.lod`` makes them, each ``FACTOR`` times wider;
* ``slices`` empty: nothing of it can be clicked or searched until the shard is ready.

The union is computed lane by lane over the slices put in start order (most come so: a sort that finds runs
is then linear), a batch of whole tracks at a time (a bigger track a part of its buckets at a time, carrying its
last busy interval), so memory stays bounded; the buckets' figures are read at their edges (binary searches), not
made per interval. The file is written under a temp name and renamed when complete; then a small JSON file beside the
task's progress file says where it is and the rank's time range. ``ingest.shards`` publishes it in the pending
shard's manifest entry (``overview``), and readers attach it as the rank's shard until the whole shard is ready.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from .columns import arrow_table
from .layout import _sql_path, sync_file
from .lod import FACTOR, LEVEL_DDL, LOD_LEVELS_DDL, MIN_BUCKET_NS, TOP_BUCKETS, _batches
from .trace_sql import SPANS as TABLE  # the rank's slices where they are, in no order (SLICE_SPANS)

OVERVIEW_MIN_SLICES = 1_000_000  # a rank with fewer slices is published whole soon enough
# a lone rank's trace of this size or more likely has an overview: its other files (CSVs) wait for the overview,
# so that the trace is read and its slices made on every core (`stages.submit`). Traces hold ~390 bytes per slice
# (the generator's) to ~530-600 (the real Level0-2 samples), so 1 M slices come at ~400-600 MB
WAIT_BYTES = 400 << 20
BUCKETS = 4096  # a lane's buckets over the rank's time, at most: a pixel column of a wide screen, zoomed out
BATCH_SLICES = 1_000_000  # slices of whole tracks read at a time (a bigger track: a part at a time)
NAME = "busy"
ALIAS = "overview_db"

EXTENT = f"SELECT count(*), min(ts_ns), max(ts_ns + dur_ns) FROM {{p}}{TABLE}"
PER_TRACK = f"SELECT local_track, count(*) FROM {{p}}{TABLE} GROUP BY local_track ORDER BY local_track"
ROWS = f"SELECT local_track, ts_ns, dur_ns FROM {{p}}{TABLE} WHERE local_track BETWEEN ? AND ?"
# a big track's slices per bucket of the overview's finest width: where its parts are cut
PER_BUCKET = f"SELECT ts_ns // ? AS b, count(*) FROM {{p}}{TABLE} WHERE local_track = ? GROUP BY b ORDER BY b"
PART_ROWS = f"SELECT ts_ns, dur_ns FROM {{p}}{TABLE} WHERE local_track = ? AND ts_ns >= ? AND ts_ns < ?"
TRACKS = """
INSERT INTO {alias}.tracks
SELECT t.local_track + {track_delta}, {rank_id}, t.pid, t.tid, t.process_name, t.thread_name, t.kind, t.label,
       t.process_sort_index, t.thread_sort_index, t.rank_track, t.counter_name,
       coalesce(s.n, 0), CASE WHEN s.n > 0 THEN 0 END, s.max_dur, s.min_ts, s.max_end, t.pid = {derived_pid}
FROM {p}tracks t LEFT JOIN (SELECT local_track, count(*) AS n, max(dur_ns) AS max_dur, min(ts_ns) AS min_ts,
                                   max(ts_ns + dur_ns) AS max_end FROM {p}""" + TABLE + """ GROUP BY local_track) s
                USING (local_track)
ORDER BY t.local_track
"""
LEVEL_COLUMNS = ("track_id", "depth", "bucket", "slice_count", "slice_id", "ts_ns", "dur_ns", "min_ts_ns",
                 "max_end_ns", "total_dur_ns")


def path_for(shard: Path) -> Path:
    return shard.with_name(shard.stem + ".overview.duckdb")


def note_for(progress_path: str | os.PathLike) -> Path:
    """The JSON file that announces a written overview, beside the task's progress file."""
    return Path(str(progress_path) + ".overview.json")


def read_note(progress_path: str | os.PathLike) -> dict | None:
    try:
        return json.loads(note_for(progress_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def bucket_for(span_ns: int) -> int:
    """The overview's finest width: the narrowest of the level of detail's widths (``MIN_BUCKET_NS`` times a power
    of ``FACTOR``) that covers ``span_ns`` in ``BUCKETS`` buckets."""
    width = MIN_BUCKET_NS
    while width * BUCKETS < span_ns:
        width *= FACTOR
    return width


def write(cur, prefix: str, derived_pid: int, shard: Path, note: Path, bases) -> dict | None:
    """Write the overview of the stage ``prefix`` of one rank (its slices where they are, ``{prefix}ov``) beside
    ``shard`` and announce it in ``note``; None (nothing written) for a rank with fewer than ``OVERVIEW_MIN_SLICES``
    slices. ``bases(rank)``: the rank's id range (``stages.rank_id_bases``)."""
    started = time.perf_counter()
    try:
        n, first, end = cur.execute(EXTENT.format(p=prefix)).fetchone()
    except duckdb.CatalogException:  # no {prefix}ov: the trace has too few slices to make it (ingest.trace)
        return None
    if n < OVERVIEW_MIN_SLICES or first is None:
        return None
    ((rank, track_base),) = cur.execute(f"SELECT rank, min(local_track) - 1 FROM {prefix}tracks GROUP BY rank"
                                        ).fetchall()
    b = bases(int(rank))
    track_delta = b.track - int(track_base)
    widths = [bucket_for(int(end) - int(first))]
    while widths[-1] * TOP_BUCKETS < int(end) - int(first):
        widths.append(widths[-1] * FACTOR)
    levels = _levels(cur, prefix, widths, track_delta, b.slice)
    dst = path_for(shard)
    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        cur.execute(f"ATTACH '{_sql_path(tmp)}' AS {ALIAS}")
        try:
            for table in ("tracks", "slices"):
                cur.execute(f"CREATE TABLE {ALIAS}.{table} AS SELECT * FROM main.{table} LIMIT 0")
            cur.execute(TRACKS.format(alias=ALIAS, p=prefix, track_delta=track_delta, rank_id=int(rank),
                                      derived_pid=derived_pid))
            cur.execute(f"CREATE TABLE {ALIAS}.slice_lod (level INTEGER, bucket_ns BIGINT, {LEVEL_DDL})")
            for lv, (width, rows) in enumerate(zip(widths, levels)):
                cur.register("_overview_rows", rows)
                try:
                    cur.execute(f"INSERT INTO {ALIAS}.slice_lod SELECT {lv}, {width}::BIGINT, track_id, depth, "
                                f"bucket, slice_count, slice_id, ts_ns, dur_ns, '{NAME}', min_ts_ns, max_end_ns, "
                                "total_dur_ns FROM _overview_rows")
                finally:
                    cur.unregister("_overview_rows")
            cur.execute(LOD_LEVELS_DDL.replace("lod_levels", f"{ALIAS}.lod_levels"))
            cur.execute(f"INSERT INTO {ALIAS}.lod_levels SELECT level, bucket_ns, count(*), {int(rank)} "
                        f"FROM {ALIAS}.slice_lod GROUP BY level, bucket_ns ORDER BY level")
            cur.execute(f"CREATE TABLE {ALIAS}.meta (key VARCHAR, value VARCHAR)")
            cur.execute(f"INSERT INTO {ALIAS}.meta VALUES ('overview', 'true')")
        finally:
            cur.execute(f"DETACH {ALIAS}")
        sync_file(tmp)  # (the shard's database writes unsynced: layout.UNSYNCED)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    info = {"file": dst.name, "start_ns": int(first), "end_ns": int(end), "rank_slices": int(n),
            "bucket_ns": widths[0], "seconds": round(time.perf_counter() - started, 3)}
    note_tmp = note.with_name(note.name + ".tmp")
    note_tmp.write_text(json.dumps(info), encoding="utf-8")
    os.replace(note_tmp, note)
    return info


def _levels(cur, prefix: str, widths: list[int], track_delta: int, slice_base: int) -> list[pa.Table]:
    """The overview's rows of every level (``widths``), track by track (``LEVEL_COLUMNS``): batches of whole
    tracks (a track bigger than a batch alone), as many at once as DuckDB has threads, each on a cursor of its own
    (the reads and numpy's work on whole arrays let go of the GIL)."""
    counts = cur.execute(PER_TRACK.format(p=prefix)).fetchall()
    batches = list(_batches(counts, BATCH_SLICES))
    threads = max(1, min(len(batches), int(cur.execute("SELECT current_setting('threads')").fetchone()[0])))
    local = threading.local()

    def one(batch: tuple[int, int, int]) -> list[dict[str, np.ndarray]]:
        if not hasattr(local, "cur"):
            local.cur = cur.cursor()
            cursors.append(local.cur)
        lo, hi, k = batch
        if k > BATCH_SLICES:
            return [_big_track(local.cur, prefix, lo, widths[0])]
        return _batch(local.cur, prefix, lo, hi, widths[0])

    cursors: list = []
    try:
        with ThreadPoolExecutor(threads, thread_name_prefix="overview") as pool:
            parts = [part for done in pool.map(one, batches) for part in done]
    finally:
        for c in cursors:
            c.close()
    level0 = _concat(parts)
    level0["slice_id"] = slice_base + 1 + np.arange(len(level0["bucket"]), dtype=np.int64)
    level0["track_id"] = level0["track_id"] + track_delta
    out = [level0]
    for _ in widths[1:]:
        out.append(_coarser(out[-1]))
    return [arrow_table({c: lv[c] for c in LEVEL_COLUMNS}) for lv in out]


def _batch(cur, prefix: str, lo: int, hi: int, width: int) -> list[dict[str, np.ndarray]]:
    """The rows of the tracks ``lo``..``hi``, track by track."""
    rows = cur.execute(ROWS.format(p=prefix), [lo, hi]).fetchnumpy()
    local = np.asarray(rows["local_track"], dtype=np.int64) - lo
    ts = np.asarray(rows["ts_ns"], dtype=np.int64)
    end = ts + np.asarray(rows["dur_ns"], dtype=np.int64)
    del rows
    if lo != hi:  # the tracks' rows together (a radix sort of their small numbers: linear)
        by = np.argsort(local.astype(np.int16) if hi - lo < 1 << 15 else local, kind="stable")
        ts, end = ts[by], end[by]
        del by
    cuts = np.r_[0, np.cumsum(np.bincount(local, minlength=hi - lo + 1))]
    del local
    parts = []
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        if a == b:
            continue
        starts, ends = _in_start_order(ts[a:b], end[a:b])
        s, e = _union(starts, ends, None)
        parts.append(_buckets(lo + i, s, e, starts, width))
    return parts


def _in_start_order(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A lane's slices in start order: as they are when they come so, else by a stable sort (linear on the runs in
    order they mostly come in)."""
    if len(starts) < 2 or bool((starts[1:] >= starts[:-1]).all()):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order]


def _union(starts: np.ndarray, ends: np.ndarray, carry: tuple[int, int] | None):
    """Disjoint busy intervals of slices in start order (touching ones merge), ``carry`` (an interval of the part
    before, still open) first."""
    if carry is not None:
        starts, ends = np.r_[carry[0], starts], np.r_[carry[1], ends]
    if not len(starts):
        return starts, ends
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    return starts[idx], np.maximum.reduceat(ends, idx)


def _big_track(cur, prefix: str, track: int, width: int) -> dict[str, np.ndarray]:
    """A track bigger than a batch, a part of about ``BATCH_SLICES`` slices at a time (cut at the buckets' edges:
    a bucket with more slices is a part alone), its last busy interval carried to the next part."""
    bounds = [-(1 << 63)]
    held = 0
    for b, n in cur.execute(PER_BUCKET.format(p=prefix), [width, track]).fetchall():
        if held and held + n > BATCH_SLICES:
            bounds.append(int(b) * width)
            held = 0
        held += n
    bounds.append((1 << 63) - 1)
    carry = None
    pieces = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        rows = cur.execute(PART_ROWS.format(p=prefix), [track, lo, hi]).fetchnumpy()
        ts, dur = np.asarray(rows["ts_ns"], dtype=np.int64), np.asarray(rows["dur_ns"], dtype=np.int64)
        starts, ends = _in_start_order(ts, ts + dur)
        s, e = _union(starts, ends, carry)
        carry = (int(s[-1]), int(e[-1])) if len(s) else carry
        if len(s):
            s, e = s[:-1], e[:-1]  # (the last one may go on in the next part)
        pieces.append(_buckets(track, s, e, starts, width))
    if carry is not None:
        pieces.append(_buckets(track, np.array([carry[0]]), np.array([carry[1]]), np.zeros(0, dtype=np.int64),
                               width))
    rows = _concat(pieces)
    order = np.argsort(rows["bucket"], kind="stable")  # (a carried interval reaches back before its part)
    return _merge_runs({k: rows[k][order] for k in ("track_id", "bucket", "busy", "lo", "hi", "slice_count")})


def _buckets(track: int, s: np.ndarray, e: np.ndarray, ts: np.ndarray, width: int) -> dict[str, np.ndarray]:
    """One lane's rows in bucket order: per bucket its busy time (the intervals ``s``..``e``, disjoint and in
    order, cut at the buckets), first busy instant, last busy end, and the slices starting in it (``ts``, in start
    order: a bucket where only instants start is there too, with no busy time). A bucket is there when a slice
    starts in it or an interval reaches it (one of no length: the bucket it is in). Computed at the buckets' edges
    (a binary search each), not per interval, so a lane costs its slices' count once and ``log`` of it per bucket."""
    first = s // width
    last = np.maximum(e - 1, s) // width
    started = ts // width
    if not len(first) and not len(started):
        return {k: np.zeros(0, dtype=np.int64) for k in ("track_id", "bucket", "busy", "lo", "hi", "slice_count")}
    base = int(min(x.min() for x in (first, started) if len(x)))
    size = int(max(x.max() for x in (last, started) if len(x))) - base + 2
    reach = np.cumsum(np.bincount(first - base, minlength=size) - np.bincount(last - base + 1, minlength=size))
    there = reach[:-1] > 0
    there[started - base] = True
    bucket = base + np.flatnonzero(there).astype(np.int64)
    lo_edge, hi_edge = bucket * width, (bucket + 1) * width
    # the slices starting in each bucket, and the first of them
    a, b = np.searchsorted(ts, lo_edge), np.searchsorted(ts, hi_edge)
    count = b - a
    first_start = ts[np.minimum(a, max(len(ts) - 1, 0))] if len(ts) else np.zeros(len(bucket), dtype=np.int64)
    # busy time before an instant t: the intervals wholly before it, and the part of the last one starting before it
    done = np.r_[0, np.cumsum(e - s)]
    k_lo, k_hi = np.searchsorted(s, lo_edge), np.searchsorted(s, hi_edge)
    busy = _busy_before(s, e, done, hi_edge, k_hi) - _busy_before(s, e, done, lo_edge, k_lo)
    # the first busy instant: the edge when an interval runs into the bucket, else the first interval starting in it
    before = np.maximum(k_lo - 1, 0)
    runs_in = (k_lo > 0) & (e[before] > lo_edge) if len(s) else np.zeros(len(bucket), dtype=bool)
    at = np.minimum(k_lo, max(len(s) - 1, 0))
    starts_in = (k_lo < len(s)) & (s[at] < hi_edge) if len(s) else np.zeros(len(bucket), dtype=bool)
    big = np.iinfo(np.int64).max
    lo = np.where(runs_in, lo_edge, np.where(starts_in, s[at] if len(s) else 0, big))
    # the last busy end: that of the last interval starting before the bucket's end, when it reaches the bucket
    j = np.maximum(k_hi - 1, 0)
    reaches = (k_hi > 0) & ((e[j] > lo_edge) | (s[j] >= lo_edge)) if len(s) else np.zeros(len(bucket), dtype=bool)
    hi = np.where(reaches, np.maximum(np.minimum(e[j], hi_edge), np.maximum(s[j], lo_edge)) if len(s) else 0, -big)
    lo = np.where(count > 0, np.minimum(lo, first_start), lo)
    hi = np.where(count > 0, np.maximum(hi, first_start), hi)
    return {"track_id": np.full(len(bucket), track, dtype=np.int64), "bucket": bucket, "busy": busy, "lo": lo,
            "hi": hi, "slice_count": count.astype(np.int64)}


def _busy_before(s: np.ndarray, e: np.ndarray, done: np.ndarray, t: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The busy time of the intervals ``s``..``e`` before each instant ``t`` (``k``: how many start before it;
    ``done``: the intervals' running total)."""
    if not len(s):
        return np.zeros(len(t), dtype=np.int64)
    j = np.maximum(k - 1, 0)
    return np.where(k > 0, done[j] + np.minimum(e[j], t) - s[j], 0)


def _merge_runs(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows of one lane in bucket order, those of one bucket merged."""
    if not len(rows["bucket"]):
        return rows
    new = np.r_[True, rows["bucket"][1:] != rows["bucket"][:-1]]
    idx = np.flatnonzero(new)
    return {"track_id": rows["track_id"][idx], "bucket": rows["bucket"][idx],
            "busy": np.add.reduceat(rows["busy"], idx), "lo": np.minimum.reduceat(rows["lo"], idx),
            "hi": np.maximum.reduceat(rows["hi"], idx), "slice_count": np.add.reduceat(rows["slice_count"], idx)}


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    keys = ("track_id", "bucket", "busy", "lo", "hi", "slice_count")
    if not parts:
        return {k: np.zeros(0, dtype=np.int64) for k in keys} | _level_columns({k: np.zeros(0, dtype=np.int64)
                                                                                  for k in keys})
    rows = {k: np.concatenate([p[k] for p in parts]).astype(np.int64) for k in keys}
    return rows | _level_columns(rows)


def _level_columns(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    n = len(rows["bucket"])
    return {"depth": np.zeros(n, dtype=np.int32), "ts_ns": rows["lo"], "dur_ns": rows["hi"] - rows["lo"],
            "min_ts_ns": rows["lo"], "max_end_ns": rows["hi"], "total_dur_ns": rows["busy"]}


def _coarser(level: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The next level: buckets ``FACTOR`` times wider, each the sum of the ones it holds (its row drawn over their
    extent, its id the first one's)."""
    bucket = level["bucket"] // FACTOR
    new = np.r_[True, (bucket[1:] != bucket[:-1]) | (level["track_id"][1:] != level["track_id"][:-1])]
    idx = np.flatnonzero(new)
    lo, hi = np.minimum.reduceat(level["lo"], idx), np.maximum.reduceat(level["hi"], idx)
    busy = np.add.reduceat(level["busy"], idx)
    return {"track_id": level["track_id"][idx], "bucket": bucket[idx], "busy": busy, "lo": lo, "hi": hi,
            "slice_count": np.add.reduceat(level["slice_count"], idx), "slice_id": level["slice_id"][idx],
            "depth": level["depth"][idx], "ts_ns": lo, "dur_ns": hi - lo, "min_ts_ns": lo, "max_end_ns": hi,
            "total_dur_ns": busy}


def is_overview(path: Path) -> bool:
    """A database written by :func:`write` (its ``meta`` says so)."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            return bool(con.execute("SELECT count(*) FROM meta WHERE key = 'overview'").fetchone()[0])
    except duckdb.Error:
        return False
