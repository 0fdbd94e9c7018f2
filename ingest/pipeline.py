"""Ingest a path into one DuckDB file per run, atomically.

``ingest_path(src, out)`` discovers the ranks and loads every file in parallel (a thread pool, each task with
its own DuckDB cursor; DuckDB releases the GIL) into ``out + ".tmp-<pid>"``, renamed to ``out`` only when
everything is written: a failed or interrupted ingest leaves no file at ``out``.

Each trace is staged in an in-memory scratch database (spilling to a temporary folder past the memory limit) and
derived there; as soon as a stage's slices are nested, a writer appends its tracks and slices to the run's
tables (in order, while its flows are still being derived and other files load), then its flows, counters and
steps. Small ranks are staged together, each file kind of a group at once (``ingest.stages``). CSV and JSON
tables are assembled while traces still load (with one rank, CSVs are typed straight into the file). A broken
input file becomes a row in ``warnings`` (naming the file and what is wrong) and the rest of the run still loads.
Every file is staged by the reader of its format (``ingest.readers``: the text export, the db export, msprof
output, Chrome traces) into the same staging tables; one that yields a timeline is written like a trace.
``ingest_shard`` is the same for the ranks of one shard of a sharded run (``ingest.shards``).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import duckdb

from . import (
    SCHEMA_VERSION,
    archive,
    csvfiles,
    experts,
    jsonfile,
    lod,
    overlap,
    overview,
    readers,
    serving,
    sqlfuncs,
    strategy_tables,
    trace_tables,
)
from .columns import insert_columns
from .discover import Discovery, RankSource, discover  # noqa: F401 - pipeline.discover: bench and tests use it
from .layout import UNSYNCED, sync_file
from .memsnap.schema import COUNTED as MEMSNAP_COUNTED
from .runsource import NoProfilingData, find_run
from .schema import CORE_DDL
from .stages import (  # noqa: F401 - IdBases, plan_groups, GROUP_BYTES … are this module's interface too
    GROUP_BYTES,
    GROUP_BYTES_MAX,
    GROUP_RANKS,
    GROUPS_PER_WORKER,
    TIMELINE_KINDS,
    IdBases,
    IdRangeError,
    Progress,
    RankResult,
    Stage,
    assemble_files,
    assemble_late,
    display_name,
    error_text,
    group_target,
    groupable,
    plan_groups,
    plan_tasks,
    rank_id_bases,
    stage_file,
    submit,
    write_traces,
)
from .trace import Beside


def insert_rows(con, table: str, rows: list) -> None:
    """Append ``rows`` (sequences of one length, in the table's column order) to ``table`` in one statement
    (``columns.insert_columns``)."""
    if rows:
        insert_columns(con, table, [list(c) for c in zip(*rows)])


EXTENTS_SQL = "SELECT rank, min(min_ts_ns), max(max_end_ns) FROM tracks WHERE slice_count > 0 GROUP BY rank"


def _assemble(con, results: list[RankResult], root: Path, src_path: Path, started: float,
              extra_warnings: list[tuple], progress: Progress) -> dict:
    # runs without a memory CSV: the trace's process labels ("NPU 3") may name the device
    devices = {res.idx: next((d for d in (res.device_id, res.trace_device_id, res.src.device_id) if d is not None),
                             None) for res in results}
    con.execute("DETACH stage")  # staging is done: give its memory to the level-of-detail build
    progress.phase("building the level-of-detail tables and the metadata")
    # the level of detail reads only the slices: built on a cursor of its own beside the metadata and the cluster
    # tables below (mostly Python and small statements), so the second core is not idle at the end
    beside = Beside(con, lod.build, "lod-beside")
    try:
        bytes_read = _metadata(con, results, root, extra_warnings, devices)
    finally:
        beside.join()  # (on an error its own is moot; its cursor must be done before the file closes)
    beside.result()
    meta = {"schema_version": str(SCHEMA_VERSION), "ascendscope_version": _version(), "source_path": str(src_path),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "ingest_seconds": f"{time.perf_counter() - started:.3f}", "bytes_read": str(bytes_read)}
    insert_rows(con, "meta", list(meta.items()))
    return summarize(con)


def _metadata(con, results: list[RankResult], root: Path, extra_warnings: list[tuple], devices: dict) -> int:
    """The ranks, files and warnings tables, the kernels and communication ops a trace fills in, and the cluster
    tables; returns the bytes of the files read."""
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
                warnings.append((r, display_name(res.src.metadata_path, root), f"invalid JSON, ignored: {exc}"))
        exp = (info.get("config") or {}).get("experimental_config") or {} if info else {}
        extent = extents.get(r, (None, None))
        ranks.append([r, devices[res.idx], display_name(res.src.folder, root) if res.src.folder != root else ".",
                      res.src.rank_source, exp.get("_profiler_level") or _mindspore_level(info),
                      info.get("torch_npu_version"),
                      info.get("cann_version"), res.has_trace, res.overlap_source, extent[0], extent[1],
                      json.dumps(info) if info else None, json.dumps(metadata) if metadata is not None else None,
                      res.src.group, res.src.own_rank, res.src.session])
        for extra in (res.src.profiler_info_path, res.src.metadata_path):
            if extra is not None:
                files.append({"rank": r, "file": display_name(extra, root), "kind": extra.stem.rstrip("_0123456789"),
                              "size_bytes": extra.stat().st_size, "rows": None, "status": "loaded",
                              "seconds": 0.0})
    insert_rows(con, "ranks", ranks)
    warnings.extend(trace_tables.fill_from_trace(con))  # ranks with a trace but no kernel or communication rows
    insert_rows(con, "files", [[f["rank"], f["file"], f["kind"], f["size_bytes"], f["rows"], f["status"],
                                f["seconds"]] for f in files])
    insert_rows(con, "warnings", warnings)
    build_cluster_tables(con)
    return sum(f["size_bytes"] for f in files)


def _mindspore_level(info: dict) -> str | None:
    """MindSpore's profiler_info names the level under ``profiler_parameters`` (torch_npu's under ``config``)."""
    params = info.get("profiler_parameters") if isinstance(info, dict) else None
    level = params.get("profiler_level") if isinstance(params, dict) else None
    return level if isinstance(level, str) else None


def load_cluster_analysis(con, root: Path) -> list[dict]:
    """msprof-analyze's ``cluster_analysis_output`` under the source into ``cluster_analysis_*`` tables
    (``ingest.cluster``), serving output into ``serving_*`` (``ingest.serving``), the parallel strategy
    (``ingest.strategy``) and expert dumps (``ingest.experts``): the run-level tables; their warnings go to
    ``warnings`` (run-wide: no rank) and are returned."""
    try:
        from .cluster import load_cluster_analysis as load
    except ImportError:
        load = None
    texts = list(load(con, root) or []) if load is not None else []
    texts += serving.load_serving(con, root)  # and msServiceProfiler's output: the serving_* tables
    texts += strategy_tables.build(con)  # the parallel strategy over every rank's metadata (ingest/strategy.py)
    texts += experts.load_experts(con, root)  # MindIE / vLLM-Ascend expert dumps (ingest/experts.py)
    rows = []
    for text in texts:
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


# the rows msprof-analyze's cluster_analysis_output gave (the Cluster view's data even in a run of no ranks)
CLUSTER_ANALYSIS_ROWS_SQL = "SELECT coalesce(sum(rows), 0)::BIGINT FROM cluster_analysis_files WHERE status <> 'failed'"
# the rows of the expert dumps (the Cluster view's expert load, even in a run of no ranks)
EXPERT_ROWS_SQL = ("SELECT coalesce(sum(rows), 0)::BIGINT FROM expert_files "
                   "WHERE status <> 'failed' AND kind <> 'config'")


def summarize(con) -> dict:
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    return {
        "ranks": [r[0] for r in q("SELECT rank FROM ranks ORDER BY rank")],
        "slices_per_kind": dict(q("SELECT kind, sum(slice_count)::BIGINT FROM tracks GROUP BY kind "
                                  "HAVING sum(slice_count) > 0 ORDER BY kind")),
        "flows_per_category": dict(q("SELECT cat, count(*) FROM flows GROUP BY cat ORDER BY cat")),
        "counters": q("SELECT count(*) FROM counters")[0][0],
        "tables": {t: q(f"SELECT count(*) FROM {t}")[0][0] for t in sorted(csvfiles.TABLES.values())
                   + ["comm_ops", "comm_bandwidth", "comm_matrix", *MEMSNAP_COUNTED]},
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
    """Extract an archive (into ``extract_to``) and find its run (``ingest.runsource``: ranks, or serving or
    cluster output alone); raise NoProfilingData when there is none."""
    if not src_path.exists():
        raise NoProfilingData(f"{src_path}: no such file or folder")
    root = src_path
    if archive.is_archive(src_path):
        progress.phase(f"extracting {src_path.name}")
        root = archive.extract(src_path, extract_to)
    return find_run(root, shown=str(src_path))


def ingest_shard(sources: list[RankSource], root: str | os.PathLike, out: str | os.PathLike, *, src_path: str,
                 scratch: str | None = None, workers: int = 2, memory_limit: str = "1GB", threads: int | None = None,
                 progress_path: str | None = None) -> dict:
    """Some ranks (found by :func:`discover` under ``root``) into their own shard ``out``, each rank with its fixed
    id range (see ``ingest.shards``). A plain function of picklable arguments: process pools and Ray tasks run it
    as it is. ``progress_path``: a file where the bytes done so far are kept up to date (``FileProgress``), for
    the process that waits for this one. Returns the shard's summary."""
    started = time.perf_counter()
    total = sum(readers.size(kind, path) for src in sources for kind, path in src.files.items())
    progress = FileProgress(progress_path, total) if progress_path else Progress()
    try:
        with tempfile.TemporaryDirectory(prefix="ascendscope-shard-", dir=scratch) as work_dir:
            # the shard's small ranks were grouped by its planner: they are staged as one group too (a stage costs
            # ~350 statements whatever its size: two stages of 96 ranks took 6.3 CPU-s, one of 192 5.0)
            summary = write_ranks(list(sources), Path(root), Path(out), src_path=Path(src_path), work=Path(work_dir),
                                  progress=progress, workers=workers, memory_limit=memory_limit, extra_warnings=[],
                                  started=started, bases=rank_id_bases, threads=threads,
                                  groups=plan_groups(list(sources), target_bytes=total + 1),
                                  overview=_overview(Path(out), progress_path) if len(sources) == 1 else None)
    finally:
        if progress_path:
            Path(progress_path).unlink(missing_ok=True)
    summary.pop("extra", None)
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def _overview(shard: Path, progress_path: str | None):
    """What writes a lone big rank's overview beside its shard (``ingest.overview``), announced beside the task's
    progress file; None without a progress file (nobody would publish it)."""
    if not progress_path:
        return None
    note = overview.note_for(progress_path)

    def write(cur, prefix: str) -> None:
        try:
            overview.write(cur, prefix, overlap.DERIVED_PID, shard, note, rank_id_bases)
        except (duckdb.Error, OSError):
            pass  # the whole shard follows; only its overview is not shown before it
    return write


class FileProgress(Progress):
    """Progress of a task in another process, as the bytes done so far in a small file (rewritten at most every
    ``interval_s``; ``read_done_bytes`` reads it). A file works the same for a pool worker and a Ray task. The
    files read count for ``FILES_SHARE`` of the task's ``total`` bytes, its closing steps (the timeline tables,
    the level of detail, the metadata, the file) for the rest, so the count moves until the task ends."""

    FILES_SHARE = 0.85
    CLOSING_STEPS = 4  # the phases write_ranks announces once the files are read

    def __init__(self, path: str, total: int = 0, interval_s: float = 0.25):
        self.path, self.total, self.interval_s = Path(path), total, interval_s
        self.lock = threading.Lock()
        self.done = 0
        self.steps = 0
        self.partial: dict[str, int] = {}
        self.last = 0.0

    def phase(self, text: str) -> None:
        with self.lock:
            self.steps = min(self.CLOSING_STEPS, self.steps + 1)
            self.last = 0.0  # a step is worth telling at once
        self._write()

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
            done = int(self.FILES_SHARE * (self.done + sum(self.partial.values()))
                       + (1 - self.FILES_SHARE) * self.total * self.steps / self.CLOSING_STEPS)
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


SMALL_SHARD_BYTES = 24 << 20  # a shard of less input than this is written in small blocks
SMALL_BLOCK_BYTES = 16 << 10


def _file_config(ranks: list[RankSource], shard: bool) -> dict:
    """DuckDB's default 256 KiB blocks cost a file at least a block per column of every table: ~7 MB for a rank
    of a few hundred kB, 7 GB for 1,000 such shards. A small shard is written in 16 KiB blocks instead (~0.6 MB;
    a big one keeps the default, whose longer column segments scan faster, and which its commits write with 15 %
    less CPU: a grouped shard of 32 MiB of input takes ~1 MB more in default blocks, docs/benchmarks.md)."""
    input_bytes = sum(readers.size(kind, path) for src in ranks for kind, path in src.files.items())
    if shard and input_bytes < SMALL_SHARD_BYTES:
        return {"default_block_size": str(SMALL_BLOCK_BYTES)}
    return {}


# glibc's threshold above which an allocation gets pages of its own (returned to the system when freed). By default it
# adapts upward to 32 MB after the first large free, after which the arrays nesting and pairing allocate batch after
# batch come from the heap, which keeps the freed ones: on a 10 GB trace some 200 MB on top of DuckDB's limit
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def bound_malloc() -> None:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD`` in this process, so every large array is given back
    when freed; nothing where the C library has no ``mallopt`` (macOS, musl)."""
    try:
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (AttributeError, OSError):
        pass


def write_ranks(ranks: list[RankSource], root: Path, out: Path, *, src_path: Path, work: Path, progress: Progress,
                workers: int, memory_limit: str, extra_warnings: list[tuple], started: float,
                bases=None, threads: int | None = None, keep_open=None,
                groups: list[list[int]] | None = None, overview=None) -> dict:
    """Write ``ranks`` into the DuckDB file ``out`` (through a temp name, renamed when complete). ``bases``: a
    function giving each rank its fixed id range (a shard, see :func:`rank_id_bases`); else ids follow on from
    rank to rank. ``groups``: which ranks are staged together (indices; default :func:`plan_groups`).
    ``keep_open(con)`` runs last on the file (its result is the summary's ``extra``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)  # the readers' scratch files (a run of db exports writes none before)
    bound_malloc()
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
                          many=len(members) > 1, track_limit=_track_limit(bases, [results[i] for i in members]))
            for res in stage.members:  # one rank: no union of ranks to build, so its CSV tables are made in place
                res.prefix, res.csv_prefix = stage.prefix, "main." if len(results) == 1 else stage.prefix
            if overview is not None and len(members) == 1:  # a lone rank: its overview, ahead of it
                stage.on_sliced = _then_set(overview, stage.sliced)
            stages.append(stage)
        tasks = plan_tasks(stages)
        # fewer traces than workers: a core would idle while a trace's JSON is parsed, so read it in byte ranges
        split_read = sum(1 for t in tasks if t[1] in TIMELINE_KINDS) < max(1, workers)
        at = [0, 0, 0]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            # one task per file (or per file kind of a group), biggest first, so a rank's trace and CSVs (and
            # other ranks) load side by side
            futures = {submit(pool, con, t, root, work, progress, split_read): t for t in tasks}
            # (a db export makes CSV-shaped tables too: the assembly also waits for it)
            others = [f for f, t in futures.items() if t[1] not in readers.TIMELINE_ONLY]
            traces = {t[2].idx: f for f, t in futures.items() if t[1] in TIMELINE_KINDS}
            # the CSV/JSON tables are assembled as soon as they are staged, while traces still load
            assembled = pool.submit(assemble_files, con, stages, others, work)
            write_traces(con, stages, traces, bases, at)
            for fut in [assembled, *futures]:
                fut.result()
            # a group whose traces failed together: each loaded again alone, so one bad trace fails only its rank
            again = [Stage(idx=len(stages) + i, prefix=f"stage._a{i}_", members=[res])
                     for i, res in enumerate(res for st in stages if st.failed for res in st.members
                                             if any(k in TIMELINE_KINDS for k in res.src.files))]
            retry, made_before = {}, {}
            for stage in again:
                stage.track_limit = _track_limit(bases, stage.members)
                res = stage.members[0]
                res.prefix = stage.prefix
                kind = next(k for k in res.src.files if k in TIMELINE_KINDS)
                if kind not in readers.TIMELINE_ONLY:  # (a db export's: its CSV-shaped tables are made again too)
                    res.csv_prefix = stage.prefix
                    made_before[stage.idx] = len(res.tables)
                retry[stage.idx] = pool.submit(stage_file, con, stage, res, kind, res.src.files[kind], root, work,
                                               progress, False)
            write_traces(con, again, retry, bases, at)
            if late := [stage for stage in again if stage.members[0].csv_prefix == stage.prefix]:
                for fut in retry.values():
                    fut.result()
                assemble_late(con, late, made_before)
        for res in results:
            res.files.sort(key=lambda f: (f["kind"] not in TIMELINE_KINDS, f["file"]))
        progress.phase("assembling the timeline tables")
        summary = _assemble(con, results, root, src_path, started, extra_warnings, progress)
        if keep_open is not None:
            summary["extra"] = keep_open(con)
            summary["cluster_analysis_rows"] = con.execute(CLUSTER_ANALYSIS_ROWS_SQL).fetchone()[0]
            summary["serving_rows"] = con.execute(serving.ROWS_SQL).fetchone()[0]
            summary["expert_rows"] = con.execute(EXPERT_ROWS_SQL).fetchone()[0]
        progress.phase("writing the file")
    return summary


def _then_set(work, event: threading.Event):
    def run(cur, prefix: str) -> None:
        try:
            work(cur, prefix)
        finally:
            event.set()
    return run


def _track_limit(bases, members: list[RankResult]) -> int | None:
    """The most tracks a rank of these may have: what its fixed id range holds (None: ids follow on, no limit)."""
    if bases is None:
        return None
    return min(bases(res.src.rank).track_span for res in members) - 1


@contextmanager
def atomic_duckdb(out: Path, config: dict | None = None):
    """A DuckDB connection to a temp file beside ``out``, checkpointed, synced and renamed to ``out`` when the
    block ends; on any error the temp file and its WAL are removed, so ``out`` is either whole or untouched."""
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    con = duckdb.connect(str(tmp), config={**UNSYNCED, **(config or {})})
    try:
        yield con
        con.execute("CHECKPOINT")
        con.close()
        sync_file(tmp)
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
