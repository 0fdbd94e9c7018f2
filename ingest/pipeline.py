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

from . import (
    SCHEMA_VERSION,
    archive,
    commfiles,
    csvfiles,
    jsonfile,
    lod,
    overlap,
    readers,
    sqlfuncs,
    trace,
    trace_tables,
    tracefile,
)
from .discover import Discovery, RankSource, discover
from .layout import MAX_SHARD_RANK, SLICE_ID_BITS, TRACK_ID_BITS
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
    prefix: str
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
    nested: threading.Event = field(default_factory=threading.Event)  # set once slices are final (or on failure)
    nest_ok: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def _stage_file(con, res: RankResult, kind: str, path: Path, root: Path, work: Path,
                progress: Progress, split_read: bool) -> None:
    """Load one file of one rank into staging tables; problems become warnings of that rank."""
    try:
        _stage(con, res, kind, path, root, work, progress, split_read)
    finally:
        if kind in TIMELINE_KINDS:
            res.nested.set()  # whatever happened, never keep the writer waiting


def _stage(con, res: RankResult, kind: str, path: Path, root: Path, work: Path, progress: Progress,
           split_read: bool) -> None:
    cur = con.cursor()
    sqlfuncs.install(cur)
    rank = res.src.rank
    display = _display(path, root)
    if (group := readers.label(kind, path)) is not None:
        display = f"{display}/{group}"
    size = readers.size(kind, path)
    progress.file_start(rank, display, size)
    t0 = time.perf_counter()
    entry = {"rank": rank, "file": display, "kind": kind, "size_bytes": size, "rows": None, "status": "loaded"}
    warnings: list[str] = []
    try:
        if size == 0:
            raise tracefile.TraceFileError("empty file")

        def nested():
            res.nest_ok = True
            res.nested.set()

        got = readers.stage(readers.Job(
            cur=cur, prefix=res.prefix, csv_prefix=res.csv_prefix, rank=rank, display=display,
            workdir=work / f"r{res.idx}", on_progress=lambda f: progress.file_progress(rank, display, int(f * size)),
            on_nested=nested, split_read=split_read), kind, path)
        res.has_trace = res.has_trace or got.timeline
        res.overlap_source = got.overlap_source or res.overlap_source
        res.tables.extend(got.tables)
        for name, rows in got.comm.items():
            res.comm.setdefault(name, []).extend(rows)
        entry["rows"], entry["status"] = got.rows, got.status
        warnings.extend(got.warnings)
    except (tracefile.TraceFileError, duckdb.Error, ValueError, OSError, UnicodeError) as exc:
        entry["status"] = "failed"
        warnings.append(f"not loaded: {_message(exc)}")
    except Exception as exc:  # noqa: BLE001 - an unexpected bug must not take the other files down with it
        entry["status"] = "failed"
        warnings.append(f"not loaded (internal error {type(exc).__name__}): {_message(exc)}")
    finally:
        cur.close()
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    with res.lock:
        if kind in TIMELINE_KINDS:
            res.trace_entry = entry
        res.files.append(entry)
        res.warnings.extend((display, w) for w in warnings)
    progress.file_done(rank, display, size, entry["seconds"])


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


def _device_id(cur, res: RankResult, from_trace: bool = False) -> int | None:
    p = res.prefix
    probes = []
    if from_trace:
        probes.append(f"SELECT regexp_extract(label, 'NPU\\s+([0-9]+)', 1) FROM {p}tracks "
                      "WHERE label LIKE 'NPU %' LIMIT 1")
    else:
        if "memory_record" in res.tables:
            probes.append(f"SELECT regexp_extract(device_type, 'NPU:?\\s*([0-9]+)', 1) "
                          f"FROM {res.csv_prefix}memory_record WHERE device_type LIKE 'NPU%' LIMIT 1")
        if "npu_module_mem" in res.tables:
            probes.append(f"SELECT regexp_extract(device, 'NPU:?\\s*([0-9]+)', 1) FROM {res.csv_prefix}npu_module_mem "
                          "LIMIT 1")
    for sql in probes:
        try:
            row = cur.execute(sql).fetchone()
        except duckdb.Error:
            continue
        if row and row[0] not in (None, ""):
            return int(row[0])
    return None


def _write_traces(con, results: list[RankResult], trace_tasks: dict, bases: IdBases) -> None:
    """Append each rank's trace tables to the run's tables, in rank order and as soon as they are ready: its
    tracks and slices once nested (while its flows are still being derived, and later ranks and the CSVs still
    load), then its flows, counters and steps, each part in one transaction; a rank that fails part way is
    removed again. Then free its staging tables."""
    cur = con.cursor()
    toff, soff, foff = bases.track, bases.slice, bases.slice
    try:
        for res in results:
            task = trace_tasks.get(res.idx)
            if task is None:
                continue
            res.nested.wait()
            if not res.nest_ok:
                task.result()
                trace.drop_stage(cur, res.prefix)
                continue
            try:
                res.trace_device_id = _device_id(cur, res, from_trace=True)
                n_tracks, n_slices = _in_transaction(cur, trace.write_slices, res.prefix, res.src.rank, toff,
                                                     soff, overlap.DERIVED_PID)
                _check_id_range(bases, n_tracks, n_slices, toff - bases.track, soff - bases.slice)
                task.result()
                # (a transaction only sees tables that existed when it began: the flows are newer)
                if res.has_trace:
                    n_flows = _in_transaction(cur, trace.write_rest, res.prefix, res.src.rank, toff, soff, foff)
                    toff, soff, foff = toff + n_tracks, soff + n_slices, foff + n_flows
                else:  # failed after nesting: nothing of it is kept
                    _in_transaction(cur, trace.unwrite, res.src.rank)
            except (duckdb.Error, IdRangeError) as exc:
                _in_transaction(cur, trace.unwrite, res.src.rank)
                res.has_trace = False
                with res.lock:
                    if res.trace_entry is not None:
                        res.trace_entry["status"] = "failed"
                        res.warnings.append((res.trace_entry["file"], f"not loaded: {_message(exc)}"))
            finally:
                trace.drop_stage(cur, res.prefix)
    finally:
        cur.close()


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


def _assemble_files(con, results: list[RankResult], staged: list, work: Path) -> None:
    """The tables of the CSV and JSON files, from every rank's staging tables (runs while traces still load)."""
    wait(staged)
    cur = con.cursor()
    for res in results:
        res.device_id = _device_id(cur, res)  # the memory CSVs name the device; read them before they go
    for table in sorted(set(csvfiles.TABLES.values())):
        direct = [res for res in results if res.csv_prefix == "main."]
        if direct:  # one rank: its table was made in place (or is missing or failed: then it is made empty)
            if not any(table in res.tables for res in direct):
                cur.execute(f"DROP TABLE IF EXISTS main.{table}")
                cur.execute(EMPTY_TABLES[table])
            continue
        parts = [f"SELECT * FROM {res.csv_prefix}{table}" for res in results if table in res.tables]
        if parts:
            cur.execute(f"CREATE TABLE {table} AS " + " UNION ALL BY NAME ".join(parts))
            for res in results:
                cur.execute(f"DROP TABLE IF EXISTS {res.csv_prefix}{table}")
        else:
            cur.execute(EMPTY_TABLES[table])
    for name in commfiles.COLUMNS:
        commfiles.create_table(cur, name, [row for res in results for row in res.comm.get(name, [])], work)
    cur.close()


def _assemble(con, results: list[RankResult], root: Path, src_path: Path, started: float,
              extra_warnings: list[tuple], progress: Progress, defer_lod: bool) -> dict:
    # runs without a memory CSV: the trace's process labels ("NPU 3") may name the device
    devices = {res.idx: next((d for d in (res.device_id, res.trace_device_id, res.src.device_id) if d is not None),
                             None) for res in results}
    con.execute("DETACH stage")  # staging is done: give its memory to the level-of-detail build
    if defer_lod:  # a shard: built once the whole run's widths are known (ingest.shards)
        lod.build(con, defer=True)
    else:
        progress.phase("building the level-of-detail tables")
        lod.build(con)
    progress.phase("writing metadata")

    warnings = list(extra_warnings)
    files = []
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
        extent = con.execute("SELECT min(min_ts_ns), max(max_end_ns) FROM tracks WHERE rank = ? AND slice_count > 0",
                             [r]).fetchone()
        con.execute("INSERT INTO ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            r, devices[res.idx], _display(res.src.folder, root) if res.src.folder != root else ".",
            res.src.rank_source, exp.get("_profiler_level"), info.get("torch_npu_version"),
            info.get("cann_version"), res.has_trace, res.overlap_source, extent[0], extent[1],
            json.dumps(info) if info else None, json.dumps(metadata) if metadata is not None else None])
        for extra in (res.src.profiler_info_path, res.src.metadata_path):
            if extra is not None:
                files.append({"rank": r, "file": _display(extra, root), "kind": extra.stem.rstrip("_0123456789"),
                              "size_bytes": extra.stat().st_size, "rows": None, "status": "loaded",
                              "seconds": 0.0})
    warnings.extend(trace_tables.fill_from_trace(con))  # ranks with a trace but no kernel or communication rows
    if files:
        con.executemany("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [[f["rank"], f["file"], f["kind"], f["size_bytes"], f["rows"], f["status"], f["seconds"]]
                         for f in files])
    if warnings:
        con.executemany("INSERT INTO warnings VALUES (?, ?, ?)", [list(w) for w in warnings])
    bytes_read = sum(f["size_bytes"] for f in files)
    meta = {"schema_version": str(SCHEMA_VERSION), "ascendscope_version": _version(), "source_path": str(src_path),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "ingest_seconds": f"{time.perf_counter() - started:.3f}", "bytes_read": str(bytes_read)}
    con.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
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


def ingest_rank(source: RankSource, root: str | os.PathLike, out: str | os.PathLike, *, src_path: str,
                scratch: str | None = None, workers: int = 2, memory_limit: str = "1GB",
                threads: int | None = None) -> dict:
    """One rank (found by :func:`discover` under ``root``) into its own shard ``out``, with the rank's fixed id
    range and without its level-of-detail tables (see ``ingest.shards``). A plain function of picklable
    arguments: process pools and Ray tasks run it as it is. Returns the shard's summary plus ``lod_inputs``."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ascendscope-shard-", dir=scratch) as work_dir:
        summary = write_ranks([source], Path(root), Path(out), src_path=Path(src_path), work=Path(work_dir),
                              progress=Progress(), workers=workers, memory_limit=memory_limit, extra_warnings=[],
                              started=started, bases=rank_id_bases(source.rank), threads=threads,
                              keep_open=lod.inputs)
    summary["lod_inputs"] = summary.pop("extra")
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


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
                bases: IdBases | None = None, threads: int | None = None, keep_open=None) -> dict:
    """Write ``ranks`` into the DuckDB file ``out`` (through a temp name, renamed when complete). With ``bases``
    (a shard) the level-of-detail tables are left empty. ``keep_open(con)`` runs last on the file (its result is
    the summary's ``extra``)."""
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
        results = [RankResult(src=s, idx=i, prefix=f"stage._r{i}_") for i, s in enumerate(ranks)]
        for res in results:  # one rank: no union of ranks to build, so its CSV tables are made in place
            res.csv_prefix = "main." if len(results) == 1 else res.prefix
        # one task per file, biggest first, so a rank's trace and CSVs (and other ranks) load side by side
        tasks = sorted(((res, kind, path) for res in results for kind, path in res.src.files.items()),
                       key=lambda t: -readers.size(t[1], t[2]))
        # fewer traces than workers: a core would idle while a trace's JSON is parsed, so read it in halves
        split_read = sum(1 for t in tasks if t[1] in TIMELINE_KINDS) < max(1, workers)
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            stage = {pool.submit(_stage_file, con, *t, root, work, progress, split_read): t for t in tasks}
            # (a db export makes CSV-shaped tables too: the assembly also waits for it)
            others = [f for f, t in stage.items() if t[1] not in readers.TIMELINE_ONLY]
            traces = {t[0].idx: f for f, t in stage.items() if t[1] in TIMELINE_KINDS}
            # the CSV/JSON tables are assembled as soon as they are staged, while traces still load
            assembled = pool.submit(_assemble_files, con, results, others, work)
            _write_traces(con, results, traces, bases or IdBases())
            for fut in [assembled, *stage]:
                fut.result()
        for res in results:
            res.files.sort(key=lambda f: (f["kind"] not in TIMELINE_KINDS, f["file"]))
        progress.phase("assembling the timeline tables")
        summary = _assemble(con, results, root, src_path, started, extra_warnings, progress, bases is not None)
        if keep_open is not None:
            summary["extra"] = keep_open(con)
        progress.phase("writing the file")
    return summary


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
