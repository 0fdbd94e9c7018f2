"""Reader of torch_npu's db export: ``ascend_pytorch_profiler[_{rank}].db`` and ``analysis.db`` (FORMATS.md §7).

A rank whose ASCEND_PROFILER_OUTPUT holds text-export files is read from those (the db files beside them are
reported, not read); a rank with only the db files is read from them. A CANN ``msprof_{n}.db`` has the same device
tables and is read the same way when it is opened on its own.

Staging a profiler db (``dbstage``): its tables are copied into DuckDB (``ingest.readers.sqlitedb``), the trace
events are synthesised from them (``dbevents``) and derived by ``ingest.trace`` like a trace_view.json (an Overlap
Analysis lane is computed when the db has none: compute = tasks with a COMPUTE_TASK_INFO row, communication =
COMMUNICATION_OP), then the CSV-shaped tables are made (``dbtables``). analysis.db gives the step trace and the
communication rows (``dbanalysis``). What is not read — unknown tables, missing columns, rows without times, values
of the wrong type — is named in the warnings. ``stage_many`` stages one kind of several small ranks at once, as
the text export's reader does (``ingest.stages``): the same statements as one rank, each rank's rows as if alone.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path

from . import dbanalysis, dbsource, dbstage, sqlitedb
from .protocol import Found, Job, Staged

# MindSpore's db export (export_type db) is CANN's msprof db moved into ASCEND_PROFILER_OUTPUT under its own name
PROFILER_DB = re.compile(r"^ascend_(?:pytorch|mindspore)_profiler(?:_\d+)?\.db$")
MSPROF_DB = re.compile(r"^(?:msprof|report)_\d+\.db$")  # report_N.db: its name in CANN of early 2024
ANALYSIS_DB = "analysis.db"
SQLITE_SIDECAR = re.compile(r"-(?:wal|shm|journal)$")


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

    def stage_many(self, job: Job, kind: str, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
        return stage_many(job, kind, items)

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        got = stage_many(job, kind, [(job.rank, path, job.display)])[job.rank]
        if isinstance(got, Exception):
            raise got
        return got


READER = DbExportReader()


def stage_many(job: Job, kind: str, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
    """One file kind of several ranks at once (``items``: rank, path, display name), into the stage's tables
    (``job.prefix``, CSV-shaped tables at ``job.csv_prefix``), every row tagged with its rank; rank -> what its
    file gave, or the error that stopped it (as ``stage`` would raise it). Raises when the whole kind fails."""
    if kind == "db_export":
        return dbstage.stage_profiler_dbs(job, items)
    if kind == "analysis_db":
        return _stage_analyses(job, items)
    raise ValueError(f"not a db-export file kind: {kind}")


def _stage_analyses(job: Job, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
    """analysis.db of each rank: its communication rows, and one ``step_trace`` table of every rank that has one."""
    out: dict[int, Staged | Exception] = {}
    steps: list[list[dict]] = []
    for rank, path, _display in items:
        try:
            con = sqlitedb.connect(path)
            try:
                staged, rows = _stage_analysis(con, rank)
            except sqlite3.Error as exc:
                raise ValueError(f"the SQLite database cannot be read: {exc}") from exc
            finally:
                con.close()
        except (ValueError, OSError) as exc:
            out[rank] = exc
            continue
        if rows is not None:
            steps.append(rows)
        staged.warnings += sqlitedb.sidecar_notes(path)
        out[rank] = staged
    if steps:
        dbanalysis.create_step_trace(job.cur, job.csv_prefix, steps)
    return out


def _stage_analysis(con, rank: int) -> tuple[Staged, list[dict] | None]:
    """What one analysis.db gives, and its step trace rows (None when it has no StepTraceTime)."""
    present = sqlitedb.tables(con)
    rows, copied = dbanalysis.read(con, present, rank)
    staged = Staged(rows=sum(c.rows for c in copied.values()))
    staged.warnings += dbstage.copy_notes(copied.values())
    steps = rows.pop("step_trace")
    if copied["step_trace_time"].present:
        staged.tables.append("step_trace")
    else:
        steps = None
    staged.comm = {name: r for name, r in rows.items() if r}
    read = {table.upper() for table, _ in dbsource.ANALYSIS_TABLES.values()}
    staged.warnings += dbstage.unread(con, present, read)
    return staged, steps
