"""Stage the profiler dbs of several ranks at once (``ascend_pytorch_profiler[_N].db``, ``msprof_N.db``).

Each rank's SQLite tables are copied into one staged table per source table (``{prefix}d_<name>``, a ``rank``
column first, ``ingest.readers.sqlitedb.RankTables``), so the statements that follow run once for the whole stage
whatever its number of ranks (a statement costs milliseconds, and a rank's db needs ~160 of them): the events are
synthesised from the tables (``dbevents``, ``dbflows``) into ``{prefix}ev_t``, an Overlap Analysis lane is
computed for each rank whose db has none (compute = tasks with a COMPUTE_TASK_INFO row, communication =
COMMUNICATION_OP), the events are derived by ``ingest.trace`` as a text export's group of traces is, then the
CSV-shaped tables are made (``dbtables``). Every join, window and order of those statements is within a rank, so
each rank's events and rows are those it would give alone. A rank whose database cannot be read fails alone (its
rows are taken out again); a failure of a statement fails the whole stage (the pipeline then stages its ranks one
by one).
"""

from __future__ import annotations

import collections
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import overlap, trace
from . import dbevents, dbflows, dbsource, dbtables, sqlitedb
from .protocol import Job, Staged

LIMIT_NS = 1 << 62  # |time| beyond this: an interval of two such times would not fit in int64
READ_SHARE = trace.TraceLoad.READ_SHARE  # of the progress bar, for copying the tables; derivations do the rest
UNSUPPORTED_FIRST_SCHEMA = ("not supported: the first msprof db schema (TARGET_INFO_* tables; TASK and API with "
                            "`start`/`end` instead of startNs/endNs, relative to baseTimeNs, TASK's as floating-point "
                            "text rounded to whole microseconds): its tasks and API calls were not loaded")
LANE_TABLES = ("lanes", "lanes_b")  # the lanes the stage's cursor made, and those the second one did (LanesBeside)
SKIPPED = {**dbflows.UNUSABLE, **dbflows.UNMATCHED}  # table -> its rows that give no event, per rank
# the notes' counts that read the staged tables alone (the lonely ops' read the flows, made after)
SIDE_COUNTS = [dbflows.SWAPPED, dbflows.FFTS_PARENT_COUNT, *SKIPPED.values()]
SWAPPED_SHAPES = ("PYTORCH_API: inputShapes holds the input types and inputDtypes the shapes (as this torch_npu "
                  "version writes them): read as such")


@dataclass
class DbRank:
    """One rank's profiler db in a stage: what its tables gave, and what staging it found."""

    rank: int
    path: Path
    display: str
    present: dict[str, str] = field(default_factory=dict)  # its SQLite tables, by upper-case name
    staged: Staged = field(default_factory=Staged)


def stage_profiler_dbs(job: Job, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
    """The profiler dbs ``items`` (rank, path, display name) into the stage ``job.prefix`` (CSV-shaped tables at
    ``job.csv_prefix``); rank -> what its db gave, or the error that stopped it. Raises when the stage fails."""
    cur, p = job.cur, job.prefix
    out: dict[int, Staged | Exception] = {}
    ranks: list[DbRank] = []
    made: list[dict[int, list[str]]] = []
    early = None
    try:
        tables = sqlitedb.RankTables(cur, {f"{p}d_{key}": spec for key, (_, spec) in dbsource.TABLES.items()})
        for i, (rank, path, display) in enumerate(items):
            db = DbRank(rank, path, display)
            try:
                _copy(db, tables, lambda f, i=i: job.on_progress(READ_SHARE * 0.8 * (i + f) / len(items)))
            except (ValueError, OSError) as exc:
                tables.drop_rank(rank)
                out[rank] = exc
                continue
            ranks.append(db)
        tables.flush()
        if not ranks:
            return out
        # a second cursor makes the device lanes, then the tables that do not wait for the timeline, while this one
        # makes the host lanes and the events (the statements of a small stage run on one core each)
        present = {db.rank: set(db.present) for db in ranks}
        late = dbtables.need_timeline(present, dbtables.ranks_with_steps(cur, p))
        lanes = _prepare(job, ranks)
        beside = LanesBeside(p, lanes)
        early = trace.Beside(cur, lambda c: (beside.run(c), made.append(dbtables.build(
            c, p, job.csv_prefix, present, set(), [t for t in dbtables.TABLES if t not in late]))), "db-lanes-tables")
        own_overlap = _events(job, ranks, lanes, beside)
        with_events = {r for (r,) in cur.execute(f"SELECT DISTINCT rank FROM {p}ev_t WHERE ph <> 'M'").fetchall()}
        timeline = [db for db in ranks if db.rank in with_events]
        if timeline:
            derived = _derive_overlap(job, [db.rank for db in timeline if db.rank not in own_overlap])
            for db in timeline:
                db.staged.timeline = True
                if db.rank in own_overlap:
                    db.staged.overlap_source = "trace"
                elif added := derived.get(db.rank):
                    db.staged.overlap_source = "derived"
                    db.staged.warnings.append(f"no OVERLAP_ANALYSIS rows in the db: derived an Overlap Analysis lane "
                                              f"from the device tasks ({added} slices)")
            first = timeline[0]
            tl = trace.TraceLoad(cur, p, Path(first.display), job.workdir, first.display,
                                 on_progress=job.on_progress, on_nested=job.on_nested, rank=first.rank)
            tl.derive()
            for db in timeline:
                db.staged.warnings += tl.warnings if db.rank == tl.rank else tl.notes.get(db.rank, [])
        made.append(dbtables.build(cur, p, job.csv_prefix, present, with_events, late))
        early.result()
        early = None
    finally:
        if early is not None:
            early.join()  # (failing already: its own error is moot)
        _drop(cur, p)
    made_per_rank = dbtables.merge(*made)
    for db in ranks:
        db.staged.tables = made_per_rank[db.rank]
        db.staged.warnings += sqlitedb.sidecar_notes(db.path)
        out[db.rank] = db.staged
    return {rank: out[rank] for rank, _, _ in items}


def _copy(db: DbRank, tables: sqlitedb.RankTables, on_progress) -> None:
    """Copy a rank's tables (and note what of them is not read); ValueError when its database cannot be read."""
    con = sqlitedb.connect(db.path)
    fast = None
    try:
        fast = sqlitedb.ArrowReader.open(db.path)
        db.present = present = sqlitedb.tables(con)
        names = {key: dbsource.source_table(table, present) for key, (table, _) in dbsource.TABLES.items()}
        total = sum(sqlitedb.row_count(con, present[t.upper()]) for t in names.values() if t.upper() in present) or 1
        done, copied = 0, []
        for key, dest in zip(dbsource.TABLES, tables.tables):
            c = sqlitedb.copy(con, present, names[key], tables, dest, db.rank, fast)
            copied.append(c)
            done += c.rows
            on_progress(done / total)
        db.staged.rows = sum(c.rows for c in copied)
        db.staged.warnings += copy_notes(copied)
        if "TARGET_INFO_SESSION_TIME" in present and "TASK" in present \
                and "startns" not in sqlitedb.columns(con, present["TASK"]):
            db.staged.warnings.append(UNSUPPORTED_FIRST_SCHEMA)
        db.staged.warnings += unread(con, present, dbsource.all_names(dbsource.TABLES))
    except sqlite3.Error as exc:
        raise ValueError(f"the SQLite database cannot be read: {exc}") from exc
    finally:
        if fast is not None:
            fast.close()
        con.close()


def copy_notes(copied) -> list[str]:
    notes = []
    for c in copied:
        if c.missing:
            notes.append(f"table {c.table} has no column {', '.join(c.missing)}: read as empty")
        for col, n in c.bad.items():
            notes.append(f"table {c.table}: {n} values of {col} are not numbers and were read as NULL")
    return notes


def unread(con, present: dict[str, str], read: set[str]) -> list[str]:
    """One note naming the tables with rows that nothing reads (so no data goes silently missing)."""
    left = []
    for upper, real in sorted(present.items()):
        if upper in read or upper in dbsource.BOOKKEEPING or upper.startswith("ENUM_"):
            continue
        n = sqlitedb.row_count(con, real)
        if n:
            left.append(f"{real} ({n} rows)")
    return [f"tables not loaded (not shown by ascendscope yet): {', '.join(left)}"] if left else []


def _prepare(job: Job, ranks: list[DbRank]) -> list[tuple[str, str]]:
    """The tables every lane reads or fills: the events (empty), the ranks, the communication groups and the two
    lane tables; returns every lane (process, SQL)."""
    cur, p = job.cur, job.prefix
    empty = job.workdir / "no-events.json"
    job.workdir.mkdir(parents=True, exist_ok=True)
    empty.write_text("[]")
    # the event table exactly as the trace reader makes it
    cur.execute(trace.READ_EVENTS.format(p=p, rank=int(ranks[0].rank), many="", filename=""), [str(empty)])
    cur.execute(trace.EV_VIEW.format(p=p))
    cur.execute(dbevents.RANKS.format(p=p, ranks=", ".join(f"({int(db.rank)})" for db in ranks)))
    cur.execute(dbevents.COMM_GROUPS.format(p=p))
    for table in LANE_TABLES:
        cur.execute(f"CREATE OR REPLACE TABLE {p}{table} ({dbevents.LANE_COLUMNS}, k INTEGER)")
    lanes = [*((process, sql) for _, process, sql in dbevents.LANES), ("Overlap Analysis", dbevents.OVERLAP),
             *dbevents.COUNTERS]
    return [(process, sql.format(p=p)) for process, sql in lanes]


class LanesBeside:
    """Every lane (process, SQL) made by two cursors at once: the stage's takes them from the front (the host's
    first), a second one (``run``) from the back, each into its own table (``owner``: lane number -> 0 or 1), until
    none is left; the second then makes the counts of ``SIDE_COUNTS``. ``wait`` until they are (and raise what
    stopped them). (Which cursor makes a lane depends on timing: a lane's rows are always in one table.)"""

    def __init__(self, p: str, lanes: list[tuple[str, str]]):
        self.p, self.lanes = p, lanes
        self.todo = collections.deque(range(len(lanes)))
        self.owner: dict[int, int] = {}
        self.lock = threading.Lock()
        self.lanes_done = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.counts: list[tuple[int, int, int]] = []  # (rank, SIDE_COUNTS number, count) of the counts not 0

    def take(self, cur, side: int) -> None:
        """Make lanes on ``cur`` into table ``side`` until none is left (0: from the front, 1: from the back)."""
        while True:
            with self.lock:
                if not self.todo:
                    return
                k = self.todo.popleft() if side == 0 else self.todo.pop()
                self.owner[k] = side
            cur.execute(f"INSERT INTO {self.p}{LANE_TABLES[side]} SELECT *, {k} FROM ({self.lanes[k][1]})")

    def run(self, cur) -> None:
        try:
            self.take(cur, 1)
            self.lanes_done.set()
            self.counts = cur.execute(dbflows.counts_per_rank(SIDE_COUNTS).format(p=self.p)).fetchall()
        except BaseException as exc:
            self.error = exc  # (before the events are set: a waiter woken by them sees it)
            raise
        finally:
            self.lanes_done.set()
            self.done.set()

    def wait_lanes(self) -> None:
        """Until every lane is made (by either cursor)."""
        self._wait(self.lanes_done)

    def wait(self) -> None:
        """Until the lanes and the counts are made."""
        self._wait(self.done)

    def _wait(self, event: threading.Event) -> None:
        event.wait()
        if self.error is not None:
            raise RuntimeError(f"the lanes or counts made beside failed: {self.error}") from self.error


def _events(job: Job, ranks: list[DbRank], lanes: list[tuple[str, str]], beside: LanesBeside) -> set[int]:
    """Fill ``{p}ev_t`` with the synthesised events of every rank (lanes, metadata, counters, flows), each rank's
    notes into its warnings; return the ranks whose db gave its own Overlap Analysis lane."""
    cur, p = job.cur, job.prefix
    kept, far = _lanes(cur, p, lanes, beside)
    beside.wait()
    for sql in (dbflows.TARGETS, dbflows.OP_LINKS, dbflows.FLOWS):
        cur.execute(sql.format(p=p))
    counts = {db.rank: [0] * len(SIDE_COUNTS) for db in ranks}
    for rank, q, n in beside.counts:  # (the counts of the staged tables alone, made beside)
        counts[rank][q] = n
    lonely_ops = dict(cur.execute(dbflows.LONELY_OPS.format(p=p)).fetchall())
    for db in ranks:
        rank = db.rank
        swapped, parents, *rows = counts[rank]
        lonely = lonely_ops.get(rank, 0)
        notes = db.staged.warnings
        if swapped:
            notes.append(SWAPPED_SHAPES)
        notes += [f"{n} events of the {process} lane with a time before 1970 or beyond 2^62 ns (146 years from the "
                  "epoch) were skipped" for process, n in far.get(rank, {}).items()]
        if parents:
            notes.append(f"{parents} FFTS+ parent tasks of TASK not drawn: their subtasks are (as in the text export)")
        if lonely:
            notes.append(f"{lonely} connection ids of torch ops (CONNECTION_IDS) lead to no task or other op in the "
                         "db: no flow drawn for them")
        for table, n in zip(SKIPPED, rows):
            if n:
                why = "without a TASK row (no times)" if table in dbflows.UNMATCHED else "without a start or end time"
                notes.append(f"table {table}: {n} rows {why} were skipped")
    job.on_progress(READ_SHARE)
    return {rank for (rank, k), n in kept.items() if k == len(dbevents.LANES) and n > 0}


def _lanes(cur, p: str, lanes: list[tuple[str, str]],
           beside: LanesBeside) -> tuple[dict[tuple[int, int], int], dict[int, dict[str, int]]]:
    """Build every lane's rows of every rank (``lanes``: process, SQL) in ``{p}lanes`` (those this cursor takes
    from ``beside``'s queue) and ``{p}lanes_b`` (those its second cursor does), the lane's number in ``k``, then
    append them to ``{p}ev_t`` rank by rank and lane by lane, each lane followed by its process and thread metadata;
    the lanes the flows read are views ``{p}lane_<name>``. Events before 1970, or too far from the epoch for any
    interval to fit in int64, are dropped. Returns the rows kept per (rank, lane number) and the rows dropped per
    rank and process. (Two tables, and one statement per lane for all ranks: a statement costs milliseconds
    whatever its size.)"""
    tables = [f"{p}{t}" for t in LANE_TABLES]
    beside.take(cur, 0)
    beside.wait_lanes()
    out = (f"coalesce(ts_ns NOT BETWEEN 0 AND {LIMIT_NS} OR coalesce(dur_ns, 0) NOT BETWEEN -{LIMIT_NS} AND "
           f"{LIMIT_NS}, false)")
    both = " UNION ALL ".join(f"SELECT rank, k, ts_ns, dur_ns FROM {t}" for t in tables)
    counts = cur.execute(f"SELECT rank, k, count(*) FILTER (WHERE NOT {out}), count(*) FILTER (WHERE {out}) "
                         f"FROM ({both}) GROUP BY rank, k ORDER BY rank, k").fetchall()
    far: dict[int, dict[str, int]] = {}
    for rank, k, _, dropped in counts:
        if dropped:
            mine = far.setdefault(rank, {})
            mine[lanes[k][0]] = mine.get(lanes[k][0], 0) + dropped
    if far:
        for table in tables:
            cur.execute(f"DELETE FROM {table} WHERE {out}")
    info = ", ".join(f"({k}, '{process}', {dbevents.PROCESSES[process][0]}, "
                     f"{str(dbevents.PROCESSES[process][1] == 'CPU').lower()})" for k, (process, _) in enumerate(lanes))
    # (k tells the tables apart: a lane's rows, in the order made, are those of one table)
    rows = " UNION ALL ".join(f"SELECT *, rowid AS r FROM {t}" for t in tables)
    cur.execute(dbevents.LANE_EVENTS.format(p=p, lanes=f"({rows})", info=info))
    for name, k in dbevents.LANE_VIEWS.items():
        table = tables[beside.owner[k]]
        cur.execute(f"CREATE OR REPLACE VIEW {p}lane_{name} AS SELECT * EXCLUDE (k) FROM {table} WHERE k = {k}")
    return {(rank, k): n for rank, k, n, _ in counts}, far


def _derive_overlap(job: Job, ranks: list[int]) -> dict[int, int]:
    """Append to each of ``ranks`` an Overlap Analysis lane computed from its device lanes (compute = tasks with
    compute info, communication = the communication operators); return the slices added per rank."""
    if not ranks:
        return {}
    listed = ", ".join(str(int(r)) for r in ranks)
    cols = job.cur.execute(f"""
        SELECT rank, CASE role WHEN 'compute' THEN 0 ELSE 2 END AS what, ts_ns, ts_ns + greatest(dur_ns, 0) AS end_ns
        FROM {job.prefix}lane_hw WHERE rank IN ({listed})
        UNION ALL
        SELECT rank, 1, ts_ns, ts_ns + greatest(dur_ns, 0) FROM {job.prefix}lane_comm
        WHERE role = 'op' AND rank IN ({listed})""").fetchnumpy()
    of = np.asarray(cols["rank"])
    what, ts, end = (np.asarray(cols[c]) for c in ("what", "ts_ns", "end_ns"))
    return overlap.append_ranks(job.cur, job.prefix, [(rank, what[of == rank], ts[of == rank].astype(np.int64),
                                                       end[of == rank].astype(np.int64)) for rank in ranks])


def _drop(cur, p: str) -> None:
    for key in dbsource.TABLES:
        cur.execute(f"DROP TABLE IF EXISTS {p}d_{key}")
    for name in dbevents.LANE_VIEWS:
        cur.execute(f"DROP VIEW IF EXISTS {p}lane_{name}")
    for name in (*LANE_TABLES, "comm_groups", "flow_targets", "op_links", "d_ranks"):
        cur.execute(f"DROP TABLE IF EXISTS {p}{name}")
