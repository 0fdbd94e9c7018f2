"""Load one rank's trace_view.json into staging tables and derive tracks, slice depth, flows and counters.

Reading (``ingest.trace_read``: ``read_json`` straight into typed columns, with its repairs) is the base class;
the derivations' SQL is in ``ingest.trace_sql`` and the writing of a derived stage in ``ingest.trace_write``.
Everything runs inside DuckDB, so memory stays bounded whatever the file size. Staging tables are named
``{prefix}…`` and use rank-local ids; ``ingest.pipeline`` turns them into the global tables.

Derivations: slice order, depth and parent, which slice each flow end binds to, and which ``s`` each ``f``
pairs with (by ``(cat, id)``) are computed by ``ingest.nesting`` (numpy; slices one batch of whole tracks at a
time; its docstring states each definition). The rest is set-wise SQL.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from . import duckmem, nesting, overview, traceflows
from .columns import arrow_table
from .trace_read import (  # noqa: F401 - the reading side's names are this module's interface too
    EV_VIEW,
    EVENT_COLUMNS,
    MAX_ARGS_DEPTH,
    READ_EVENTS,
    TS_LIMIT,
    TraceRead,
)
from .trace_sql import (  # noqa: F401 - (as above)
    COUNTERS,
    KIND_ORDER,
    NEST_TABLE,
    PART_STARTS,
    RAW_SLICES,
    SLICE_COUNT,
    SLICE_SPANS,
    STEPS,
    TRACKS,
)
from .trace_write import (  # noqa: F401 - (as above)
    STAGE_TABLES,
    drop_stage,
    staged_counts,
    unwrite,
    write_offsets,
    write_rest,
    write_slices,
)
from .traceflows import FLOW_ENDS  # noqa: F401 - (as above)

PAIR_BATCH_ENDS = 1_000_000  # flow ends paired at a time (whole (cat, id) keys): numpy memory stays bounded
_LIMITS = threading.local()  # the limits of the stage being staged on this thread (``track_limit``)


class IdRangeError(ValueError):
    """A rank has more tracks or slices than its shard's id range holds."""


@contextmanager
def track_limit(limit: int | None):
    """Every trace staged on this thread inside the block refuses a rank of more than ``limit`` tracks (lanes) as
    soon as its tracks are derived, before its slices are made: a shard gives a rank a fixed range of track ids
    (``stages.rank_id_bases``). None: no limit (a single-file run numbers the tracks on)."""
    before = getattr(_LIMITS, "tracks", None)
    _LIMITS.tracks = limit
    try:
        yield
    finally:
        _LIMITS.tracks = before


class TraceLoad(TraceRead):
    """Loads one trace (of rank ``rank``) into ``{prefix}`` staging tables; ``warnings`` collects what was not loaded
    as-is. ``derive`` derives every rank staged under the prefix (``ingest.tracegroup`` reads several traces into
    one stage); what it finds about another rank than ``rank`` goes to ``notes[rank]``."""

    def check_tracks(self) -> None:
        """Refuse the stage when a rank has more tracks than the limit of its stage (``track_limit``)."""
        limit = getattr(_LIMITS, "tracks", None)
        if limit is None:
            return
        over = self.cur.execute(f"SELECT max(n) FROM (SELECT count(*) AS n FROM {self.p}tracks GROUP BY rank)"
                                ).fetchone()[0]
        if over is not None and over > limit:
            raise IdRangeError(too_many_tracks(over, limit))

    def slice_count(self) -> int:
        """The slices the staged events make: as counted when the read was done, while it still holds (no time
        skipped since, no event added: a count of rows is free), else counted now."""
        at_read = self.slices_at_read
        if at_read is not None and self.cur.execute(f"SELECT count(*) FROM {self.p}ev_t").fetchone()[0] == at_read[1]:
            return at_read[0]
        return int(self.sql(SLICE_COUNT).fetchone()[0])

    def fill_rank(self) -> None:
        """Events another reader staged without a rank are this trace's."""
        fill_rank(self.cur, self.p, self.rank)

    def derive(self) -> dict:
        done = [0]

        def advance(within: float = 1.0):  # one of the ~12 steps below is done (``within``: that much of it)
            if within >= 1.0:
                done[0] += 1
            share = (done[0] + (within if within < 1.0 else 0.0)) / 12
            self.on_progress(self.READ_SHARE + (1 - self.READ_SHARE) * min(1.0, share))

        def s(template, params=None):
            result = self.sql(template, params)
            advance()
            return result

        self.fill_rank()
        s(TRACKS)
        self.check_tracks()
        if self.on_sliced is not None:
            # the rank's overview (ingest.overview) needs only the tracks and where the slices are: their spans
            # (narrow rows, unsorted), then the overview from them, before anything else and with every core,
            # so it is published as soon as it can be (beside the slices made, each took longer than both one after
            # the other; beside the counters, ~0.3 s later at 1 GB); on_sliced is called for every rank: without
            # spans it writes none, and what waits goes on
            if self.slice_count() >= overview.OVERVIEW_MIN_SLICES:
                self.sql(SLICE_SPANS)
            # (on a cursor of its own; its errors are its own: an overview that fails is only not published)
            Beside(self.cur, lambda cur: self.on_sliced(cur, self.p), "trace-overview").join()
            self.cur.execute(f"DROP TABLE IF EXISTS {self.p}{overview.TABLE}")
        if self._args_bounded == "names":  # the read left the rest to here (what follows reads the args)
            self.bound_args_depth()
        # the counters need only the events and the tracks: derived on a second cursor while the slices are
        # nested here (numpy on one core), so the other core is not idle
        counters = Beside(self.cur, lambda cur: cur.execute(COUNTERS.format(p=self.p)), "trace-beside")
        try:
            s(RAW_SLICES)
            for rank, negative, unclosed in s(f"SELECT rank, count(*) FILTER (WHERE negative_dur), "
                                              f"count(*) FILTER (WHERE unclosed) FROM {self.p}x GROUP BY rank "
                                              "ORDER BY rank").fetchall():
                if negative:
                    self.note(rank, f"{negative} slices with a negative dur were loaded with dur 0")
                if unclosed:
                    self.note(rank, f"{unclosed} B events without a matching E were loaded with dur 0")
            skipped = s(f"""WITH k AS (SELECT rank, seq, ph, ph IN ('X','B','E','i','I','C','s','f') AND ts_ns IS NULL
                                                      AND bad_dur IS NOT TRUE AS bad_ts, bad_dur IS TRUE AS bad_dur
                                            FROM {self.p}ev)
                            SELECT rank, count(*) FILTER (WHERE bad_ts),
                                   count(*) FILTER (WHERE ph NOT IN ('X','B','E','i','I','C','s','f','M')
                                                    OR ph IS NULL),
                                   string_agg(DISTINCT ph, ', ') FILTER (WHERE ph NOT IN ('X','B','E','i','I','C','s',
                                                                                           'f','M')),
                                   min(seq) FILTER (WHERE bad_ts), count(*) FILTER (WHERE bad_dur),
                                   min(seq) FILTER (WHERE bad_dur),
                                   count(*) FILTER (WHERE ph IN ('s', 'f') AND NOT bad_ts AND NOT bad_dur), count(*)
                            FROM k GROUP BY rank ORDER BY rank""").fetchall()
            ends = sum(row[-2] for row in skipped)
            parts = traceflows.parts_for(ends, PAIR_BATCH_ENDS)
            self.events = {int(row[0]): int(row[-1]) for row in skipped}
            for rank, bad_ts, other, phases, first_bad_ts, bad_dur, first_bad_dur, _ends, _n in skipped:
                negative, first_negative = self.negative.get(rank, (0, None))
                if negative:
                    self.note(rank, f"{negative} events with a negative ts (before 1970) were skipped"
                                    f"{self._where_seq(rank, first_negative)}; the events around them were loaded")
                if bad_ts - negative:
                    first = first_bad_ts if not negative else self.sql(
                        f"SELECT min(seq) FROM {self.p}ev WHERE rank = ? AND ts_ns IS NULL AND bad_dur IS NOT TRUE "
                        f"AND ph IN ('X','B','E','i','I','C','s','f') AND seq NOT IN (SELECT seq FROM {self.p}neg)",
                        [rank]).fetchone()[0]
                    self.note(rank, f"{bad_ts - negative} events without a usable ts were skipped"
                                    f"{self._where_seq(rank, first)}")
                if bad_dur:
                    self.note(rank, f"{bad_dur} X events whose dur is not a usable duration (not a number, infinite, "
                                    "or ending beyond the int64 range of ns) were skipped"
                                    f"{self._where_seq(rank, first_bad_dur)}")
                if other:
                    self.note(rank, f"{other} events of phases not shown yet ({phases or 'none'}) were skipped")
            self.sql(traceflows.FLOW_ENDS, part=traceflows.part_of(parts))
            counters.result()  # (the last statement to read the events)
            if self.DROP_EVENTS:  # nothing reads them from here on: their memory goes to the nesting
                self.cur.execute(f"DROP VIEW IF EXISTS {self.p}ev")
                self.cur.execute(f"DROP TABLE IF EXISTS {self.p}ev_t")
            with_slices = self._nest(advance, parts)
            advance()
            self.on_nested()
            with duckmem.lent(self.cur, traceflows.part_bytes(ends, parts)):  # (the slices' write runs beside)
                flow_stats = traceflows.pair_parts(self.cur, self.p, parts, with_slices, self.workdir / "flow-parts")
            advance()
            for rank, cat, lonely_s, lonely_f, ub_s, ub_d, ub_s_empty in flow_stats:
                parts = []
                if lonely_s:
                    parts.append(f"{lonely_s} flow starts without a finish")
                if lonely_f:
                    parts.append(f"{lonely_f} flow finishes without a start")
                if ub_s:
                    why = ""
                    if ub_s_empty:
                        why = f" ({ub_s_empty} on a lane without slices, as at Level0: CANN API slices not exported)"
                    parts.append(f"{ub_s} flow starts bound to no slice{why}")
                if ub_d:
                    parts.append(f"{ub_d} flow finishes bound to no slice")
                if parts:
                    self.note(rank, f"flows '{cat or '(no cat)'}': " + ", ".join(parts))
        except BaseException:
            counters.join()  # (its own error, if any, is moot now)
            raise
        advance()
        for rank, bad in s(f"SELECT rank, count(*) FROM {self.p}counters WHERE value IS NULL GROUP BY rank "
                           "ORDER BY rank").fetchall():
            self.note(rank, f"{bad} counter values that are not numbers were stored as NULL")
        s(STEPS)
        for t in traceflows.TABLES:  # the rest stays for write()
            s(f"DROP TABLE IF EXISTS {self.p}{t}")
        return self.stats()

    def _nest(self, advance=lambda within: None, parts: int = 1) -> np.ndarray:
        """Order, depth and parent of every slice ({p}nest), computed by ``ingest.nesting`` one batch of whole
        tracks at a time (a big track a part at a time), so memory stays bounded however big the trace; and the
        slice each flow end ({p}fe, ``ingest.traceflows``) binds to, with the ends of those tracks. Returns the
        local tracks that have slices, sorted."""
        p = self.p
        self.sql(traceflows.BOUND_TABLE)
        self.sql(NEST_TABLE)
        counts = self.cur.execute(f"SELECT local_track, count(*) FROM {p}x GROUP BY local_track "
                                  "ORDER BY local_track").fetchall()
        first_id = 1
        total = sum(n for _, n in counts) or 1
        for lo, hi, n in _batches(counts, nesting.BATCH_SLICES):
            advance((first_id - 1) / total)
            if lo == hi and n > nesting.BATCH_SLICES:
                self._nest_parts(lo, first_id)
                first_id += n
                continue
            # ({p}x is stored in the nesting's order, so a scan of a range of tracks reads them in it)
            rows = self.cur.execute(f"SELECT seq, local_track, ts_ns, dur_ns FROM {p}x "
                                    "WHERE local_track BETWEEN ? AND ?", [lo, hi]).fetchnumpy()
            nested = nesting.nest(rows["seq"], rows["local_track"], rows["ts_ns"], rows["dur_ns"], first_id,
                                  presorted=nesting.in_order(rows["local_track"], rows["ts_ns"], rows["dur_ns"],
                                                             rows["seq"]))
            del rows
            self._append(f"{p}nest", {"local_id": nested.local_id, "seq": nested.seq,
                                      "local_track": nested.track, "ts_ns": nested.ts, "dur_ns": nested.dur,
                                      "depth": nested.depth, "parent_local": nested.parent})
            traceflows.bind_rows(self.cur, p, nested, "local_track BETWEEN ? AND ?", [lo, hi])
            first_id += n
        return np.array([t for t, n in counts if n], dtype=np.int64)

    def _nest_parts(self, track: int, first_id: int) -> None:
        """Nest one track too big for a batch a part at a time (``nesting.nest_part``), each part the slices
        starting in a range of times (cut where the start changes), and bind the flow ends of each range, so
        the memory a part takes stays bounded however many slices the track has."""
        p = self.p
        cuts = [r[0] for r in self.cur.execute(PART_STARTS.format(p=p, part=int(nesting.PART_SLICES)),
                                               [track]).fetchall()]
        carry = nesting.TrackCarry()
        for k, lo in enumerate(cuts):
            hi = cuts[k + 1] if k + 1 < len(cuts) else None
            where, args = "local_track = ? AND ts_ns >= ?", [track, lo]
            if hi is not None:
                where, args = where + " AND ts_ns < ?", args + [hi]
            rows = self.cur.execute(f"SELECT seq, local_track, ts_ns, dur_ns FROM {p}x WHERE {where}",
                                    args).fetchnumpy()
            if not nesting.in_order(rows["local_track"], rows["ts_ns"], rows["dur_ns"], rows["seq"]):
                order = np.lexsort((rows["seq"], -np.asarray(rows["dur_ns"]), rows["ts_ns"]))
                rows = {k: np.asarray(v)[order] for k, v in rows.items()}
            ancestors = carry.ancestors()
            nested = nesting.nest_part(rows["seq"], rows["local_track"], rows["ts_ns"], rows["dur_ns"], first_id,
                                       carry)
            del rows
            n = len(nested.seq)
            self._append(f"{p}nest", {"local_id": nested.local_id, "seq": nested.seq,
                                      "local_track": nested.track, "ts_ns": nested.ts, "dur_ns": nested.dur,
                                      "depth": nested.depth, "parent_local": nested.parent})
            # the ends from this part's first start to the next part's (the first part: every earlier one too)
            end_where, end_args = "local_track = ?", [track]
            if k > 0:
                end_where, end_args = end_where + " AND ts_ns >= ?", end_args + [lo]
            if hi is not None:
                end_where, end_args = end_where + " AND ts_ns < ?", end_args + [hi]
            traceflows.bind_rows(self.cur, p, nested, end_where, end_args, ancestors=ancestors,
                                 next_id=first_id + n if hi is not None else 0)
            first_id += n

    def _append(self, table: str, columns: dict) -> None:
        self.cur.register("_nest_rows", arrow_table(columns))
        try:
            self.cur.execute(f"INSERT INTO {table} SELECT * FROM _nest_rows")
        finally:
            self.cur.unregister("_nest_rows")

    def stats(self) -> dict:
        """Slices, flows, counters and events staged, over every rank of the stage."""
        totals = {"slices": 0, "flows": 0, "counters": 0, "events": 0}
        for per in self.rank_stats().values():
            for k in totals:
                totals[k] += per[k]
        return totals

    def rank_stats(self) -> dict[int, dict]:
        """rank -> its slices, flows, counters and events."""
        p = self.p
        out: dict[int, dict] = {}
        for rank, n in self.events.items():  # (counted by derive: the events may be gone)
            out.setdefault(rank, {"slices": 0, "flows": 0, "counters": 0, "events": 0})["events"] = n
        for table, key in ((f"{p}flows", "flows"), (f"{p}counters", "counters")):
            for rank, n in self.cur.execute(f"SELECT rank, count(*) FROM {table} GROUP BY rank").fetchall():
                out.setdefault(int(rank), {"slices": 0, "flows": 0, "counters": 0, "events": 0})[key] = int(n)
        for rank, n in self.cur.execute(f"SELECT t.rank, count(*) FROM {p}nest n JOIN {p}tracks t "
                                        "USING (local_track) GROUP BY t.rank").fetchall():
            out.setdefault(int(rank), {"slices": 0, "flows": 0, "counters": 0, "events": 0})["slices"] = int(n)
        return out


class Beside:
    """``work(cursor)`` run on a cursor of its own in a thread, beside the caller's; ``result()`` waits for it (and
    raises what it raised)."""

    def __init__(self, cur, work, name: str = "beside"):
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(cur.cursor(), work), name=name, daemon=True)
        self.thread.start()

    def _run(self, cur, work) -> None:
        try:
            work(cur)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self.error = exc
        finally:
            cur.close()

    def join(self) -> None:
        self.thread.join()

    def result(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def too_many_tracks(n: int, limit: int) -> str:
    return f"{n} tracks (lanes), more than the {limit} a shard's track ids hold"


def fill_rank(cur, prefix: str, rank: int) -> None:
    """Give ``rank`` to the staged events without one (a reader that builds its events in SQL, or a derived
    lane appended to them). A trace read here has its ranks already: one cheap count says so."""
    if cur.execute(f"SELECT count(*) FILTER (WHERE rank IS NULL) FROM {prefix}ev_t").fetchall()[0][0]:
        cur.execute(f"UPDATE {prefix}ev_t SET rank = ? WHERE rank IS NULL", [int(rank)])


def _batches(counts: list[tuple[int, int]], limit: int):
    """Contiguous ranges of tracks (lo, hi, slices) of at most ``limit`` slices each (or one larger track)."""
    lo = hi = None
    total = 0
    for track, n in counts:
        if lo is not None and total + n > limit:
            yield lo, hi, total
            lo, total = None, 0
        lo = track if lo is None else lo
        hi, total = track, total + n
    if lo is not None:
        yield lo, hi, total

