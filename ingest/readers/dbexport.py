"""Reader of torch_npu's db export: ``ascend_pytorch_profiler[_{rank}].db`` and ``analysis.db`` (FORMATS.md §7).

A rank whose ASCEND_PROFILER_OUTPUT holds text-export files is read from those (the db files beside them are
reported, not read); a rank with only the db files is read from them. A CANN ``msprof_{n}.db`` has the same device
tables and is read the same way when it is opened on its own.

Staging a profiler db: its tables are copied into DuckDB (``ingest.readers.sqlitedb``), the trace events are
synthesised from them (``dbevents``) and derived by ``ingest.trace`` like a trace_view.json (an Overlap Analysis
lane is computed when the db has none: compute = tasks with a COMPUTE_TASK_INFO row, communication =
COMMUNICATION_OP), then the CSV-shaped tables are made (``dbtables``). analysis.db gives the step trace and the
communication rows (``dbanalysis``). What is not read — unknown tables, missing columns, rows without times, values
of the wrong type — is named in the warnings.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .. import overlap, trace
from . import dbanalysis, dbevents, dbsource, dbtables, sqlitedb
from .protocol import Found, Job, Staged

# MindSpore's db export (export_type db) is CANN's msprof db moved into ASCEND_PROFILER_OUTPUT under its own name
PROFILER_DB = re.compile(r"^ascend_(?:pytorch|mindspore)_profiler(?:_\d+)?\.db$")
MSPROF_DB = re.compile(r"^(?:msprof|report)_\d+\.db$")  # report_N.db: its name in CANN of early 2024
ANALYSIS_DB = "analysis.db"
SQLITE_SIDECAR = re.compile(r"-(?:wal|shm|journal)$")
LIMIT_NS = 1 << 62  # |time| beyond this: an interval of two such times would not fit in int64
READ_SHARE = trace.TraceLoad.READ_SHARE  # of the progress bar, for copying the tables; derivations do the rest


class DbExportReader:
    name = "db export"
    kinds = ("db_export", "analysis_db")
    timeline_kinds = ("db_export",)
    timeline_only = ()

    def claims(self, filename: str) -> bool:
        db = SQLITE_SIDECAR.sub("", filename)  # the journal files SQLite keeps beside a database belong to it
        return bool(PROFILER_DB.match(db) or MSPROF_DB.match(db)) or db == ANALYSIS_DB

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        dbs = sorted(p for p in out_dir.iterdir() if PROFILER_DB.match(p.name) and p.is_file())
        analysis = out_dir / ANALYSIS_DB
        ours = dbs + ([analysis] if analysis.is_file() else [])
        found = Found()
        if text_files:
            found.notes += [(p, "db export not read: the text export beside it was loaded (a rank is read from "
                                "one export)") for p in ours]
            return found
        if dbs:
            found.files["db_export"] = dbs[0]
            found.notes += [(p, f"not read: a second profiler db in one folder ({dbs[0].name} was read)")
                            for p in dbs[1:]]
        if analysis.is_file():
            found.files["analysis_db"] = analysis
        return found

    def find_loose(self, path: Path) -> dict[str, Path]:
        if (PROFILER_DB.match(path.name) or MSPROF_DB.match(path.name)) and sqlitedb.is_sqlite(path):
            return {"db_export": path}
        return {}

    def find_ranks(self, folder: Path) -> None:
        return None

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        con = sqlitedb.connect(path)
        try:
            staged = _stage_analysis(job, con) if kind == "analysis_db" else _stage_profiler_db(job, con)
            staged.warnings += sqlitedb.sidecar_notes(path)
            return staged
        except sqlite3.Error as exc:
            raise ValueError(f"the SQLite database cannot be read: {exc}") from exc
        finally:
            con.close()


READER = DbExportReader()
UNSUPPORTED_FIRST_SCHEMA = ("not supported: the first msprof db schema (TARGET_INFO_* tables; TASK and API with "
                            "`start`/`end` instead of startNs/endNs, relative to baseTimeNs, TASK's as floating-point "
                            "text rounded to whole microseconds): its tasks and API calls were not loaded")


def _stage_analysis(job: Job, con) -> Staged:
    present = sqlitedb.tables(con)
    rows, copied = dbanalysis.read(con, present, job.rank)
    staged = Staged(rows=sum(c.rows for c in copied.values()))
    staged.warnings += _copy_notes(copied.values())
    if copied["step_trace_time"].present:
        dbanalysis.create_step_trace(job.cur, job.csv_prefix, rows.pop("step_trace"))
        staged.tables.append("step_trace")
    else:
        rows.pop("step_trace")
    staged.comm = {name: r for name, r in rows.items() if r}
    read = {table.upper() for table, _ in dbsource.ANALYSIS_TABLES.values()}
    staged.warnings += _unread(con, present, read)
    return staged


def _stage_profiler_db(job: Job, con) -> Staged:
    cur, p = job.cur, job.prefix
    present = sqlitedb.tables(con)
    staged = Staged()
    try:
        copied = _copy(job, con, present)
        staged.rows = sum(c.rows for c in copied)
        staged.warnings += _copy_notes(copied)
        if "TARGET_INFO_SESSION_TIME" in present and "TASK" in present \
                and "startns" not in sqlitedb.columns(con, present["TASK"]):
            staged.warnings.append(UNSUPPORTED_FIRST_SCHEMA)
        staged.warnings += _unread(con, present, dbsource.all_names(dbsource.TABLES))
        notes, own_overlap = _events(job)
        staged.warnings += notes
        if cur.execute(f"SELECT count(*) FROM {p}ev_t WHERE ph <> 'M'").fetchone()[0]:
            if own_overlap:
                staged.overlap_source = "trace"
            elif added := _derive_overlap(job):
                staged.overlap_source = "derived"
                staged.warnings.append(f"no OVERLAP_ANALYSIS rows in the db: derived an Overlap Analysis lane from "
                                       f"the device tasks ({added} slices)")
            tl = trace.TraceLoad(cur, p, Path(job.display), job.workdir, job.display, on_progress=job.on_progress,
                                 on_nested=job.on_nested, rank=job.rank)
            tl.derive()
            staged.warnings += tl.warnings
            staged.timeline = True
        staged.tables = dbtables.build(cur, p, job.csv_prefix, job.rank, {t for t in present},
                                       have_derived_steps=staged.timeline)
    finally:
        for key in dbsource.TABLES:
            cur.execute(f"DROP TABLE IF EXISTS {p}d_{key}")
        for name in dbevents.LANE_VIEWS:
            cur.execute(f"DROP VIEW IF EXISTS {p}lane_{name}")
        cur.execute(f"DROP TABLE IF EXISTS {p}lanes")
        for name in ("comm_groups", "flow_targets", "op_links"):
            cur.execute(f"DROP TABLE IF EXISTS {p}{name}")
    return staged


def _copy(job: Job, con, present: dict[str, str]) -> list[sqlitedb.Copied]:
    names = {key: dbsource.source_table(table, present) for key, (table, _) in dbsource.TABLES.items()}
    total = sum(sqlitedb.row_count(con, present[t.upper()]) for t in names.values() if t.upper() in present) or 1
    done, copied = 0, []
    for key, (_, spec) in dbsource.TABLES.items():
        table = names[key]
        c = sqlitedb.copy(con, present, table, job.cur, f"{job.prefix}d_{key}", spec)
        copied.append(c)
        done += c.rows
        job.on_progress(READ_SHARE * 0.8 * done / total)
    return copied


def _copy_notes(copied) -> list[str]:
    notes = []
    for c in copied:
        if c.missing:
            notes.append(f"table {c.table} has no column {', '.join(c.missing)}: read as empty")
        for col, n in c.bad.items():
            notes.append(f"table {c.table}: {n} values of {col} are not numbers and were read as NULL")
    return notes


def _unread(con, present: dict[str, str], read: set[str]) -> list[str]:
    """One note naming the tables with rows that nothing reads (so no data goes silently missing)."""
    left = []
    for upper, real in sorted(present.items()):
        if upper in read or upper in dbsource.BOOKKEEPING or upper.startswith("ENUM_"):
            continue
        n = sqlitedb.row_count(con, real)
        if n:
            left.append(f"{real} ({n} rows)")
    return [f"tables not loaded (not shown by ascendscope yet): {', '.join(left)}"] if left else []


def _events(job: Job) -> tuple[list[str], bool]:
    """Fill ``{p}ev_t`` with the synthesised events (lanes, metadata, counters, flows); return the notes, and
    whether the db gave its own Overlap Analysis lane."""
    cur, p = job.cur, job.prefix
    empty = job.workdir / "no-events.json"
    job.workdir.mkdir(parents=True, exist_ok=True)
    empty.write_text("[]")
    # the event table exactly as the trace reader makes it
    cur.execute(trace.READ_EVENTS.format(p=p, rank=int(job.rank), many="", filename=""), [str(empty)])
    cur.execute(trace.EV_VIEW.format(p=p))
    notes = []
    host_pid, dev = cur.execute(f"""
        SELECT coalesce((SELECT mode(global_pid) FROM {p}d_task), (SELECT mode(global_tid >> 32) FROM {p}d_pytorch_api),
                        (SELECT mode(global_tid >> 32) FROM {p}d_cann_api), 0),
               coalesce((SELECT min(device_id) FROM {p}d_task), (SELECT min(device_id) FROM {p}d_rank_device_map), 0)
        """).fetchone()
    dims, types, swapped = _shape_columns(cur, p)
    if swapped:
        notes.append("PYTORCH_API: inputShapes holds the input types and inputDtypes the shapes (as this torch_npu "
                     "version writes them): read as such")
    fmt = {"p": p, "host_pid": int(host_pid), "dev": int(dev), "dims": dims, "types": types}
    cur.execute(dbevents.COMM_GROUPS.format(**fmt))
    lanes = [*((process, sql) for _, process, sql in dbevents.LANES), ("Overlap Analysis", dbevents.OVERLAP),
             *dbevents.COUNTERS]
    kept, far = _lanes(cur, p, [(process, sql.format(**fmt)) for process, sql in lanes])
    own_overlap = kept.get(len(dbevents.LANES), 0) > 0
    notes += [f"{n} events of the {process} lane with a time before 1970 or beyond 2^62 ns (146 years from the "
              "epoch) were skipped" for process, n in far.items()]
    for sql in (dbevents.TARGETS, dbevents.OP_LINKS, dbevents.FLOWS):
        cur.execute(sql.format(p=p))
    skipped = {**dbevents.UNUSABLE, **dbevents.UNMATCHED}
    counts = [f"SELECT count(*) FROM ({dbevents.FFTS_PARENTS})", dbevents.LONELY_OPS, *skipped.values()]
    parents, lonely, *rows = cur.execute("SELECT " + ", ".join(f"({sql.format(p=p).strip()})" for sql in counts)
                                         ).fetchone()  # (one statement: each costs milliseconds)
    if parents:
        notes.append(f"{parents} FFTS+ parent tasks of TASK not drawn: their subtasks are (as in the text export)")
    if lonely:
        notes.append(f"{lonely} connection ids of torch ops (CONNECTION_IDS) lead to no task or other op in the db: "
                     "no flow drawn for them")
    for table, n in zip(skipped, rows):
        if n:
            why = "without a TASK row (no times)" if table in dbevents.UNMATCHED else "without a start or end time"
            notes.append(f"table {table}: {n} rows {why} were skipped")
    job.on_progress(READ_SHARE)
    return notes, own_overlap


def _shape_columns(cur, p: str) -> tuple[str, str, bool]:
    """Which PYTORCH_API column holds the input shapes: some torch_npu versions write types into inputShapes and
    shapes into inputDtypes. Types are words (float, ScalarList), shapes are numbers, so letters decide."""
    letters_in_shapes, letters_in_dtypes = cur.execute(f"""
        SELECT count(*) FILTER (WHERE regexp_matches(sh.value, '[A-Za-z]')),
               count(*) FILTER (WHERE regexp_matches(dt.value, '[A-Za-z]'))
        FROM {p}d_pytorch_api a LEFT JOIN {p}d_string_ids sh ON sh.id = a.input_shapes
        LEFT JOIN {p}d_string_ids dt ON dt.id = a.input_dtypes""").fetchone()
    if letters_in_shapes > letters_in_dtypes:
        return "input_dtypes", "input_shapes", True
    return "input_shapes", "input_dtypes", False


def _lanes(cur, p: str, lanes: list[tuple[str, str]]) -> tuple[dict[int, int], dict[str, int]]:
    """Build every lane's rows (``lanes``: process, SQL) in ``{p}lanes`` (its number in ``k``), then append them
    to ``{p}ev_t`` lane by lane, each followed by its process and thread metadata; the lanes the flows read are
    views ``{p}lane_<name>``. Events before 1970, or too far from the epoch for any interval to fit in int64, are
    dropped. Returns the rows kept per lane number and the rows dropped per process. (One table and one statement
    for all lanes: a statement costs milliseconds whatever its size, and a rank's db had ~80 of them.)"""
    table = f"{p}lanes"
    cur.execute(f"CREATE OR REPLACE TABLE {table} ({dbevents.LANE_COLUMNS}, k INTEGER)")
    for k, (_, select) in enumerate(lanes):
        cur.execute(f"INSERT INTO {table} SELECT *, {k} FROM ({select})")
    out = (f"coalesce(ts_ns NOT BETWEEN 0 AND {LIMIT_NS} OR coalesce(dur_ns, 0) NOT BETWEEN -{LIMIT_NS} AND "
           f"{LIMIT_NS}, false)")
    counts = cur.execute(f"SELECT k, count(*) FILTER (WHERE NOT {out}), count(*) FILTER (WHERE {out}) FROM {table} "
                         "GROUP BY k").fetchall()
    far: dict[str, int] = {}
    for k, _, dropped in counts:
        if dropped:
            far[lanes[k][0]] = far.get(lanes[k][0], 0) + dropped
    if far:
        cur.execute(f"DELETE FROM {table} WHERE {out}")
    info = ", ".join(f"({k}, '{process}', {dbevents.PROCESSES[process][0]}, "
                     f"{str(dbevents.PROCESSES[process][1] == 'CPU').lower()})" for k, (process, _) in enumerate(lanes))
    cur.execute(dbevents.LANE_EVENTS.format(p=p, lanes=table, info=info))
    for name, k in dbevents.LANE_VIEWS.items():
        cur.execute(f"CREATE OR REPLACE VIEW {p}lane_{name} AS SELECT * EXCLUDE (k) FROM {table} WHERE k = {k}")
    return {k: n for k, n, _ in counts}, far


def _derive_overlap(job: Job) -> int:
    """Append an Overlap Analysis lane computed from the device lanes (compute = tasks with compute info,
    communication = the communication operators); return its number of slices."""
    cols = job.cur.execute(f"""
        SELECT CASE role WHEN 'compute' THEN 0 ELSE 2 END AS what, ts_ns, ts_ns + greatest(dur_ns, 0) AS end_ns
        FROM {job.prefix}lane_hw
        UNION ALL
        SELECT 1, ts_ns, ts_ns + greatest(dur_ns, 0) FROM {job.prefix}lane_comm WHERE role = 'op'""").fetchnumpy()
    return overlap.append_lanes(job.cur, job.prefix, np.asarray(cols["what"]),
                                np.asarray(cols["ts_ns"], dtype=np.int64), np.asarray(cols["end_ns"], dtype=np.int64),
                                rank=job.rank)
