"""Ingest a path into one DuckDB file per run, atomically.

``ingest_path(src, out)`` discovers the ranks and loads every file in parallel (a thread pool, each task with
its own DuckDB cursor; DuckDB releases the GIL) into ``out + ".tmp-<pid>"``, renamed to ``out`` only when
everything is written: a failed or interrupted ingest leaves no file at ``out``.

Each trace is staged in an in-memory scratch database (spilling to a temporary folder past the memory limit) and
derived there; as soon as a rank's slices are nested, a writer appends its tracks and slices to the run's
tables (in rank order, while its flows are still being derived and other files load), then its flows, counters
and steps. CSV and JSON tables are assembled while traces still load (with one rank, CSVs are typed straight into
the file). A broken input file becomes a row in ``warnings`` (naming the file and what is wrong) and the rest of
the run still loads. Every file is staged by the reader of its format (``ingest.readers``: the text export, the
db export, msprof output, Chrome traces) into the same staging tables; one that yields a timeline is written like
a trace.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import duckdb

from . import SCHEMA_VERSION, archive, commfiles, csvfiles, jsonfile, lod, overlap, readers, sqlfuncs, trace, tracefile
from .discover import Discovery, RankSource, discover
from .layout import MAX_SHARD_RANK, SLICE_ID_BITS, TRACK_ID_BITS
from .readers import text as text_reader
from .schema import CORE_DDL, EMPTY_TABLES

# file kinds that yield a timeline (appended by the trace writer in rank order)
TIMELINE_KINDS = readers.TIMELINE_KINDS


@dataclass(frozen=True)
class IdBases:
    """Where a run's ids start, and how many one rank may use (None: unbounded). A single-file run numbers every
    rank's ids on from the previous rank's; a shard gives its rank a fixed range (:func:`rank_id_bases`) so the
    shards of a run union without renumbering."""

    track: int = 0
    slice: int = 0  # slice_id and flow_id
    track_span: int | None = None
    slice_span: int | None = None


def rank_id_bases(rank: int) -> IdBases:
    """The id range of one rank's shard: track ids from ``rank << 16``, slice and flow ids from ``rank << 36``
    (below 2**53 for every rank a track id allows, so the browser's numbers stay exact)."""
    if not 0 <= rank <= MAX_SHARD_RANK:
        raise ValueError(f"rank {rank} is outside the ranks a shard's ids can hold (0..{MAX_SHARD_RANK})")
    return IdBases(track=rank << TRACK_ID_BITS, slice=rank << SLICE_ID_BITS, track_span=1 << TRACK_ID_BITS,
                   slice_span=1 << SLICE_ID_BITS)


class IdRangeError(Exception):
    """A rank has more tracks or slices than its shard's id range holds."""


class NoProfilingData(Exception):
    """Nothing loadable was found; ``warnings`` says what was seen instead."""

    def __init__(self, message: str, warnings: list[tuple] | None = None):
        super().__init__(message)
        self.warnings = warnings or []


class Progress:
    """Receives progress events; the CLI draws a bar from them. Methods may be called from several threads."""

    def begin(self, total_bytes: int, ranks: int) -> None: ...
    def file_start(self, rank: int, name: str, size: int) -> None: ...
    def file_done(self, rank: int, name: str, size: int, seconds: float) -> None: ...
    def phase(self, text: str) -> None: ...
    def file_progress(self, rank: int, name: str, done_bytes: int) -> None:
        """Part of a big file is done (called repeatedly while it loads; ``file_done`` still follows)."""


@dataclass
class RankResult:
    src: RankSource
    idx: int
    prefix: str  # its stage's (see Stage)
    files: list[dict] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    has_trace: bool = False
    overlap_source: str | None = None
    comm: dict[str, list[dict]] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)
    device_id: int | None = None  # from the memory CSVs
    trace_device_id: int | None = None  # from the trace's process labels ("NPU 3")
    csv_prefix: str = ""  # where the typed CSV tables are made: the run's own tables when there is one rank
    trace_entry: dict | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Stage:
    """The ranks staged together under one prefix: one rank (every file staged on its own, by its reader), or a
    group of small text-export ranks (``many``: each file kind of all of them staged at once, see
    ``readers.text.stage_many``). Its trace writer waits for ``nested``."""

    idx: int
    prefix: str
    members: list[RankResult]
    many: bool = False
    nested: threading.Event = field(default_factory=threading.Event)  # set once slices are final (or on failure)
    nest_ok: bool = False
    failed: bool = False  # the group's traces failed together: each is loaded again alone

    @property
    def ranks(self) -> list[int]:
        return [res.src.rank for res in self.members]


GROUP_BYTES = 32 << 20  # small ranks are staged (and sharded) together up to this much input …
GROUP_RANKS = 256  # … and this many ranks


def groupable(src: RankSource) -> bool:
    """A rank whose files are all text-export files (their kinds have a batch stager)."""
    return bool(src.files) and all(kind in text_reader.FILE_KINDS for kind in src.files)


def plan_groups(ranks: list[RankSource], target_bytes: int = GROUP_BYTES, max_ranks: int = GROUP_RANKS
                ) -> list[list[int]]:
    """Indices of ``ranks`` in groups: consecutive groupable ranks together while their input stays under
    ``target_bytes`` (a rank at least that big, or one of another format, is a group of its own)."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, src in enumerate(ranks):
        n = sum(readers.size(kind, path) for kind, path in src.files.items())
        if not groupable(src) or n >= target_bytes:
            if current:
                groups.append(current)
                current, size = [], 0
            groups.append([i])
            continue
        if current and (size + n > target_bytes or len(current) >= max_ranks):
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        groups.append(current)
    return groups


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def _stage_file(con, stage: Stage, res: RankResult, kind: str, path: Path, root: Path, work: Path,
                progress: Progress, split_read: bool) -> None:
    """Load one file of one rank into staging tables; problems become warnings of that rank."""
    try:
        _stage(con, stage, res, kind, path, root, work, progress, split_read)
    finally:
        if kind in TIMELINE_KINDS:
            stage.nested.set()  # whatever happened, never keep the writer waiting


def _entry(res: RankResult, kind: str, path: Path, root: Path) -> tuple[dict, int]:
    display = _display(path, root)
    if (group := readers.label(kind, path)) is not None:
        display = f"{display}/{group}"
    size = readers.size(kind, path)
    return {"rank": res.src.rank, "file": display, "kind": kind, "size_bytes": size, "rows": None,
            "status": "loaded"}, size


def _stage(con, stage: Stage, res: RankResult, kind: str, path: Path, root: Path, work: Path, progress: Progress,
           split_read: bool) -> None:
    cur = con.cursor()
    sqlfuncs.install(cur)
    rank = res.src.rank
    entry, size = _entry(res, kind, path, root)
    display = entry["file"]
    progress.file_start(rank, display, size)
    t0 = time.perf_counter()
    warnings: list[str] = []
    try:
        if size == 0:
            raise tracefile.TraceFileError("empty file")

        def nested():
            stage.nest_ok = True
            stage.nested.set()

        got = readers.stage(readers.Job(
            cur=cur, prefix=res.prefix, csv_prefix=res.csv_prefix, rank=rank, display=display,
            workdir=work / f"r{res.idx}", on_progress=lambda f: progress.file_progress(rank, display, int(f * size)),
            on_nested=nested, split_read=split_read), kind, path)
        _took(res, got, entry, warnings)
    except Exception as exc:  # noqa: BLE001 - an unexpected bug must not take the other files down with it
        _failed(entry, warnings, exc)
    finally:
        cur.close()
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    _record(res, kind, entry, warnings)
    progress.file_done(rank, display, size, entry["seconds"])


def _took(res: RankResult, got, entry: dict, warnings: list[str]) -> None:
    """What staging a file gave (``readers.Staged``), into its rank's result and file entry."""
    res.has_trace = res.has_trace or got.timeline
    res.overlap_source = got.overlap_source or res.overlap_source
    res.tables.extend(got.tables)
    for name, rows in got.comm.items():
        res.comm.setdefault(name, []).extend(rows)
    entry["rows"], entry["status"] = got.rows, got.status
    warnings.extend(got.warnings)


def _failed(entry: dict, warnings: list[str], exc: BaseException) -> None:
    entry["status"] = "failed"
    if isinstance(exc, (tracefile.TraceFileError, duckdb.Error, ValueError, OSError, UnicodeError)):
        warnings.append(f"not loaded: {_message(exc)}")
    else:
        warnings.append(f"not loaded (internal error {type(exc).__name__}): {_message(exc)}")


def _record(res: RankResult, kind: str, entry: dict, warnings: list[str]) -> None:
    with res.lock:
        if kind in TIMELINE_KINDS:
            res.trace_entry = entry
        res.files.append(entry)
        res.warnings.extend((entry["file"], w) for w in warnings)


def _stage_kind(con, stage: Stage, kind: str, root: Path, work: Path, progress: Progress) -> None:
    """One file kind of every rank of a group, staged at once (``readers.text.stage_many``); each rank gets its
    file entry and warnings as if its file had been staged alone. The time is shared out by size."""
    cur = con.cursor()
    sqlfuncs.install(cur)
    members = [res for res in stage.members if kind in res.src.files]
    entries = {res.src.rank: _entry(res, kind, res.src.files[kind], root) for res in members}
    total = sum(size for _, size in entries.values()) or 1
    label = f"{members[0].src.files[kind].name} ×{len(members)}"
    progress.file_start(stage.ranks[0], label, total)
    t0 = time.perf_counter()

    def nested():
        stage.nest_ok = True
        stage.nested.set()

    job = readers.Job(cur=cur, prefix=stage.prefix, csv_prefix=members[0].csv_prefix, rank=members[0].src.rank,
                      display=label, workdir=work / f"g{stage.idx}_{kind}",
                      on_progress=lambda f: progress.file_progress(stage.ranks[0], label, int(f * total)),
                      on_nested=nested)
    try:
        got = text_reader.stage_many(job, kind, [(res.src.rank, res.src.files[kind], entries[res.src.rank][0]["file"])
                                                 for res in members])
    except Exception as exc:  # noqa: BLE001 - the kind failed for the whole group
        if kind in TIMELINE_KINDS:
            stage.failed = True  # its ranks' traces are loaded again one by one
            got = None
        else:
            got = dict.fromkeys((res.src.rank for res in members), exc)
    finally:
        cur.close()
        if kind in TIMELINE_KINDS:
            stage.nested.set()
    seconds = time.perf_counter() - t0
    for res in members:
        entry, size = entries[res.src.rank]
        if got is None:
            continue
        warnings: list[str] = []
        outcome = got.get(res.src.rank)
        if isinstance(outcome, BaseException) or outcome is None:
            _failed(entry, warnings, outcome or ValueError("not staged"))
        else:
            _took(res, outcome, entry, warnings)
        entry["seconds"] = round(seconds * size / total, 3)
        _record(res, kind, entry, warnings)
    progress.file_done(stage.ranks[0], label, total, round(seconds, 3))


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


DEVICE_FROM_TRACE = """
SELECT rank, arg_min(regexp_extract(label, 'NPU\\s+([0-9]+)', 1), local_track) FROM {p}tracks
WHERE label LIKE 'NPU %' GROUP BY rank
"""
DEVICE_FROM_MEMORY = """
SELECT rank, arg_min(regexp_extract({column}, 'NPU:?\\s*([0-9]+)', 1), src_row) FROM {table}
WHERE {column} LIKE 'NPU%' GROUP BY rank
"""


def _device_ids(cur, stage: Stage, from_trace: bool = False) -> None:
    """Each member's device id: from its trace's process labels ("NPU 3"), or from its memory CSVs."""
    members = {res.src.rank: res for res in stage.members}
    if from_trace:
        probes = [DEVICE_FROM_TRACE.format(p=stage.prefix)]
    else:
        csv_prefix = stage.members[0].csv_prefix
        probes = [DEVICE_FROM_MEMORY.format(table=f"{csv_prefix}{table}", column=column)
                  for table, column in (("memory_record", "device_type"), ("npu_module_mem", "device"))
                  if any(table in res.tables for res in stage.members)]
    for sql in probes:
        try:
            rows = cur.execute(sql).fetchall()
        except duckdb.Error:
            continue
        for rank, value in rows:
            res = members.get(int(rank))
            if res is None or value in (None, ""):
                continue
            if from_trace and res.trace_device_id is None:
                res.trace_device_id = int(value)
            elif not from_trace and res.device_id is None:
                res.device_id = int(value)


def _write_traces(con, stages: list[Stage], trace_tasks: dict, bases: IdBases | None, at: list[int]) -> None:
    """Append each stage's trace tables to the run's tables, in stage order and as soon as they are ready: its
    tracks and slices once nested (while its flows are still being derived, and later stages and the CSVs still
    load), then its flows, counters and steps, each part in one transaction; a stage that fails part way is
    removed again. Then free its staging tables. ``bases``: each rank's fixed id range (a shard), else ids
    follow on from ``at`` (track, slice, flow: the next free of each), which is advanced."""
    cur = con.cursor()
    try:
        for stage in stages:
            task = trace_tasks.get(stage.idx)
            if task is None:
                continue
            stage.nested.wait()
            traced = [res for res in stage.members if res.has_trace or res.trace_entry is not None]
            if not stage.nest_ok or stage.failed:
                task.result()
                trace.drop_stage(cur, stage.prefix)
                continue
            ranks = [res.src.rank for res in stage.members]
            try:
                _device_ids(cur, stage, from_trace=True)
                counts = trace.staged_counts(cur, stage.prefix, flows=False)
                rows = _offsets(counts, bases, at, flows=False)
                trace.write_offsets(cur, stage.prefix, rows)
                _in_transaction(cur, trace.write_slices, stage.prefix, overlap.DERIVED_PID)
                task.result()
                if stage.failed:
                    raise _GroupFailed()
                # (a transaction only sees tables that existed when it began: the flows are newer)
                if any(res.has_trace for res in stage.members):
                    counts = trace.staged_counts(cur, stage.prefix)
                    trace.write_offsets(cur, stage.prefix, _offsets(counts, bases, at, flows=True))
                    _in_transaction(cur, trace.write_rest, stage.prefix)
                    _advance(at, counts, bases)
                else:  # failed after nesting: nothing of it is kept
                    _in_transaction(cur, trace.unwrite, ranks)
            except _GroupFailed:
                _in_transaction(cur, trace.unwrite, ranks)
            except (duckdb.Error, IdRangeError) as exc:
                _in_transaction(cur, trace.unwrite, ranks)
                if stage.many and len(traced) > 1:
                    stage.failed = True
                    continue
                for res in traced:
                    res.has_trace = False
                    with res.lock:
                        if res.trace_entry is not None:
                            res.trace_entry["status"] = "failed"
                            res.warnings.append((res.trace_entry["file"], f"not loaded: {_message(exc)}"))
            finally:
                trace.drop_stage(cur, stage.prefix)
    finally:
        cur.close()


class _GroupFailed(Exception):
    """A group's traces failed together (each is loaded again alone)."""


def _offsets(counts: dict, bases: IdBases | None, at: list[int], flows: bool) -> list[tuple]:
    """Offsets rows (trace.write_offsets) for the staged ranks ``counts`` (trace.staged_counts): each rank's ids
    from its fixed range (``bases``: a function of the rank), or following on from ``at``. Checks that every
    rank fits its range."""
    rows = []
    t, s, f = at
    for rank, (n_tracks, t_base, n_slices, s_base, n_flows, f_base) in sorted(counts.items()):
        b = bases(rank) if callable(bases) else IdBases(track=t, slice=s)
        _check_id_range(b, n_tracks, n_slices, 0, 0)
        rows.append((rank, rank, b.track - t_base, b.slice - s_base, (b.slice if callable(bases) else f) - f_base))
        if not callable(bases):
            t, s, f = t + n_tracks, s + n_slices, f + (n_flows if flows else 0)
    return rows


def _advance(at: list[int], counts: dict, bases) -> None:
    if callable(bases):
        return
    at[0] += sum(c[0] for c in counts.values())
    at[1] += sum(c[2] for c in counts.values())
    at[2] += sum(c[4] for c in counts.values())


def _check_id_range(bases: IdBases, n_tracks: int, n_slices: int, used_tracks: int, used_slices: int) -> None:
    """Ids are local ids (from 1) plus the base: a rank must fit below the next rank's base."""
    if bases.track_span is not None and used_tracks + n_tracks >= bases.track_span:
        raise IdRangeError(f"{n_tracks} tracks, more than the {bases.track_span - 1} a shard's track ids hold")
    if bases.slice_span is not None and used_slices + n_slices >= bases.slice_span:
        raise IdRangeError(f"{n_slices} slices, more than the {bases.slice_span - 1} a shard's slice ids hold")


def _in_transaction(cur, work, *args):
    """``work(cur, *args)`` in one transaction on ``cur``."""
    cur.execute("BEGIN TRANSACTION")
    try:
        result = work(cur, *args)
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")
    return result


def _assemble_files(con, stages: list[Stage], staged: list, work: Path) -> None:
    """The tables of the CSV and JSON files, from every stage's staging tables (runs while traces still load)."""
    wait(staged)
    cur = con.cursor()
    for stage in stages:
        _device_ids(cur, stage)  # the memory CSVs name the device; read them before they go
    results = [res for stage in stages for res in stage.members]
    prefixes = list(dict.fromkeys(res.csv_prefix for res in results))
    for table in sorted(set(csvfiles.TABLES.values())):
        if prefixes == ["main."]:  # one rank: its table was made in place (or is missing or failed: made empty)
            if not any(table in res.tables for res in results):
                cur.execute(f"DROP TABLE IF EXISTS main.{table}")
                cur.execute(EMPTY_TABLES[table])
            continue
        have = [p for p in prefixes if any(res.csv_prefix == p and table in res.tables for res in results)]
        if have:
            cur.execute(f"CREATE TABLE {table} AS " + " UNION ALL BY NAME ".join(f"SELECT * FROM {p}{table}"
                                                                               for p in have))
            for p in prefixes:
                cur.execute(f"DROP TABLE IF EXISTS {p}{table}")
        else:
            cur.execute(EMPTY_TABLES[table])
    for name in commfiles.COLUMNS:
        commfiles.create_table(cur, name, [row for res in results for row in res.comm.get(name, [])], work)
    cur.close()


def insert_rows(con, table: str, rows: list) -> None:
    """Append ``rows`` (sequences of one length, in the table's column order) to ``table`` in one statement: one
    list parameter per column, unnested side by side (a statement per row costs a millisecond: seconds for the
    files of a thousand ranks; and an Arrow table made from Python values would import pandas, ~1 s)."""
    if not rows:
        return
    columns = [list(c) for c in zip(*rows)]
    con.execute(f"INSERT INTO {table} SELECT " + ", ".join("unnest(?)" for _ in columns), columns)


EXTENTS_SQL = "SELECT rank, min(min_ts_ns), max(max_end_ns) FROM tracks WHERE slice_count > 0 GROUP BY rank"


def _assemble(con, results: list[RankResult], root: Path, src_path: Path, started: float,
              extra_warnings: list[tuple], progress: Progress) -> dict:
    # runs without a memory CSV: the trace's process labels ("NPU 3") may name the device
    devices = {res.idx: next((d for d in (res.device_id, res.trace_device_id, res.src.device_id) if d is not None),
                             None) for res in results}
    con.execute("DETACH stage")  # staging is done: give its memory to the level-of-detail build
    progress.phase("building the level-of-detail tables")
    lod.build(con)
    progress.phase("writing metadata")

    warnings = list(extra_warnings)
    files = []
    ranks = []
    extents = {int(r): (lo, hi) for r, lo, hi in con.execute(EXTENTS_SQL).fetchall()}
    for res in results:
        r = res.src.rank
        warnings.extend((r, f, m) for f, m in res.warnings)
        files.extend(res.files)
        info = res.src.profiler_info if isinstance(res.src.profiler_info, dict) else {}
        metadata = None
        if res.src.metadata_path is not None:
            try:
                metadata = jsonfile.load(res.src.metadata_path)
            except ValueError as exc:
                warnings.append((r, _display(res.src.metadata_path, root), f"invalid JSON, ignored: {exc}"))
        exp = (info.get("config") or {}).get("experimental_config") or {} if info else {}
        extent = extents.get(r, (None, None))
        ranks.append([r, devices[res.idx], _display(res.src.folder, root) if res.src.folder != root else ".",
                      res.src.rank_source, exp.get("_profiler_level"), info.get("torch_npu_version"),
                      info.get("cann_version"), res.has_trace, res.overlap_source, extent[0], extent[1],
                      json.dumps(info) if info else None, json.dumps(metadata) if metadata is not None else None])
        for extra in (res.src.profiler_info_path, res.src.metadata_path):
            if extra is not None:
                files.append({"rank": r, "file": _display(extra, root), "kind": extra.stem.rstrip("_0123456789"),
                              "size_bytes": extra.stat().st_size, "rows": None, "status": "loaded",
                              "seconds": 0.0})
    insert_rows(con, "ranks", ranks)
    insert_rows(con, "files", [[f["rank"], f["file"], f["kind"], f["size_bytes"], f["rows"], f["status"],
                                f["seconds"]] for f in files])
    insert_rows(con, "warnings", warnings)
    bytes_read = sum(f["size_bytes"] for f in files)
    meta = {"schema_version": str(SCHEMA_VERSION), "ascendscope_version": _version(), "source_path": str(src_path),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "ingest_seconds": f"{time.perf_counter() - started:.3f}", "bytes_read": str(bytes_read)}
    insert_rows(con, "meta", list(meta.items()))
    build_cluster_tables(con)
    return summarize(con)


def load_cluster_analysis(con, root: Path) -> list[dict]:
    """msprof-analyze's ``cluster_analysis_output`` under the source into ``cluster_analysis_*`` tables
    (``ingest.cluster``); its warnings go to ``warnings`` (run-wide: no rank) and are returned."""
    try:
        from .cluster import load_cluster_analysis as load
    except ImportError:
        return []
    rows = []
    for text in load(con, root) or []:
        file, sep, message = str(text).partition(": ")
        rows.append((None, file, message) if sep else (None, "cluster_analysis_output", str(text)))
    if rows:
        con.executemany("INSERT INTO warnings VALUES (?, ?, ?)", [list(r) for r in rows])
    return [{"rank": r, "file": f, "message": m} for r, f, m in rows]


def build_cluster_tables(con) -> None:
    """The rank-keyed cluster tables (``ingest.cluster``), when that module is present in this version."""
    try:
        from .cluster import build_cluster_tables as build
    except ImportError:
        return
    build(con)


def summarize(con) -> dict:
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    return {
        "ranks": [r[0] for r in q("SELECT rank FROM ranks ORDER BY rank")],
        "slices_per_kind": dict(q("SELECT kind, sum(slice_count)::BIGINT FROM tracks GROUP BY kind "
                                  "HAVING sum(slice_count) > 0 ORDER BY kind")),
        "flows_per_category": dict(q("SELECT cat, count(*) FROM flows GROUP BY cat ORDER BY cat")),
        "counters": q("SELECT count(*) FROM counters")[0][0],
        "tables": {t: q(f"SELECT count(*) FROM {t}")[0][0] for t in sorted(csvfiles.TABLES.values())
                   + ["comm_ops", "comm_bandwidth", "comm_matrix"]},
        "warnings": [{"rank": r, "file": f, "message": m}
                     for r, f, m in q("SELECT rank, file, message FROM warnings ORDER BY rank NULLS FIRST, file")],
        "bytes_read": int(q("SELECT value FROM meta WHERE key = 'bytes_read'")[0][0]),
        "seconds": float(q("SELECT value FROM meta WHERE key = 'ingest_seconds'")[0][0]),
    }


def _version() -> str:
    try:
        return version("ascendscope")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "dev"


def ingest_path(src: str | os.PathLike, out: str | os.PathLike, *, progress: Progress | None = None,
                workers: int = 2, memory_limit: str = "1GB") -> dict:
    """Ingest ``src`` (folder, archive or trace file) into the DuckDB file ``out``; return a summary dict."""
    started = time.perf_counter()
    progress = progress or Progress()
    src_path = Path(src)
    with tempfile.TemporaryDirectory(prefix="ascendscope-ingest-") as work_dir:
        work = Path(work_dir)
        disc = prepare(src_path, work / "extracted", progress)
        total = sum(readers.size(kind, p) for r in disc.ranks for kind, p in r.files.items())
        progress.begin(total, len(disc.ranks))
        summary = write_ranks(disc.ranks, disc.root, Path(out), src_path=src_path, work=work, progress=progress,
                              workers=workers, memory_limit=memory_limit, extra_warnings=disc.warnings,
                              started=started, keep_open=lambda con: load_cluster_analysis(con, disc.root))
        summary["warnings"] = summary["warnings"] + summary.pop("extra", [])
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def prepare(src_path: Path, extract_to: Path, progress: Progress) -> Discovery:
    """Extract an archive (into ``extract_to``) and find its ranks; raise NoProfilingData when there are none."""
    if not src_path.exists():
        raise NoProfilingData(f"{src_path}: no such file or folder")
    root = src_path
    if archive.is_archive(src_path):
        progress.phase(f"extracting {src_path.name}")
        root = archive.extract(src_path, extract_to)
    disc = discover(root)
    if not disc.ranks:
        detail = "; ".join(f"{f}: {m}" for _, f, m in disc.warnings[:5])
        raise NoProfilingData(f"{src_path}: no profiling data found (expected *_ascend_pt folders with "
                              f"ASCEND_PROFILER_OUTPUT)" + (f" — {detail}" if detail else ""), disc.warnings)
    return disc


def ingest_shard(sources: list[RankSource], root: str | os.PathLike, out: str | os.PathLike, *, src_path: str,
                 scratch: str | None = None, workers: int = 2, memory_limit: str = "1GB", threads: int | None = None,
                 progress_path: str | None = None) -> dict:
    """Some ranks (found by :func:`discover` under ``root``) into their own shard ``out``, each rank with its fixed
    id range (see ``ingest.shards``). A plain function of picklable arguments: process pools and Ray tasks run it
    as it is. ``progress_path``: a file where the bytes done so far are kept up to date (``FileProgress``), for
    the process that waits for this one. Returns the shard's summary."""
    started = time.perf_counter()
    progress = FileProgress(progress_path) if progress_path else Progress()
    try:
        with tempfile.TemporaryDirectory(prefix="ascendscope-shard-", dir=scratch) as work_dir:
            summary = write_ranks(list(sources), Path(root), Path(out), src_path=Path(src_path), work=Path(work_dir),
                                  progress=progress, workers=workers, memory_limit=memory_limit, extra_warnings=[],
                                  started=started, bases=rank_id_bases, threads=threads)
    finally:
        if progress_path:
            Path(progress_path).unlink(missing_ok=True)
    summary.pop("extra", None)
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


class FileProgress(Progress):
    """Progress of a task in another process, as the bytes done so far in a small file (rewritten at most every
    ``interval_s``; ``read_done_bytes`` reads it). A file works the same for a pool worker and a Ray task."""

    def __init__(self, path: str, interval_s: float = 0.5):
        self.path, self.interval_s = Path(path), interval_s
        self.lock = threading.Lock()
        self.done = 0
        self.partial: dict[str, int] = {}
        self.last = 0.0

    def file_progress(self, rank: int, name: str, done_bytes: int) -> None:
        with self.lock:
            self.partial[name] = done_bytes
        self._write()

    def file_done(self, rank: int, name: str, size: int, seconds: float) -> None:
        with self.lock:
            self.partial.pop(name, None)
            self.done += size
        self._write()

    def _write(self) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.last < self.interval_s:
                return
            self.last = now
            done = self.done + sum(self.partial.values())
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        try:
            tmp.write_text(str(done), encoding="ascii")
            os.replace(tmp, self.path)
        except OSError:  # progress is a courtesy: never fail the ingest for it
            pass


def read_done_bytes(path: str | os.PathLike) -> int:
    """The bytes a ``FileProgress`` says are done (0 when it has said nothing yet)."""
    try:
        return int(Path(path).read_text(encoding="ascii") or 0)
    except (OSError, ValueError):
        return 0


SMALL_SHARD_BYTES = 64 << 20  # a shard of less input than this is written in small blocks
SMALL_BLOCK_BYTES = 16 << 10


def _file_config(ranks: list[RankSource], shard: bool) -> dict:
    """DuckDB's default 256 KiB blocks cost a file at least a block per column of every table: ~7 MB for a rank
    of a few hundred kB, 7 GB for 1,000 such shards. A small shard is written in 16 KiB blocks instead (~0.6 MB;
    a big one keeps the default, whose longer column segments scan faster)."""
    input_bytes = sum(readers.size(kind, path) for src in ranks for kind, path in src.files.items())
    if shard and input_bytes < SMALL_SHARD_BYTES:
        return {"default_block_size": str(SMALL_BLOCK_BYTES)}
    return {}


def write_ranks(ranks: list[RankSource], root: Path, out: Path, *, src_path: Path, work: Path, progress: Progress,
                workers: int, memory_limit: str, extra_warnings: list[tuple], started: float,
                bases=None, threads: int | None = None, keep_open=None,
                groups: list[list[int]] | None = None) -> dict:
    """Write ``ranks`` into the DuckDB file ``out`` (through a temp name, renamed when complete). ``bases``: a
    function giving each rank its fixed id range (a shard, see :func:`rank_id_bases`); else ids follow on from
    rank to rank. ``groups``: which ranks are staged together (indices; default :func:`plan_groups`).
    ``keep_open(con)`` runs last on the file (its result is the summary's ``extra``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_duckdb(out, _file_config(ranks, shard=bases is not None)) as con:
        con.execute(f"SET memory_limit = '{_checked_size(memory_limit)}'")
        con.execute("SET temp_directory = ?", [str(work / "spill")])
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("SET preserve_insertion_order = true")
        con.execute("SET enable_progress_bar = false")
        con.execute("ATTACH ':memory:' AS stage")  # spills to temp_directory past memory_limit
        sqlfuncs.install(con)
        for ddl in CORE_DDL:
            con.execute(ddl)
        results = [RankResult(src=s, idx=i, prefix="") for i, s in enumerate(ranks)]
        stages = []
        for gi, members in enumerate(groups if groups is not None else plan_groups(ranks)):
            stage = Stage(idx=gi, prefix=f"stage._g{gi}_", members=[results[i] for i in members],
                          many=len(members) > 1)
            for res in stage.members:  # one rank: no union of ranks to build, so its CSV tables are made in place
                res.prefix, res.csv_prefix = stage.prefix, "main." if len(results) == 1 else stage.prefix
            stages.append(stage)
        tasks = _tasks(stages)
        # fewer traces than workers: a core would idle while a trace's JSON is parsed, so read it in halves
        split_read = sum(1 for t in tasks if t[1] in TIMELINE_KINDS) < max(1, workers)
        at = [0, 0, 0]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            # one task per file (or per file kind of a group), biggest first, so a rank's trace and CSVs (and
            # other ranks) load side by side
            futures = {_submit(pool, con, t, root, work, progress, split_read): t for t in tasks}
            # (a db export makes CSV-shaped tables too: the assembly also waits for it)
            others = [f for f, t in futures.items() if t[1] not in readers.TIMELINE_ONLY]
            traces = {t[2].idx: f for f, t in futures.items() if t[1] in TIMELINE_KINDS}
            # the CSV/JSON tables are assembled as soon as they are staged, while traces still load
            assembled = pool.submit(_assemble_files, con, stages, others, work)
            _write_traces(con, stages, traces, bases, at)
            for fut in [assembled, *futures]:
                fut.result()
            # a group whose traces failed together: each loaded again alone, so one bad trace fails only its rank
            again = [Stage(idx=len(stages) + i, prefix=f"stage._a{i}_", members=[res])
                     for i, res in enumerate(res for st in stages if st.failed for res in st.members
                                             if any(k in TIMELINE_KINDS for k in res.src.files))]
            retry = {}
            for stage in again:
                res = stage.members[0]
                res.prefix = stage.prefix
                kind = next(k for k in res.src.files if k in TIMELINE_KINDS)
                retry[stage.idx] = pool.submit(_stage_file, con, stage, res, kind, res.src.files[kind], root, work,
                                               progress, False)
            _write_traces(con, again, retry, bases, at)
        for res in results:
            res.files.sort(key=lambda f: (f["kind"] not in TIMELINE_KINDS, f["file"]))
        progress.phase("assembling the timeline tables")
        summary = _assemble(con, results, root, src_path, started, extra_warnings, progress)
        if keep_open is not None:
            summary["extra"] = keep_open(con)
        progress.phase("writing the file")
    return summary


def _tasks(stages: list[Stage]) -> list[tuple]:
    """(size, kind, stage, rank result or None, path or None) per file of a lone rank, per file kind of a group."""
    tasks = []
    for stage in stages:
        if stage.many:
            kinds = dict.fromkeys(k for res in stage.members for k in res.src.files)
            for kind in kinds:
                size = sum(readers.size(kind, res.src.files[kind]) for res in stage.members if kind in res.src.files)
                tasks.append((size, kind, stage, None, None))
        else:
            res = stage.members[0]
            tasks.extend((readers.size(kind, path), kind, stage, res, path) for kind, path in res.src.files.items())
    return sorted(tasks, key=lambda t: -t[0])


def _submit(pool, con, task: tuple, root: Path, work: Path, progress: Progress, split_read: bool):
    _, kind, stage, res, path = task
    if res is None:
        return pool.submit(_stage_kind, con, stage, kind, root, work, progress)
    return pool.submit(_stage_file, con, stage, res, kind, path, root, work, progress, split_read)


@contextmanager
def atomic_duckdb(out: Path, config: dict | None = None):
    """A DuckDB connection to a temp file beside ``out``, checkpointed and renamed to ``out`` when the block
    ends; on any error the temp file and its WAL are removed, so ``out`` is either whole or untouched."""
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    con = duckdb.connect(str(tmp), config=config or {})
    try:
        yield con
        con.execute("CHECKPOINT")
        con.close()
        os.replace(tmp, out)
    except BaseException:
        con.close()
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
        raise


def _checked_size(text: str) -> str:
    if not re.fullmatch(r"\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)", text.strip()):
        raise ValueError(f"invalid memory limit {text!r}")
    return text.strip()
