"""Why a view section has no rows: the file or table that would have fed it, per rank, in the run's format.

Contract: :func:`explain` takes a runner, a view name from :data:`SECTIONS` (``timeline``, ``operator``, ``memory``,
``summary``, ``communication``) and optionally one rank, and answers ``{section: {"label", "sources", "ranks",
"more"}}`` where ``ranks`` lists only the ranks without rows in that section (at most :data:`MAX_RANKS_LISTED`;
``more`` counts the others), each with a ``reason`` code and a sentence (``message``) naming the source:

* ``missing``  — the rank's output had no such file (``kernel_details.csv was not in rank 1's output``);
* ``empty``    — the file was there with no data rows;
* ``failed`` / ``skipped`` — the file was not loaded, with the loader's warning;
* ``no_rows``  — it was loaded but gave no usable rows for this section (its warnings say why);
* ``no_table`` — the rank was read from the db export and its table gave no rows (the table is absent or empty:
  the run database does not record which);
* ``no_source`` — the rank's format has nothing that feeds the section (the db export has no operator_details).

A rank's format is read off the ``files`` table: a rank with a ``db_export`` or ``analysis_db`` file was read from
the db export, one with the text export's files from those, anything else from another reader (named by its files).
A run with no rank at all answers one entry with ``rank`` null. Everything here is bounded and read-only.

:func:`source_names` names, per rank, where a run table's rows came from in that rank's format
(``step_trace_time.csv`` for a text export, ``analysis.db StepTraceTime`` for a db export, msprof's
``step_trace_*.csv``…), so a view cites the file or table its numbers were read from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from ascendscope.ingest.trace_tables import MISSING, TRACE_WARNING_FILES

MAX_RANKS_LISTED = 32
MAX_WARNING_CHARS = 300
DB_KINDS = ("db_export", "analysis_db")
# the text export's file kinds as ingest names them in ``files.kind`` (ingest's reader layer is not imported: the
# web process reads what the database says, whatever version of ingest wrote it)
TEXT_KINDS = frozenset({"trace_view", "kernel_details", "operator_details", "op_statistic", "api_statistic",
                        "step_trace_time", "memory_record", "operator_memory", "npu_module_mem", "l2_cache",
                        "communication", "communication_matrix"})
DB_FILES = {"db_export": "ascend_pytorch_profiler_{rank}.db", "analysis_db": "analysis.db"}

FILES_SQL = "SELECT rank, file, kind, rows, status FROM files WHERE rank IS NOT NULL ORDER BY rank, file"
RANKS_SQL = "SELECT rank FROM ranks ORDER BY rank"
FILE_WARNING_SQL = "SELECT message FROM warnings WHERE file = ? ORDER BY message LIMIT 1"
# warnings of a db file that name the table (e.g. "table OP_MEMORY has no column …")
TABLE_WARNING_SQL = """
SELECT message FROM warnings WHERE file = ? AND list_has_any(string_split_regex(message, '[^A-Za-z_]+'), ?)
ORDER BY message LIMIT 1
"""
RUN_WARNINGS_SQL = "SELECT file, message FROM warnings WHERE rank IS NULL ORDER BY file LIMIT 3"


@dataclass(frozen=True)
class Feed:
    """One source of a section: the run table it fills, counted per rank by ``count_sql``; the text export's file
    (kind and name); the db export's file kind and table names (``db_kind`` None: the db export has no such
    data)."""

    what: str
    count_sql: str
    text_kind: str
    text_name: str
    db_kind: str | None
    db_tables: tuple[str, ...] = ()

    @property
    def db_label(self) -> str:
        return " + ".join(self.db_tables)


def _count(table: str, where: str = "") -> str:
    return f"SELECT rank, count(*) FROM {table} {where} GROUP BY rank"


KERNELS = Feed("kernels", _count("kernels"), "kernel_details", "kernel_details.csv", "db_export",
               ("TASK", "COMPUTE_TASK_INFO"))
TORCH_OPS = Feed("torch ops", _count("operators"), "operator_details", "operator_details.csv", None)
MEMORY_RECORDS = Feed("memory records", _count("memory_record"), "memory_record", "memory_record.csv", "db_export",
                      ("MEMORY_RECORD",))
ALLOCATIONS = Feed("operator allocations", _count("operator_memory"), "operator_memory", "operator_memory.csv",
                   "db_export", ("OP_MEMORY",))
MODULES = Feed("module memory", _count("npu_module_mem"), "npu_module_mem", "npu_module_mem.csv", "db_export",
               ("NPU_MODULE_MEM",))
STEP_TRACE = Feed("step times", _count("step_trace"), "step_trace_time", "step_trace_time.csv", "analysis_db",
                  ("StepTraceTime",))
OVERLAP = Feed("Overlap Analysis lane", _count("tracks", "WHERE kind = 'overlap'"), "trace_view",
               "trace_view.json", "db_export", ("TASK",))
COMM_OPS = Feed("communication ops", _count("comm_ops"), "communication", "communication.json", "analysis_db",
                ("CommAnalyzerTime",))
COMM_MATRIX = Feed("communication matrix links", _count("comm_matrix"), "communication_matrix",
                   "communication_matrix.json", "analysis_db", ("CommAnalyzerMatrix",))
TRACE = Feed("timeline", _count("tracks"), "trace_view", "trace_view.json", "db_export",
             ("PYTORCH_API", "CANN_API", "TASK"))

# run table -> its feed, for source_names; and the msprof files (``files.kind``) that fill the table
TABLE_FEEDS = {"step_trace": STEP_TRACE, "kernels": KERNELS, "operators": TORCH_OPS, "comm_ops": COMM_OPS,
               "comm_matrix": COMM_MATRIX, "memory_record": MEMORY_RECORDS, "operator_memory": ALLOCATIONS,
               "npu_module_mem": MODULES}
OTHER_KINDS = {"kernels": ("msprof_op_summary",),
               "comm_ops": ("msprof_communication",), "comm_matrix": ("msprof_communication_matrix",)}
TRACE_NAMES = {"kernels": "the trace's Ascend Hardware tasks", "comm_ops": "the trace's communication lanes"}
# ranks whose rows of a table ingest made from the trace (it warns about the file they lacked)
FROM_TRACE_SQL = "SELECT DISTINCT rank FROM warnings WHERE file = ? AND starts_with(message, ?) ORDER BY rank"

# view -> section -> the feeds that fill it (a rank is listed when none of them gave it rows)
SECTIONS: dict[str, dict[str, tuple[Feed, ...]]] = {
    "timeline": {"trace": (TRACE,)},
    "operator": {"kernels": (KERNELS,), "torch": (TORCH_OPS,)},
    "memory": {"records": (MEMORY_RECORDS,), "allocations": (ALLOCATIONS,), "modules": (MODULES,)},
    "summary": {"breakdown": (STEP_TRACE, OVERLAP), "breakdown_step_trace": (STEP_TRACE,),
                "breakdown_overlap": (OVERLAP,), "top_operators": (KERNELS,)},
    "communication": {"ops": (COMM_OPS,), "matrix": (COMM_MATRIX,)},
}


class _RunFiles:
    """The ``files`` table by rank, read once per call."""

    def __init__(self, db) -> None:
        self.by_rank: dict[int, dict[str, tuple[str, int | None, str]]] = {}
        for rank, file, kind, rows, status in db.rows(FILES_SQL):
            self.by_rank.setdefault(int(rank), {})[kind] = (file, rows, status)

    def format_of(self, rank: int) -> str:
        kinds = self.by_rank.get(rank, {})
        if any(k in kinds for k in DB_KINDS):
            return "db"
        if any(k in TEXT_KINDS for k in kinds):
            return "text"
        return "other"


def _name(path: str) -> str:
    return PurePosixPath(path).name


def _clip(text: str) -> str:
    text = text.removeprefix("not loaded: ")  # the message already says it was not loaded
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 1] + "…"


def _warning(db, file: str, tables: tuple[str, ...] = ()) -> str | None:
    if tables:
        row = db.rows(TABLE_WARNING_SQL, [file, list(tables)])
    else:
        row = db.rows(FILE_WARNING_SQL, [file])
    return _clip(row[0][0]) if row else None


def _unloaded(db, rank: int, label: str, file: str, status: str) -> tuple[str, str, str]:
    """The reason for a file that failed to load or was skipped, with its warning."""
    why = _warning(db, file)
    verb = "failed to load" if status == "failed" else "was skipped"
    return status, f"rank {rank}'s {label} {verb}" + (f": {why}" if why else ""), file


def _text_reason(db, feed: Feed, rank: int, files: dict) -> tuple[str, str, str | None]:
    got = files.get(feed.text_kind)
    if got is None:
        return "missing", f"{feed.text_name} was not in rank {rank}'s output", None
    file, rows, status = got
    if status in ("failed", "skipped"):
        return _unloaded(db, rank, feed.text_name, file, status)
    if not rows:
        return "empty", f"rank {rank}'s {feed.text_name} was present but empty", file
    why = _warning(db, file)
    message = f"rank {rank}'s {feed.text_name} ({rows} rows) gave no {feed.what}" + (f": {why}" if why else "")
    return "no_rows", message, file


def _db_reason(db, feed: Feed, rank: int, files: dict) -> tuple[str, str, str | None]:
    if feed.db_kind is None:
        db_file = files.get("db_export", files.get("analysis_db", ("the db export",)))[0]
        return ("no_source", f"rank {rank} was read from the db export ({_name(db_file)}), which has no "
                             f"{feed.what} ({feed.text_name} has no db counterpart)", None)
    got = files.get(feed.db_kind)
    expected = DB_FILES[feed.db_kind].format(rank=rank)
    if got is None:
        return "missing", f"{expected} ({feed.db_label}) was not in rank {rank}'s output", None
    file, _rows, status = got
    if status in ("failed", "skipped"):
        return _unloaded(db, rank, _name(file), file, status)
    why = _warning(db, file, feed.db_tables)
    return ("no_table", f"rank {rank}'s {_name(file)} gave no {feed.db_label} rows (the table is absent or empty)"
            + (f": {why}" if why else ""), file)


def _reason(db, feed: Feed, rank: int, run_files: _RunFiles) -> dict:
    files = run_files.by_rank.get(rank, {})
    fmt = run_files.format_of(rank)
    if fmt == "text":
        reason, message, file = _text_reason(db, feed, rank, files)
    elif fmt == "db":
        reason, message, file = _db_reason(db, feed, rank, files)
    else:
        names = sorted(_name(f) for f, _r, _s in files.values())
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        reason, file = "no_source", None
        message = (f"rank {rank} was read from {shown}, which gave no {feed.what}" if names
                   else f"no file of rank {rank} was loaded")
    return {"rank": rank, "reason": reason, "source": _source_label(feed, fmt), "file": file, "message": message}


def source_names(db, table: str) -> dict[int, str]:
    """``{rank: name}`` of the file or table the rows of run table ``table`` came from, per rank, in the rank's
    format: the text export's file, the db export's ``<file> <TABLE>``, msprof's files, or (kernels of a rank
    without a kernel table) the trace."""
    feed = TABLE_FEEDS[table]
    run_files = _RunFiles(db)
    traced = set(from_trace(db, table))
    out = {}
    for rank in (int(r[0]) for r in db.rows(RANKS_SQL)):
        files = run_files.by_rank.get(rank, {})
        fmt = run_files.format_of(rank)
        if rank in traced:
            out[rank] = TRACE_NAMES[table]
        elif fmt == "text" and feed.text_kind in files:
            out[rank] = feed.text_name
        elif fmt == "db" and feed.db_kind in files:
            out[rank] = f"{DB_FILES[feed.db_kind].format(rank=rank)} {feed.db_label}"
        elif other := [f for k in OTHER_KINDS.get(table, ()) if (f := files.get(k))]:
            out[rank] = _name(other[0][0])
        else:
            out[rank] = feed.text_name if fmt == "text" else _source_label(feed, fmt)
    return out


def from_trace(db, table: str) -> list[int]:
    """The ranks whose ``table`` rows (``kernels`` or ``comm_ops``) ingest made from the trace, their source file
    being absent."""
    file = TRACE_WARNING_FILES.get(table)
    return [int(r[0]) for r in db.rows(FROM_TRACE_SQL, [file, MISSING])] if file else []


def lacked_by(db, table: str, ranks: list[int]) -> list[str]:
    """What ``ranks`` lacked for ``table``, named in each rank's format (``communication.json``,
    ``CommAnalyzerTime (analysis.db)``), each name once."""
    run_files = _RunFiles(db)
    return sorted({_source_label(TABLE_FEEDS[table], run_files.format_of(rank)) for rank in ranks})


def _source_label(feed: Feed, fmt: str) -> str:
    if fmt == "db" and feed.db_kind:
        return f"{feed.db_label} ({DB_FILES[feed.db_kind].format(rank='N')})"
    return feed.text_name


def _counts(db, feed: Feed, cache: dict) -> dict[int, int]:
    if feed.count_sql not in cache:
        cache[feed.count_sql] = {int(r): int(n) for r, n in db.rows(feed.count_sql) if r is not None}
    return cache[feed.count_sql]


def explain(db, view: str, rank: int | None = None, sections: tuple[str, ...] | None = None) -> dict:
    """``{section: {"label", "sources", "ranks": [{rank, reason, source, file, message}], "more"}}`` for the
    ranks (all, or ``rank``) that have no rows in the section; ``sources`` names every file or table that feeds
    it, in both formats."""
    wanted = SECTIONS[view]
    ranks = [int(r[0]) for r in db.rows(RANKS_SQL)]
    if rank is not None:
        ranks = [rank] if rank in ranks else []
    run_files = _RunFiles(db)
    cache: dict[str, dict[int, int]] = {}
    out = {}
    for name, feeds in wanted.items():
        if sections is not None and name not in sections:
            continue
        counts = [_counts(db, f, cache) for f in feeds]
        empty = [r for r in ranks if not any(c.get(r) for c in counts)]
        listed = []
        for r in empty[:MAX_RANKS_LISTED]:
            reasons = [_reason(db, f, r, run_files) for f in feeds]
            first = dict(reasons[0])
            if len(reasons) > 1:
                first["message"] = "; ".join(x["message"] for x in reasons)
                first["source"] = " or ".join(x["source"] for x in reasons)
            listed.append(first)
        if not ranks and rank is None:
            listed = [_no_rank(db)]
        out[name] = {"label": feeds[0].what, "sources": _all_sources(feeds), "ranks": listed,
                     "more": max(0, len(empty) - MAX_RANKS_LISTED)}
    return out


def _all_sources(feeds: tuple[Feed, ...]) -> list[str]:
    names = []
    for f in feeds:
        names.append(f.text_name)
        if f.db_kind:
            names.append(f"{f.db_label} ({DB_FILES[f.db_kind].format(rank='N')})")
    return names


def _no_rank(db) -> dict:
    notes = db.rows(RUN_WARNINGS_SQL)
    tail = "; ".join(f"{_name(f)}: {_clip(m)}" for f, m in notes)
    return {"rank": None, "reason": "missing", "source": None, "file": None,
            "message": "no rank of this run was loaded" + (f" ({tail})" if tail else "")}
