"""The first time window of a big rank's timeline, published as a database of its own while the rest ingests.

A shard of one big rank is published only when all of it is written, minutes for a trace of several GB. Once the
rank's slices are nested (their depth, parent and ids are final, see ``ingest.trace``), the slices starting in the
rank's first ``PREVIEW_SLICES`` (by start) are written, with every track, to ``<shard>.preview.duckdb``, with
their level of detail: the rows are those the whole shard will hold, written by the same statement
(``trace_write.write_slices`` with a time limit), so a slice that straddles the window's end is there whole, and
its depth and parent are the final ones (a slice's depth depends only on the slices that start before it). The
flows, counters and the other tables follow with the shard itself.

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

from . import lod
from .layout import _sql_path
from .trace_write import write_slices

PREVIEW_MIN_SLICES = 2_000_000  # a rank with fewer slices is published whole soon enough
PREVIEW_SLICES = 200_000  # the window: about this many slices (500,000 cost a 1 GB trace 12 s of its 94 s, loaded)
ALIAS = "preview_db"

WINDOW = """
SELECT (SELECT count(*) FROM {p}nest), (SELECT min(ts_ns) FROM {p}nest),
       (SELECT ts_ns FROM {p}nest ORDER BY ts_ns LIMIT 1 OFFSET ?), (SELECT max(ts_ns + dur_ns) FROM {p}nest)
"""


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


def write(cur, prefix: str, derived_pid: int, shard: Path, note: Path) -> dict | None:
    """Write the preview of the stage ``prefix`` (nested, its offsets written) beside ``shard`` and announce it
    in ``note``; None (nothing written) for a rank with fewer than ``PREVIEW_MIN_SLICES`` slices."""
    started = time.perf_counter()
    n, first, until, end = cur.execute(WINDOW.format(p=prefix), [int(PREVIEW_SLICES)]).fetchone()
    if n < PREVIEW_MIN_SLICES or until is None:
        return None
    dst = path_for(shard)
    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        cur.execute(f"ATTACH '{_sql_path(tmp)}' AS {ALIAS}")
        try:
            for table in ("tracks", "slices"):
                cur.execute(f"CREATE TABLE {ALIAS}.{table} AS SELECT * FROM main.{table} LIMIT 0")
            write_slices(cur, prefix, derived_pid, into=f"{ALIAS}.", until_ns=until)
        finally:
            cur.execute(f"DETACH {ALIAS}")
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
