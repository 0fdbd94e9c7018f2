"""The first time window of a big rank's timeline, published as a database of its own while the rest ingests.

A shard of one big rank is published only when all of it is written, minutes for a trace of several GB. As soon
as the rank's slices are made (``{p}x``: after the read and the B/E pairing, before the nesting), the slices
starting in the rank's first ``PREVIEW_SLICES`` (by start) are nested on their own, beside the rank's nesting
(a thread of the stage's task, on a cursor of its own), and written with every track to
``<shard>.preview.duckdb``, with their level of detail. Their rows are the whole shard's:

* a slice's depth and parent depend only on the slices of its track that start before it (``ingest.nesting``),
  and those are all in the window;
* its final id is its place in the nesting's order (track, start, longer first, file order) over the whole rank:
  the slices of the tracks before its own, plus its place in its track, where the window's slices come first;
* they are written by the statement that writes the shard (``trace_write.write_slices``), with the id offsets
  the shard gets (its rank's fixed range, ``stages.rank_id_bases``).

The tracks' figures are the whole rank's, but for ``max_depth``: the deepest slice of the window (the rest is not
nested yet). A slice that straddles the window's end is there whole. The flows, counters and the other tables
follow with the shard itself.

The file is written under a temp name and renamed when complete; then a small JSON file beside the task's
progress file says where it is and which time range it holds (``loaded_ns``: [first start, window end), and the
rank's ``end_ns``). ``ingest.shards`` publishes it as the rank's shard, marked ``partial``, until the whole shard
is ready. A reader never sees a half-written preview: it sees none, or a complete one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import duckdb
import numpy as np

from . import lod, nesting
from .columns import arrow_table
from .layout import _sql_path
from .trace_write import write_slices

PREVIEW_MIN_SLICES = 2_000_000  # a rank with fewer slices is published whole soon enough
PREVIEW_SLICES = 200_000  # the window: about this many slices (500,000 cost a 1 GB trace 12 s of its 94 s, loaded)
ALIAS = "preview_db"

WINDOW = """
SELECT (SELECT count(*) FROM {p}x), (SELECT min(ts_ns) FROM {p}x),
       (SELECT ts_ns FROM {p}x ORDER BY ts_ns LIMIT 1 OFFSET ?), (SELECT max(ts_ns + dur_ns) FROM {p}x)
"""
# the window's slices in the nesting's order, each with the slices of the tracks before its own
WINDOW_ROWS = """
WITH before AS (SELECT local_track, coalesce(sum(count(*)) OVER (ORDER BY local_track ROWS BETWEEN UNBOUNDED PRECEDING
                                                                  AND 1 PRECEDING), 0) AS before
                FROM {p}x GROUP BY local_track)
SELECT x.seq, x.local_track, x.ts_ns, x.dur_ns, b.before
FROM {p}x x JOIN before b USING (local_track) WHERE x.ts_ns < ?
ORDER BY x.local_track, x.ts_ns, x.dur_ns DESC, x.seq
"""
WINDOW_TABLES = ("wnest", "woffsets")
# the tracks' figures of the whole rank (the slices are made, not nested yet), the depth the window's
TRACK_STATS = """
SELECT x.local_track, count(*) AS n, w.max_depth, max(x.dur_ns) AS max_dur, min(x.ts_ns) AS min_ts,
       max(x.ts_ns + x.dur_ns) AS max_end
FROM {p}x x LEFT JOIN (SELECT local_track, max(depth) AS max_depth FROM {p}wnest GROUP BY local_track) w
USING (local_track) GROUP BY x.local_track, w.max_depth
"""
TRACK_BASES = "SELECT rank, min(local_track) - 1 FROM {p}tracks GROUP BY rank"


def path_for(shard: Path) -> Path:
    return shard.with_name(shard.stem + ".preview.duckdb")


def note_for(progress_path: str | os.PathLike) -> Path:
    """The JSON file that announces a written preview, beside the task's progress file."""
    return Path(str(progress_path) + ".preview.json")


def read_note(progress_path: str | os.PathLike) -> dict | None:
    try:
        return json.loads(note_for(progress_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write(cur, prefix: str, derived_pid: int, shard: Path, note: Path, bases) -> dict | None:
    """Write the preview of the stage ``prefix`` of one rank (its slices made, ``{prefix}x``) beside ``shard`` and
    announce it in ``note``; None (nothing written) for a rank with fewer than ``PREVIEW_MIN_SLICES`` slices.
    ``bases(rank)``: the rank's id range (``stages.rank_id_bases``)."""
    started = time.perf_counter()
    n, first, until, end = cur.execute(WINDOW.format(p=prefix), [int(PREVIEW_SLICES)]).fetchone()
    if n < PREVIEW_MIN_SLICES or until is None:
        return None
    dst = path_for(shard)
    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        _nest_window(cur, prefix, int(until), bases)
        cur.execute(f"ATTACH '{_sql_path(tmp)}' AS {ALIAS}")
        try:
            for table in ("tracks", "slices"):
                cur.execute(f"CREATE TABLE {ALIAS}.{table} AS SELECT * FROM main.{table} LIMIT 0")
            write_slices(cur, prefix, derived_pid, into=f"{ALIAS}.", until_ns=until, nest="wnest",
                         offsets="woffsets", stats=TRACK_STATS)
        finally:
            cur.execute(f"DETACH {ALIAS}")
            for table in WINDOW_TABLES:
                cur.execute(f"DROP TABLE IF EXISTS {prefix}{table}")
        with duckdb.connect(str(tmp)) as con:
            lod.build(con)
            con.execute("CHECKPOINT")
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    info = {"file": dst.name, "loaded_ns": [int(first), int(until)], "end_ns": int(end), "rank_slices": int(n),
            "seconds": round(time.perf_counter() - started, 3)}  # what the preview cost the shard's task
    note_tmp = note.with_name(note.name + ".tmp")
    note_tmp.write_text(json.dumps(info), encoding="utf-8")
    os.replace(note_tmp, note)
    return info


def _nest_window(cur, prefix: str, until: int, bases) -> None:
    """``{prefix}wnest``: the slices starting before ``until``, nested, with their final local ids (see the module
    docstring); ``{prefix}woffsets``: the id offsets the shard's write will use."""
    rows = cur.execute(WINDOW_ROWS.format(p=prefix), [until]).fetchnumpy()
    nested = nesting.nest(rows["seq"], rows["local_track"], rows["ts_ns"], rows["dur_ns"], 1, presorted=True)
    track = nested.track
    starts = np.flatnonzero(np.r_[True, track[1:] != track[:-1]])  # each track's first row in the window
    place = np.arange(len(track)) - np.repeat(starts, np.diff(np.r_[starts, len(track)]))
    final = np.asarray(rows["before"], dtype=np.int64) + place + 1  # the window's row i: its final local id
    del rows
    parent = np.where(nested.parent > 0, final[np.maximum(nested.parent, 1) - 1], 0)
    cur.register("_window_rows", arrow_table({"local_id": final, "seq": nested.seq, "local_track": track,
                                              "ts_ns": nested.ts, "dur_ns": nested.dur, "depth": nested.depth,
                                              "parent_local": parent}))
    try:
        cur.execute(f"CREATE OR REPLACE TABLE {prefix}wnest AS SELECT * FROM _window_rows")
    finally:
        cur.unregister("_window_rows")
    cur.execute(f"CREATE OR REPLACE TABLE {prefix}woffsets (rank INTEGER, rank_id INTEGER, track_delta BIGINT, "
                "slice_delta BIGINT, flow_delta BIGINT)")
    for rank, track_base in cur.execute(TRACK_BASES.format(p=prefix)).fetchall():
        b = bases(int(rank))
        cur.execute(f"INSERT INTO {prefix}woffsets VALUES (?, ?, ?, ?, ?)",
                    [int(rank), int(rank), b.track - int(track_base), b.slice, b.slice])
