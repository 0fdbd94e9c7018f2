"""Read-only access to finished run databases.

:class:`Databases` keeps one read-only DuckDB connection per run (least recently used ones are closed) and hands
out a cursor per request: DuckDB connections are thread-safe through ``.cursor()``, so concurrent requests of one
run share the open file. A connection is reopened when the file changes (a re-ingested run).

:func:`query` runs one statement with bound parameters under a deadline: a timer interrupts the cursor, which
turns into a ``query_timeout`` API error instead of a hung request.

:class:`RunInfo` caches what every timeline request needs from small tables (origin, tracks, LOD levels).

A sharded run (``ingest.shards``: its ``path`` is the run folder's ``cluster.duckdb``) opens as an in-memory
connection that attaches cluster.duckdb and the ready shards of a *scope* of ranks, read-only, with views under
the single-file table names (``layout.connect``), so every query works unchanged. A connection is kept per (run,
scope): up to ``max_loaded_ranks`` ranks the scope is the whole run; above it, the ranks a request asks for
(``ranks=17,18``, else its ``rank``), else the first rank — a timeline of rank 17 never opens rank 18's shard.
:class:`RunInfo` still lists every rank of the run (``ranks``) and says which are loaded (``loaded_ranks``).

A sharded run still ingesting is served too: its manifest says which shards are ready (``pending_ranks`` are
not, yet). Its version — what a connection and every cached answer are keyed by — is that of cluster.duckdb *and*
the manifest (:func:`version`): when a rank becomes ready both are replaced, so nothing cached before is served
after.

A file DuckDB cannot read (0 bytes, truncated, a failed checksum, not a run database) raises
:class:`DamagedDatabase` — when it is opened, when its run's tables are first read, or from :func:`query` — so
the caller can mark the run failed and answer 409 instead of 500. A missing file raises ``FileNotFoundError``.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ascendscope.ingest import layout
from ascendscope.ingest.layout import SLICE_ID_BITS, TRACK_ID_BITS
from ascendscope.server.deadlines import DEADLINES
from ascendscope.server.schema_check import check_schema

TRACKS_SQL = """
SELECT track_id, rank, pid, tid, process_name, thread_name, kind, label, process_sort_index, thread_sort_index,
       sort_index, counter_name, slice_count, max_depth, max_dur_ns, min_ts_ns, max_end_ns, derived
FROM tracks ORDER BY rank, sort_index, track_id
"""
RANGE_SQL = """
SELECT (SELECT min(start_ns) FROM ranks), (SELECT max(end_ns) FROM ranks),
       (SELECT min(min_ts_ns) FROM tracks), (SELECT max(max_end_ns) FROM tracks)
"""
LOD_LEVELS_SQL = "SELECT rank, level, bucket_ns FROM lod_levels ORDER BY rank, level"
MAX_LOADED_RANKS = 64  # a sharded run with more ranks loads only those a request asks for
MAX_RANKS_PER_REQUEST = 256  # ranks one ``ranks=`` parameter may name


class QueryTimeout(Exception):
    pass


class DamagedDatabase(Exception):
    """The run's database file cannot be read; the message says what DuckDB found."""


# what DuckDB says when the bytes of the file are wrong (short reads of a truncated file, failed checksums)
_DAMAGE_RE = re.compile(r"Could not read enough bytes|not a valid DuckDB database file|Corrupt database file")


def damage(exc: BaseException) -> DamagedDatabase | None:
    """The DamagedDatabase an error from DuckDB means, or None if it is not about the file itself."""
    if isinstance(exc, duckdb.Error) and _DAMAGE_RE.search(str(exc)):
        return DamagedDatabase(_first_line(exc))
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]


@dataclass
class Track:
    track_id: int
    rank: int
    kind: str
    max_dur_ns: int
    max_depth: int
    slice_count: int
    row: dict


@dataclass
class RunInfo:
    origin_ns: int  # every relative time in a timeline response is ``absolute - origin_ns``
    start_ns: int
    end_ns: int
    tracks: dict[int, Track]
    track_rows: list[dict]
    lod_levels: dict[int, list[tuple[int, int]]]  # rank -> its (level, bucket_ns), finest first
    ranks: list[int]  # every rank of the run, with or without a trace
    loaded_ranks: list[int] | None = None  # a sharded run: the ranks whose rows this connection reads
    pending_ranks: list[int] = dataclasses.field(default_factory=list)  # a run still ingesting: not ready yet
    failed_ranks: list[int] = dataclasses.field(default_factory=list)  # ranks whose shard failed
    shard_aliases: dict[int, str] = dataclasses.field(default_factory=dict)  # rank -> its attached shard's name
    # a pending rank read from its overview (ingest.overview): rank -> {"overview": True, "start_ns", "end_ns"};
    # its tracks and its lanes' busy time (slice_lod) are there, its slices and other rows still coming
    partial: dict[int, dict] = dataclasses.field(default_factory=dict)

    def levels(self, rank: int) -> list[tuple[int, int]]:
        """The level-of-detail levels of ``rank``'s slices (each shard has its own widths)."""
        return self.lod_levels.get(rank, [])

    @classmethod
    def load(cls, cur: duckdb.DuckDBPyConnection, loaded_ranks: list[int] | None = None,
             manifest: dict | None = None) -> RunInfo:
        cols = [d[0] for d in cur.execute(TRACKS_SQL).description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        tracks = {
            r["track_id"]: Track(r["track_id"], r["rank"], r["kind"], int(r["max_dur_ns"] or 0),
                                 int(r["max_depth"] or 0), int(r["slice_count"] or 0), r)
            for r in rows
        }
        r_start, r_end, t_start, t_end = cur.execute(RANGE_SQL).fetchone()
        partial = layout.partial_ranks(manifest) if manifest is not None else {}
        starts = [v for v in (r_start, t_start) if v is not None]
        ends = [v for v in (r_end, t_end) if v is not None] + [p["end_ns"] for p in partial.values()]
        start = min(starts) if starts else 0
        end = max(ends) if ends else start
        levels: dict[int, list[tuple[int, int]]] = {}
        for rank, lv, b in cur.execute(LOD_LEVELS_SQL).fetchall():
            levels.setdefault(int(rank), []).append((int(lv), int(b)))
        ranks = [int(r) for (r,) in cur.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
        states = layout.manifest_ranks(manifest) if manifest is not None else {}
        return cls(origin_ns=int(start), start_ns=int(start), end_ns=int(max(end, start)), tracks=tracks,
                   track_rows=rows, lod_levels=levels, ranks=ranks, loaded_ranks=loaded_ranks,
                   pending_ranks=states.get("pending", []), failed_ranks=states.get("failed", []),
                   shard_aliases=layout.shard_aliases(manifest) if manifest is not None else {},
                   partial={r: p for r, p in partial.items() if loaded_ranks is None or r in loaded_ranks})


def parse_ranks(text: str | None) -> tuple[int, ...] | None:
    """``"17,18"`` → (17, 18); None/empty → None. Raises ValueError for anything else."""
    if text is None or not text.strip():
        return None
    ranks = sorted({int(part) for part in text.split(",") if part.strip()})
    if len(ranks) > MAX_RANKS_PER_REQUEST:
        raise ValueError(f"at most {MAX_RANKS_PER_REQUEST} ranks per request")
    if any(r < 0 or r > layout.MAX_SHARD_RANK for r in ranks):
        raise ValueError("ranks must be between 0 and " + str(layout.MAX_SHARD_RANK))
    return tuple(ranks)


def request_scope(query, path_params=None) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(``ranks`` asked for, ranks the request is about) from a request's parameters, for
    :meth:`Databases.scope`. A request is about the ranks of its ``rank``, of its ``track_id`` values and of its
    ``slice_id`` (a shard's ids carry their rank: ``track_id >> 16``, ``slice_id >> 36``). Raises ValueError for
    a ``ranks`` that is not a comma-separated list of ranks; other malformed values are left to the handler."""
    try:
        ranks = parse_ranks(query.get("ranks"))
    except ValueError as exc:
        raise ValueError(f"ranks must be comma-separated rank numbers ({exc})") from None
    about: set[int] = set()
    values = [("rank", query.get("rank"), 0), ("slice_id", (path_params or {}).get("slice_id"), SLICE_ID_BITS)]
    values += [("track_id", v, TRACK_ID_BITS) for v in (query.getlist("track_id") if hasattr(query, "getlist")
                                                         else [query.get("track_id")])]
    for _, value, bits in values:
        try:
            number = int(value)
        except (TypeError, ValueError):
            continue
        if number >= 0:
            about.add(number >> bits)
    return ranks, tuple(sorted(about)) or None


def is_sharded(path: Path) -> bool:
    """A run database path naming a sharded run's cluster.duckdb (see ``RunStore.db_path``)."""
    return path.name == layout.CLUSTER_DB


def version(path: Path) -> tuple:
    """The version of a run database as far as connections and cached answers go: (inode, size, mtime) of the
    file, and of a sharded run's manifest too (rewritten when a shard becomes ready). Raises OSError."""
    st = path.stat()
    own = (st.st_ino, st.st_size, st.st_mtime_ns)
    if not is_sharded(path):
        return own
    mt = (path.parent / layout.MANIFEST).stat()
    return own + (mt.st_ino, mt.st_size, mt.st_mtime_ns)


def _manifest(path: Path) -> dict:
    try:
        return layout.read_manifest(path.parent)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise DamagedDatabase(f"manifest.json cannot be read: {exc}") from exc


def scope(ready: list[int], asked: tuple[int, ...] | None, about: tuple[int, ...] | None,
          limit: int) -> tuple[int, ...] | None:
    """The ranks to load for a request on a sharded run whose ready shards are ``ready`` (None: all of them):
    those it asks for; else, with more ranks than ``limit``, those it is about, else the first."""
    known = set(ready)
    wanted = tuple(r for r in asked or () if r in known)
    if wanted:
        return wanted
    if len(ready) <= limit:
        return None
    return tuple(r for r in about or () if r in known)[:limit] or tuple(ready[:1])


class _Entry:
    def __init__(self, path: Path, mtime_ns: tuple, ranks: tuple[int, ...] | None = None, threads: int | None = None):
        self.path, self.mtime_ns = path, mtime_ns
        self.loaded_ranks: list[int] | None = None
        self.manifest: dict | None = None
        try:
            if is_sharded(path):
                self.manifest = manifest = _manifest(path)  # first: the cluster tables are at least as new
                self.conn, self.loaded_ranks = layout.connect(path.parent, None if ranks is None else list(ranks),
                                                              manifest=manifest)
            else:
                self.conn = duckdb.connect(str(path), read_only=True)
            if threads:  # several server processes share the cores: no DuckDB threads beyond each one's share
                self.conn.execute(f"SET threads = {int(threads)}")
        except duckdb.Error as exc:
            if isinstance(exc, duckdb.IOException) and "No such file" in str(exc):
                raise FileNotFoundError(_first_line(exc)) from exc
            raise DamagedDatabase(_first_line(exc)) from exc
        check_schema(self.conn)  # another schema version's file would answer wrongly: server.schema_check
        self.info: RunInfo | None = None
        self.info_lock = threading.Lock()

    def close(self) -> None:
        try:
            self.conn.close()
        except duckdb.Error:
            pass


class Databases:
    """Cache of read-only connections, keyed by run id and scope (the ranks a sharded run's connection loads)."""

    def __init__(self, max_open: int = 16, max_loaded_ranks: int = MAX_LOADED_RANKS, threads: int | None = None):
        self.max_open, self.threads = max_open, threads
        self.max_loaded_ranks = max_loaded_ranks
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._ready: dict[Path, tuple[tuple, list[int]]] = {}  # cluster.duckdb → (its version, ready ranks)
        self._lock = threading.Lock()

    def scope(self, path: Path, ranks: tuple[int, ...] | None = None, about: tuple[int, ...] | None = None
              ) -> tuple[int, ...] | None:
        """The scope a request asking for ``ranks`` (or about the ranks ``about``) gets on the run at ``path``
        (None: the whole run, or not a sharded run)."""
        if not is_sharded(path):
            return None
        mtime_ns = version(path)
        with self._lock:
            known = self._ready.get(path)
        if known is None or known[0] != mtime_ns:
            ready = sorted(layout.ready_shards(_manifest(path)))
            known = (mtime_ns, ready)
            with self._lock:
                self._ready[path] = known
        return scope(known[1], ranks, about, self.max_loaded_ranks)

    def _entry(self, run_id: str, path: Path, ranks: tuple[int, ...] | None = None) -> _Entry:
        if ranks is None and is_sharded(path):
            ranks = self.scope(path)
        mtime_ns = version(path)
        key = (run_id, ranks)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and (entry.path != path or entry.mtime_ns != mtime_ns):
                # closing would break cursors still in use by other requests; they keep the old file alive
                self._entries.pop(key)
                entry = None
            if entry is None:
                entry = _Entry(path, mtime_ns, ranks, self.threads)
                self._entries[key] = entry
                while len(self._entries) > self.max_open:
                    self._entries.popitem(last=False)
            self._entries.move_to_end(key)
            return entry

    def open_already(self, run_id: str, path: Path, ranks: tuple[int, ...] | None,
                     about: tuple[int, ...] | None) -> tuple[RunInfo, duckdb.DuckDBPyConnection,
                                                             duckdb.DuckDBPyConnection] | None:
        """(info, a new cursor, the connection it came from) when the connection this request needs is open,
        current and has its info loaded: a few ``stat`` calls, nothing that can wait on the disk or on DuckDB, so
        it may run on the event loop. None when something must be opened, read or checked first (then
        :meth:`scope`, :meth:`info` and :meth:`cursor`, on a thread)."""
        try:
            mtime_ns = version(path)
        except OSError:
            return None
        with self._lock:
            if is_sharded(path):
                known = self._ready.get(path)
                if known is None or known[0] != mtime_ns:
                    return None
                ranks = scope(known[1], ranks, about, self.max_loaded_ranks)
            else:
                ranks = None
            entry = self._entries.get((run_id, ranks))
            if entry is None or entry.path != path or entry.mtime_ns != mtime_ns or entry.info is None:
                return None
            self._entries.move_to_end((run_id, ranks))
        return entry.info, entry.conn.cursor(), entry.conn

    def cursor(self, run_id: str, path: Path, ranks: tuple[int, ...] | None = None) -> duckdb.DuckDBPyConnection:
        return self._entry(run_id, path, ranks).conn.cursor()

    def connection(self, run_id: str, path: Path, ranks: tuple[int, ...] | None = None
                   ) -> duckdb.DuckDBPyConnection:
        """The connection cursors come from (a cursor made from another cursor is closed with it)."""
        return self._entry(run_id, path, ranks).conn

    def info(self, run_id: str, path: Path, ranks: tuple[int, ...] | None = None) -> RunInfo:
        """``ranks``: the scope (see :meth:`scope`); None loads the whole run, or its default scope when a
        sharded run has more than ``max_loaded_ranks`` ranks."""
        entry = self._entry(run_id, path, ranks)
        if entry.info is None:
            with entry.info_lock:
                if entry.info is None:
                    cur = entry.conn.cursor()
                    try:
                        entry.info = RunInfo.load(cur, entry.loaded_ranks, entry.manifest)
                    except duckdb.Error as exc:  # unreadable pages, or not a run database at all
                        self.forget(run_id)
                        raise DamagedDatabase(_first_line(exc)) from exc
                    finally:
                        cur.close()
        return entry.info

    def forget(self, run_id: str) -> None:
        """Drop the run's connection from the cache (re-ingested or deleted). It is not closed: a request may be
        using a cursor of it right now; it closes when the last one is gone."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == run_id]:
                self._entries.pop(key)
            for path in [p for p in self._ready if p.parent.name == run_id]:
                self._ready.pop(path)

    def close_all(self) -> None:
        with self._lock:
            entries, self._entries = list(self._entries.values()), OrderedDict()
        for entry in entries:
            entry.close()


def query(cur: duckdb.DuckDBPyConnection, sql: str, params: list | tuple | dict = (), *, timeout_s: float = 10.0,
          fetch: str = "all", cancel=None):
    """Run ``sql`` with bound ``params`` and fetch its result under a deadline of ``timeout_s``.

    ``fetch``: ``"all"`` (list of tuples), ``"one"`` (a tuple or None), ``"columns"`` (dict of column name to
    list, the shape the timeline answers in) or ``"arrays"`` (dict of column name to numpy array, for large
    answers serialised by ``FastJSONResponse`` without a Python list). Raises :class:`QueryTimeout`, or
    :class:`DamagedDatabase` when the file cannot be read. ``cancel`` (a ``server.requestclock.CancelToken``)
    interrupts the query when the request's client goes away: then it raises ``ClientGone``.
    """
    if cancel is not None:
        cancel.check()
    unwatch = cancel.watch(cur.interrupt) if cancel is not None else None
    stop = DEADLINES.call_later(timeout_s, cur.interrupt)
    try:
        cur.execute(sql, params if isinstance(params, dict) else list(params))
        if fetch == "one":
            return cur.fetchone()
        if fetch in ("columns", "arrays"):
            names = [d[0] for d in cur.description]
            arrays = cur.fetchnumpy()
            if fetch == "arrays":
                return {n: _plain(arrays[n]) for n in names}
            return {n: _tolist(arrays[n]) for n in names}
        return cur.fetchall()
    except duckdb.InterruptException as exc:
        if cancel is not None:
            cancel.check()  # the client went away: ClientGone, not a timeout
        raise QueryTimeout(f"query took longer than {timeout_s:g} s") from exc
    except duckdb.Error as exc:
        damaged = damage(exc)
        if damaged is None:
            raise
        raise damaged from exc
    finally:
        stop()
        if unwatch is not None:
            unwatch()


def _plain(array):
    """A masked numpy column (NULLs) becomes a list; a complete one stays an array."""
    mask = getattr(array, "mask", None)
    if mask is not None and mask is not False and getattr(mask, "any", lambda: False)():
        return _tolist(array)
    return array.data if mask is not None else array


def _tolist(array) -> list:
    """numpy column -> JSON-ready list (masked values and NaN become None)."""
    mask = getattr(array, "mask", None)
    values = array.tolist() if mask is None else array.filled(0).tolist()
    if mask is not None and mask is not False and getattr(mask, "any", lambda: False)():
        values = [None if m else v for v, m in zip(values, mask.tolist())]
    if array.dtype.kind == "f":
        values = [None if (v is not None and v != v) else v for v in values]
    return values
