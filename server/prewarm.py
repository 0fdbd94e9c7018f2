"""A run's index files written right after its ingest, so that the first look at it is as quick as the ones after.

A server writes an index entry (a track's slices, one level of its level of detail, a counter track, a table of
flows: ``server.queries.track_index``) to a file the first time a page asks for it (``server.indexfiles``). Until
then each first request of a track is answered by a database query while the whole track is read in the
background, and under many users that first look at a run is several times slower than the next ones
(docs/benchmarks.md, issue #18: 8 ranks, 50 clients, p95 614 ms on the first look against 124 ms after).

:func:`prewarm` writes them all once the run is ready: the ingest worker calls it after it marked the run ready, in
its own process (the web processes' GIL is not shared) and 10 steps nicer, still holding the run's ingest lock.
Every entry is read by the same loaders, under the same key and with the same size rules as a request's (a track
too large for ``track_cache_mb`` keeps the database path), so a page finds exactly what it would have written.
Entries are what the run's tracks are whoever looks: the slices, the levels of detail of tracks with enough
slices to be drawn from them, the counter tracks, and the tables of flows of the scope a page gets when it names no
ranks. On a run of more than ``max_loaded_ranks`` ranks, only its first ``max_loaded_ranks`` (what a page opens
first) and no flows: the other ranks are written at their first look, as before, so that the worker's time and the
files stay bounded (a 1,000-rank run would otherwise get tens of thousands of small files, for ranks few people
open). Nothing depends on it: an error is logged and the server reads what it needs as before; a run changed
meanwhile (a new version of its database) is left alone, as its files would be under the old version.
"""

from __future__ import annotations

import os
import time

from ascendscope.server.api.deps import RunDb, file_id, index_files, open_run_db, scoped_version
from ascendscope.server.db import Databases
from ascendscope.server.queries import timeline, track_index
from ascendscope.server.querypool import QueryPool
from ascendscope.server.runs import RunStore
from ascendscope.server.settings import Settings

NICE = 10  # the index files are written beside the users' requests, not before them
# the ingest worker's threshold: a run with fewer slices gains nothing (its tracks are read in a few ms at their
# first look; the 1-rank run of 1.07 M slices answered the same cold, written ahead and warm: docs/benchmarks.md)
MIN_SLICES = 2_000_000
MIN_LOD_WIDTH_PX = 100  # a track drawn from its level of detail on a window this narrow has more slices than this


def prewarm(store: RunStore, run_id: str, settings: Settings, *, nice: int = NICE, min_slices: int = 0) -> dict:
    """Write the index files of every entry of the run (of its first ``max_loaded_ranks`` ranks on a wider run).
    Returns what was done: ``entries`` (written or found), ``skipped`` (too large for the budget), ``seconds``,
    ``ranks_left`` (a wider run's ranks not written ahead), or ``reason`` when nothing was (no index files, the
    run not ready, fewer slices than ``min_slices``, changed meanwhile)."""
    t0 = time.monotonic()
    if not settings.index_files or settings.track_cache_mb <= 0:
        return {"reason": "index files are off"}
    if nice:
        os.nice(nice)
    run = store.get(run_id)
    if run.status != "ready":
        return {"reason": f"the run is {run.status}"}
    path = store.db_path(run_id)
    version = file_id(path)
    if version is None:
        return {"reason": "the database cannot be read"}
    files = index_files(store, run_id, version)
    # the heavy slots' locks are the server's own (the data dir's; no view here takes one): nothing made in the temp
    # folder, where a worker killed meanwhile (its server stopped, the run deleted) would leave it behind
    pool = QueryPool(1, 0, lock_dir=store.data_dir, index_bytes=settings.track_cache_mb * 10**6)
    done = _prewarm(store, run, path, version, files, pool, settings, min_slices)
    done["seconds"] = round(time.monotonic() - t0, 2)
    return done


def _prewarm(store, run, path, version, files, pool, settings, min_slices: int) -> dict:
    databases = Databases(1, settings.max_loaded_ranks, threads=1)
    done = {"entries": 0, "skipped": 0}
    try:
        db = _open(run, store, databases, pool, settings, files, version, None)
        slices = sum(t.slice_count for t in db.info.tracks.values())
        if slices < min_slices:
            db.cur.close()
            return {**done, "reason": f"a small run ({slices:,} slices): its tracks are read in a few ms at their "
                                      f"first look"}
        ranks, whole = db.info.ranks, db.info.loaded_ranks is None or len(db.info.loaded_ranks) == len(db.info.ranks)
        if not whole:
            # a run of more ranks than a connection attaches: the first ``max_loaded_ranks`` of them, the ones a
            # page opens first (the others are written at their first look, as before), and no flows (their
            # tables are named by the ranks a page's scope attached)
            db.cur.close()
            if file_id(path) != version:
                return {**done, "reason": "the run changed meanwhile"}
            first = tuple(ranks[:max(1, settings.max_loaded_ranks)])
            db = _open(run, store, databases, pool, settings, files, version, first)
            done["ranks_left"] = len(ranks) - len(first)  # (a grouped shard may attach more: only these)
        try:
            if not files.writable:
                return {**done, "reason": "the index cannot be written"}
            _entries(db, done, flows=whole, ranks=None if whole else set(first))
        finally:
            db.cur.close()
    finally:
        databases.close_all()
    return done


def _open(run, store, databases, pool, settings, files, version, scope) -> RunDb:
    info, cur, conn = open_run_db(run, store, databases, scope, None, with_connection=True)
    return RunDb(run=run, cur=cur, info=info, settings=settings, pool=pool, file_id=scoped_version(version, info),
                 connection=conn, index_files=files)


def _fits(db: RunDb, size: int) -> bool:
    """The rule of ``RunDb.index_ready`` with files: an entry read whole must fit the budget."""
    return size <= db.pool.index_bytes


def _write(db: RunDb, done: dict, kind: str, params: tuple, item, size: int, read) -> None:
    if not _fits(db, size):
        done["skipped"] += 1
        return
    key = db.index_key(kind, params, item)
    if not db.index_files.has(key):
        db.index_files.save(key, read())
    done["entries"] += 1


def _entries(db: RunDb, done: dict, *, flows: bool, ranks: set[int] | None) -> None:
    loaded = set(db.info.loaded_ranks) if db.info.loaded_ranks is not None else None
    if ranks is not None:
        loaded = ranks if loaded is None else loaded & ranks
    points = None
    lod_rows = timeline.max_rows(MIN_LOD_WIDTH_PX)
    for t in sorted(db.info.tracks.values(), key=lambda t: (t.rank, t.track_id)):
        if loaded is not None and t.rank not in loaded:
            continue
        names = timeline.tables(db, t.rank)
        if t.kind == "counter":
            if points is None:
                points = track_index.counter_points(db)
            n = points.get(t.track_id, 0)
            if n:
                _write(db, done, "counter_samples", (), t.track_id, n * track_index.BYTES_PER_POINT,
                       lambda t=t, names=names: track_index.load_counter(db, t.track_id, names))
            continue
        if not t.slice_count:
            continue
        size = t.slice_count * track_index.BYTES_PER_SLICE
        _write(db, done, "track_slices", (), t.track_id, size,
               lambda t=t, names=names: track_index.load_slices(db, t.track_id, names))
        if t.slice_count > lod_rows:
            for level, _ in db.info.levels(t.rank):
                _write(db, done, "track_lod", (level,), t.track_id, size,
                       lambda t=t, level=level, names=names: track_index.load_lod(db, t.track_id, level, names))
    if flows:
        for table, names, count, _ in track_index.flow_sources(db, timeline.tables) or []:
            _write(db, done, "flows", (), table, count * track_index.BYTES_PER_FLOW,
                   lambda names=names: track_index.load_flows(db, names))
