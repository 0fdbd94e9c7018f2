"""Read one trace_view.json (or several, for a group of ranks) into the staging table ``{prefix}ev_t``.

The trace is read by DuckDB's ``read_json`` straight into typed columns (``ts`` as text, converted exactly to ns by
``us_to_ns``), so memory stays bounded whatever the file size. What cannot be read as it is gets repaired
(``ingest.tracefile``: a truncated file salvaged, a damaged or huge event skipped, bad UTF-8 replaced) and each
repair becomes a warning naming the byte offset in the original file. ``ingest.trace.TraceLoad`` derives the rest.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import duckdb

from . import jsonfile, tracefile, tracesplit
from .trace_sql import SLICES_COUNTED, kinds_literal

# ts (µs text with ns decimals) is parsed by the reader straight into DECIMAL(19, 3), exact and cheaper than
# keeping the text; dur is small enough for a double to round to the exact ns. pid/tid are read as BIGINT
# (torch_npu and msprof write numbers). A trace where any of these does not convert (string pids or tids from
# other producers, a ts that is not a number) fails the fast read and is read again with pid, tid and ts as
# text, converted value by value (a ts that is not a number then becomes NULL and is reported). A dur that is
# not a number, or NaN, infinite or beyond the int64 range of ns, fails the fast read's strict cast too; the
# text read then marks its X event ``bad_dur`` and gives it no ts, so it is skipped (and reported) like an
# event without a usable ts.
EVENT_COLUMNS = ("{{ph: 'VARCHAR', name: 'VARCHAR', cat: 'VARCHAR', pid: 'BIGINT', tid: 'BIGINT', "
                 "ts: 'DECIMAL(19, 3)', dur: 'DOUBLE', id: 'VARCHAR', bp: 'VARCHAR', args: 'JSON'}}")

# a row's place in the file is its rowid (see EV_VIEW): cheaper than numbering the rows with a window
READ_EVENTS = f"""
CREATE OR REPLACE TABLE {{p}}ev_t AS
SELECT ph, name, cat, pid, tid, NULL::VARCHAR AS tid_text,
       TRY_CAST(ts * 1000 AS BIGINT) AS ts_ns, CAST(round(dur * 1000) AS BIGINT) AS dur_ns, id AS flow_key, bp,
       args, false AS bad_dur, {{rank}} AS rank
FROM read_json(?, format = 'array', columns = {EVENT_COLUMNS}{{many}})
"""

READ_EVENTS_TEXT_IDS = f"""
CREATE OR REPLACE TABLE {{p}}ev_t AS
SELECT ph, name, cat, pid, tid, tid_text, CASE WHEN NOT bad_dur THEN ts_ns END AS ts_ns, dur_ns, flow_key, bp,
       args, bad_dur, {{rank}} AS rank
FROM (SELECT *, coalesce(ph = 'X' AND dur IS NOT NULL AND dur_ns IS NULL, false) AS bad_dur
      FROM (SELECT ph, name, cat,
                   coalesce(TRY_CAST(pid AS BIGINT), -1 - CAST(hash(pid) % 2147483647 AS BIGINT)) AS pid,
                   coalesce(TRY_CAST(tid AS BIGINT), -1 - CAST(hash(tid) % 2147483647 AS BIGINT)) AS tid,
                   CASE WHEN json_type(tid) = 'VARCHAR' THEN tid->>'$' END AS tid_text,
                   us_to_ns(ts) AS ts_ns, dur, TRY_CAST(round(TRY_CAST(dur AS DOUBLE) * 1000) AS BIGINT) AS dur_ns,
                   id AS flow_key, bp, args{{filename}}
            FROM read_json(?, format = 'array',
                           columns = {EVENT_COLUMNS.replace("pid: 'BIGINT', tid: 'BIGINT'", "pid: 'JSON', tid: 'JSON'")
                                                   .replace("ts: 'DECIMAL(19, 3)'", "ts: 'VARCHAR'")
                                                   .replace("dur: 'DOUBLE'", "dur: 'VARCHAR'")}{{many}})))
"""

# a multi-file read: the rank of each event's file (the ranks, the files, then read_json's files are bound)
RANK_OF_FILE = "CAST(list_extract(?::INTEGER[], list_position(?::VARCHAR[], filename)) AS INTEGER)"

# a time is usable within ±2^62 ns (146 years around the epoch), so that the interval between any two fits in
# an int64 (a B/E pair's dur is E - B); beyond, it is skipped like a ts that is not a number
TS_LIMIT = 1 << 62
UNUSABLE_TS = f"UPDATE {{p}}ev_t SET ts_ns = NULL WHERE ts_ns <= -{TS_LIMIT} OR ts_ns >= {TS_LIMIT}"
# a negative time is before 1970: no profiler writes one (times are epoch ns, or a device clock counting up from
# boot); one such event would stretch the run over decades, so it is skipped like an unusable ts
NEGATIVE_TS = ["CREATE OR REPLACE TABLE {p}neg AS SELECT coalesce(rank, ?) AS rank, rowid AS seq FROM {p}ev_t "
               "WHERE ts_ns < 0",
               "UPDATE {p}ev_t SET ts_ns = NULL WHERE ts_ns < 0"]
NEGATIVE_TS_COUNT = "SELECT rank, count(*), min(seq) FROM {p}neg GROUP BY rank"
# an X event ending past the int64 range of ns cannot be placed on the timeline: skipped like a bad dur
MARK_OVERFLOWING_ENDS = """
UPDATE {p}ev_t SET bad_dur = true, ts_ns = NULL
WHERE ph = 'X' AND ts_ns > 0 AND dur_ns > 9223372036854775807 - ts_ns
"""
INT64_MAX = (1 << 63) - 1

# events in file order (the table is written in read order, so rowid = place in the file); derived rows are
# appended to {p}ev_t after them
EV_VIEW = "CREATE OR REPLACE VIEW {p}ev AS SELECT rowid AS seq, * FROM {p}ev_t"

# args nested deeper than this are not kept (profilers write 2-3 levels): a recursive JSON parser or encoder in a
# view would fail on them. Candidates: at least this many openers ('[' or '{', counted by two single-character
# replaces: cheap on every event), then a chain of this many openers (a regular expression, on those only, in a
# CASE so that it runs after the count); the depth itself is then measured exactly. Both tests are necessary
# conditions of the depth, so no deep value is missed whatever its spacing
MAX_ARGS_DEPTH = 64
_ARGS_TEXT = "CAST(args AS VARCHAR)"
DEEP_ARGS_CANDIDATES = (
    f"SELECT rowid, {_ARGS_TEXT} FROM {{p}}ev_t WHERE CASE WHEN strlen({_ARGS_TEXT}) > {2 * MAX_ARGS_DEPTH} "
    f"AND strlen({_ARGS_TEXT}) - strlen(replace(replace({_ARGS_TEXT}, '[', ''), '{{{{', '')) >= {MAX_ARGS_DEPTH} "
    f"THEN regexp_matches(args, '([\\[{{{{][^\\]}}}}]*){{{{{MAX_ARGS_DEPTH}}}}}') ELSE false END")
DEEP_ARGS_NOTE = f'{{"args": "not loaded: nested deeper than {MAX_ARGS_DEPTH} levels"}}'
# DuckDB's JSON reader holds one object in a buffer of maximum_object_size (16 MiB by default): a larger event is
# cut out (an event of torch_npu or msprof is a few hundred bytes; one of MBs is damage or an attack)
MAX_EVENT_BYTES = (16 << 20) - (64 << 10)
_RECORD_AT = re.compile(r"in record/value (\d+)")
_DUPLICATE_KEY = re.compile(r'has duplicate key "([^"]*)"')


class TraceRead:
    """Reads one trace (of rank ``rank``) into ``{prefix}ev_t``; ``warnings`` collects what was not loaded as-is.
    ``ingest.trace.TraceLoad`` adds the derivations."""

    READ_SHARE = 0.6  # of a trace's load time, roughly, goes to reading the JSON; the rest to derivations
    UNDERSTOOD_KEYS = frozenset({"displayTimeUnit"})  # top-level keys beside traceEvents that are used
    EXTRA_KINDS = ""  # more "WHEN <condition> THEN '<kind>'" rules for lanes no Ascend process name matches
    # derive() drops the events once it has made all it needs of them, for a reader that reads nothing of them
    # after it (its memory goes to the nesting and the writes)
    DROP_EVENTS = False

    def __init__(self, cur: duckdb.DuckDBPyConnection, prefix: str, path: Path, workdir: Path, display: str,
                 on_progress=None, on_nested=None, split_read: bool = False, rank: int = 0, on_sliced=None):
        """``split_read``: read a big file as byte ranges in parallel (worth it when a core would idle).
        ``on_sliced(cursor, prefix)``: run beside the rest of the derivations once the slices are made
        (``ingest.overview``)."""
        self.cur, self.p, self.path, self.workdir, self.display = cur, prefix, path, workdir, display
        self.rank = int(rank)
        self.warnings: list[str] = []
        self.notes: dict[int, list[str]] = {}  # derive()'s findings about the other ranks of the stage
        self.status = "loaded"
        self.on_progress = on_progress or (lambda fraction: None)
        self.on_nested = on_nested or (lambda: None)  # tracks and slices are final from here on
        self.split_read = split_read
        self.on_sliced = on_sliced
        self.array_start: int | None = None  # where the original file's event array begins, once read()
        self.skipped: list[int] = []  # original indices of the events removed from the file DuckDB reads
        self.extra: dict = {}  # the top-level keys beside traceEvents, once read()
        self.locate = None  # (rank, seq) -> " (the first at byte N)", for a stage of several traces
        self.negative: dict[int, tuple[int, int]] = {}  # rank -> events with a ts before 1970, the first's seq
        self.events: dict[int, int] = {}  # rank -> its events, as derive() counted them
        self.slices_at_read: tuple[int, int] | None = None  # (slices, events) when the read was done (_read_done)
        # the deep args are bounded when the read is done (a rank with an overview to make: the lanes' name events
        # only, the rest by derive() after the overview): "", "names" or "all", and the events' seqs so far
        self._args_bounded = ""
        self._deep_args: list[int] = []

    def _read_with_progress(self, path: Path | list[Path], ranks: list[int] | None = None) -> None:
        try:
            self._read_query(READ_EVENTS, path, ranks)
        except duckdb.Error as exc:
            if not any(k in str(exc) for k in ("JSON transform error", "Failed to cast", "Conversion Error")):
                raise
            self._read_query(READ_EVENTS_TEXT_IDS, path, ranks)  # string pids/tids or a bad ts: read them as text

    def _read_query(self, template: str, path: Path | list[Path], ranks: list[int] | None = None) -> None:
        """One read query, reporting DuckDB's own progress of the scan (polled from a helper thread). ``ranks``:
        ``path`` is a list of traces of those ranks (one each); else every event is of ``self.rank``."""
        done = threading.Event()
        self.cur.execute("SET enable_progress_bar = true")
        self.cur.execute("SET enable_progress_bar_print = false")

        def poll():
            while not done.wait(0.25):
                pct = self.cur.query_progress()
                if pct >= 0:
                    self.on_progress(self.READ_SHARE * min(pct, 100.0) / 100)

        poller = threading.Thread(target=poll, name="trace-progress", daemon=True)
        poller.start()
        files = [str(p) for p in path] if isinstance(path, list) else str(path)
        try:
            if ranks is None:
                self.sql(template, [files], rank=str(self.rank), many="", filename="")
            else:
                self.sql(template, [list(ranks), files, files], rank=RANK_OF_FILE, many=", filename = true",
                         filename=", filename")
        finally:
            done.set()
            poller.join()
            self.cur.execute("SET enable_progress_bar = false")

    def sql(self, template: str, params=None, **names):
        sql = template.format(p=self.p, kinds=kinds_literal(), extra_kinds=self.EXTRA_KINDS.format(p=self.p), **names)
        return self.cur.execute(sql, params or [])

    def read(self) -> None:
        """Read the events, repairing what can be repaired; raises TraceFileError when nothing is usable."""
        try:
            prepared = tracefile.prepare(self.path, self.workdir, understood=self.UNDERSTOOD_KEYS)
        except tracefile.TraceFileError as exc:
            if "truncated" not in str(exc):
                raise
            self.warnings.append(f"{exc}; loaded the complete events before it")
            self.status = "partial"
            source = self.path
            if self.path.name.endswith(".gz"):
                source = self.workdir / (self.path.name + ".plain")
                tracefile._decompress(self.path, source)
            with open(source, "rb") as fh:
                start = fh.read(1 << 16).find(b"[")
            prepared = tracefile.PreparedTrace(path=tracefile.salvage(source, self.workdir)[0],
                                               array_start=max(start, 0))
        self.warnings.extend(prepared.notes)
        self.array_start = prepared.array_start
        self.extra = prepared.extra
        path = prepared.path
        if self.split_read and self.status == "loaded" and self._read_parts(path):
            return
        for _attempt in range(12):
            try:
                self._read_with_progress(path)
                self._read_done()
                return
            except duckdb.Error as exc:
                msg = _clean_duckdb_message(str(exc), path, self.display)
                if "UTF-8" in msg or "unicode" in msg.lower():
                    prepared = tracefile.prepare(self.path, self.workdir, fix_utf8=True,
                                                 understood=self.UNDERSTOOD_KEYS)
                    self.warnings.extend(n for n in prepared.notes if "UTF-8" in n)
                    self.status = "partial" if self.status == "partial" else "loaded"
                    path = prepared.path
                    self.skipped = []  # prepared afresh from the original
                    continue
                if "maximum_object_size" in msg:  # one event larger than the reader holds: that event goes
                    path, big = tracefile.drop_large_events(path, self.workdir, MAX_EVENT_BYTES)
                    if not big:
                        raise tracefile.TraceFileError(msg.splitlines()[0]) from exc
                    originals = [(self._original_index(i), size) for i, size in big]
                    for original, size in originals:
                        self.skipped.append(original)
                        limit_mb = MAX_EVENT_BYTES / (1 << 20)
                        self.warnings.append(f"an event of {size / (1 << 20):.1f} MB {self._where(original)} was "
                                             f"skipped: one event may take at most {limit_mb:.0f} MB (a huge string "
                                             "in its args?); the events around it were loaded")
                    self.status = "partial"
                    continue
                m = _RECORD_AT.search(msg)
                dup = _DUPLICATE_KEY.search(msg)
                if m and (dup or "Malformed JSON" in msg or "malformed" in msg.lower()):
                    # DuckDB counts records from 1, and a malformed one from one ahead of its element
                    record = int(m.group(1)) - (0 if dup else 1)
                    try:
                        path, _cut = tracefile.skip_record(path, self.workdir, record)
                    except tracefile.TraceFileError:
                        raise tracefile.TraceFileError(msg) from exc
                    original = self._original_index(record - 1)
                    self.skipped.append(original)
                    where = self._where(original)
                    if dup:
                        self.warnings.append(f"an event with a duplicated key \"{dup.group(1)}\" {where} was "
                                             "skipped; the events around it were loaded")
                    else:
                        reason = msg.splitlines()[0].partition(m.group(0))[2].strip(" :.") or "malformed"
                        self.warnings.append(f"invalid JSON ({reason}): the damaged event {where} was skipped; "
                                             "the events around it were loaded")
                    self.status = "partial"
                    continue
                raise tracefile.TraceFileError(msg.splitlines()[0]) from exc
        raise tracefile.TraceFileError("could not repair the file")

    def _read_done(self) -> None:
        """The events are read: number them, and skip the times out of range and the X events that would end
        past the int64 range (one cheap pass finds whether there are any)."""
        self.sql(EV_VIEW)
        lo, hi, x_hi, dur_hi, slices, rows = self.sql(
            "SELECT min(ts_ns), max(ts_ns), max(ts_ns) FILTER (WHERE ph = 'X'), max(dur_ns) FILTER (WHERE ph = 'X'), "
            f"{SLICES_COUNTED}, count(*) FROM {{p}}ev_t").fetchone()
        # the slices the events make, counted in the same pass (derive() needs it: each pass over the events of a
        # 10 GB trace costs ~1 s); it holds while no time is skipped below and no event is added
        self.slices_at_read = (int(slices), int(rows))
        if lo is not None and lo < 0:  # before 1970: a run would span decades; skipped, counted apart
            self.sql(NEGATIVE_TS[0], [self.rank])
            self.sql(NEGATIVE_TS[1])
            self.negative = {int(r): (int(n), int(first)) for r, n, first in self.sql(NEGATIVE_TS_COUNT).fetchall()}
            self.slices_at_read = None
        if lo is not None and (lo <= -TS_LIMIT or hi >= TS_LIMIT):
            self.sql(UNUSABLE_TS)
            self.slices_at_read = None
        if x_hi is not None and dur_hi is not None and x_hi + dur_hi > INT64_MAX:
            self.sql(MARK_OVERFLOWING_ENDS)
            self.slices_at_read = None
        # (a rank with an overview to make: only the lanes' name events now, the rest after the overview, which
        # reads nothing else of the args)
        self.bound_args_depth(names_only=self.on_sliced is not None)
        self.on_progress(self.READ_SHARE)

    def bound_args_depth(self, names_only: bool = False) -> None:
        """Replace the args of events nested deeper than MAX_ARGS_DEPTH (a parser or encoder recursing through
        them would fail later, when a view shows the slice) with a note; warn with the first one's offset. The
        regular expression only finds candidates (a chain of openers); the depth itself is measured exactly.
        ``names_only``: only the metadata events (``M``) now, the others at the next call, which warns for both;
        later calls do nothing."""
        if self._args_bounded == "all":
            return
        which = " AND ph = 'M'" if names_only else " AND ph IS DISTINCT FROM 'M'" if self._args_bounded else ""
        self._args_bounded = "names" if names_only else "all"
        rows = self.sql(DEEP_ARGS_CANDIDATES + which).fetchall()
        deep = [seq for seq, args in rows if jsonfile.max_depth(args) > MAX_ARGS_DEPTH]
        if deep:
            self.cur.execute(f"UPDATE {self.p}ev_t SET args = ? WHERE rowid IN (SELECT unnest(?))",
                             [DEEP_ARGS_NOTE, deep])
        self._deep_args += deep
        if names_only or not self._deep_args:
            return
        for rank, count, first in self.cur.execute(
                f"SELECT coalesce(rank, ?), count(*), min(rowid) FROM {self.p}ev_t WHERE rowid IN (SELECT unnest(?)) "
                "GROUP BY 1 ORDER BY 1", [self.rank, self._deep_args]).fetchall():
            self.note(int(rank), f"{count} events with args nested deeper than {MAX_ARGS_DEPTH} levels were loaded "
                                 f"without their args{self._where_seq(int(rank), first)}")

    def _original_index(self, index: int) -> int:
        """The place in the original file of the ``index``-th event of the file read (some may be removed)."""
        for removed in sorted(self.skipped):
            if removed <= index:
                index += 1
        return index

    def _where(self, original_index: int, offset: int | None = None) -> str:
        """"at byte N" for an event of the original file ("(event #N)" when it cannot be located)."""
        offset = self._offset(original_index) if offset is None else offset
        if offset is None:
            return f"(event #{original_index + 1})"
        return f"at byte {offset}" + (" of the uncompressed data" if self.path.name.endswith(".gz") else "")

    def _offset(self, original_index: int) -> int | None:
        if self.array_start is None:  # the events were not read from a JSON file (another reader made them)
            return None
        try:
            return tracefile.event_offsets(self.path, [original_index], self.array_start).get(original_index)
        except (OSError, EOFError):
            return None

    def _where_seq(self, rank: int, seq: int | None) -> str:
        """" (the first at byte N)" for the event numbered ``seq`` of ``rank``, or nothing when it cannot be
        located (``locate``, when set, locates the events of a stage of several traces)."""
        if self.locate is not None:
            return self.locate(rank, seq)
        if rank != self.rank:
            return ""
        index = None if seq is None else self._original_index(seq)
        offset = None if index is None else self._offset(index)
        return "" if offset is None else f" (the first {self._where(index, offset)})"

    def _read_parts(self, path: Path) -> bool:
        """Read a big array as byte ranges cut at event boundaries (``ingest.tracesplit``), one per DuckDB thread,
        in parallel; False (nothing read) when it cannot be cut or a range does not read, and the whole file is
        then read as usual, with its repairs and messages."""
        threads = int(self.cur.execute("SELECT current_setting('threads')").fetchone()[0])
        parts = tracesplit.split_ranges(path, self.workdir, threads)
        if not parts:
            return False
        try:
            self._read_with_progress(parts)
        except BaseException as exc:
            _unlink(parts)
            if not isinstance(exc, duckdb.Error):
                raise
            self.cur.execute(f"DROP TABLE IF EXISTS {self.p}ev_t")
            return False
        # (freeing a GB of copies takes ~50 ms: beside what follows; the work folder's removal minds no file gone)
        threading.Thread(target=_unlink, args=(parts,), name="trace-parts-unlink", daemon=True).start()
        self._read_done()
        return True

    def note(self, rank: int, text: str) -> None:
        """A finding of derive() about ``rank``: a warning of this trace, or a note of another rank of the stage."""
        if rank == self.rank:
            self.warnings.append(text)
        else:
            self.notes.setdefault(rank, []).append(text)


def _unlink(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _clean_duckdb_message(msg: str, path: Path, display: str) -> str:
    msg = msg.replace("Invalid Input Error: ", "").strip()
    return msg.replace(str(path), display)
