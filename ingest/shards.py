"""Ingest a run as shards plus small cluster tables, described by a manifest (docs/schema.md), so that it can be
opened while it ingests.

``ingest_sharded(src, out_dir)``:

1. discovers the ranks once (so rank ids and file names are those of a single-file ingest) and plans the shards:
   small ranks together, up to ``pipeline.group_target`` of input (the smallest size that packs the run's ranks
   into at most 2 groups per worker, within 32 and 128 MiB), so the fixed cost of a task and a file is paid once
   for many ranks; a big rank alone (``pipeline.plan_groups``);
2. loads the small files of every rank (``SMALL_KINDS``: step_trace_time.csv, communication*.json, the db
   export's analysis.db …) into ``cluster.duckdb`` with the ranks and the cluster tables, and writes the first
   manifest (``status: ingesting``, every shard ``pending``): the Cluster, Summary and Communication views
   answer from here on;
3. then runs the shard tasks on an executor (``ingest.executors``: a process pool, or Ray), at most one per
   worker at a time, each next one picked when a slot frees: the shards holding the ranks ``wanted()`` names (the
   ranks a user opened) first, then in rank order. Each task writes ``shards/<name>.duckdb`` — exactly a
   single-file run database of its ranks, each rank with its fixed id range (``pipeline.rank_id_bases``) and the
   shard's own level-of-detail widths — through a temp name, and keeps the bytes it has read in a small file, so
   progress moves within a task;
4. as shards finish, gathers their run-wide rows (``ranks``, ``files``, ``warnings`` and every ``cluster_*``
   table) into ``cluster.duckdb`` (rewritten whole, temp + rename, at most every few seconds) and marks them
   ``ready`` in the manifest, which is rewritten *after* the cluster tables it relies on: a reader that reads
   the manifest first never sees a shard whose rows are not there, nor a file not complete;
5. writes the final cluster tables and the manifest with ``status: complete``, and removes what this ingest did
   not write (shards of ranks gone, temp files of killed tasks).

Resuming: a manifest entry records what its shard was made from (``source``: a digest of the files and this
ascendscope's versions). An ingest into a folder that already holds ready shards of the same source keeps them
and runs only the others, so a killed server resumes without redoing finished ranks.

A shard whose task fails (an error, a worker that died twice) is a ``failed`` entry with the reason, and a row of
``warnings`` per rank naming its folder; the other shards still load. Nothing else in ``out_dir`` is touched but
the manifest, ``cluster.duckdb``, ``shards/``, ``.progress/`` and their temp files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from . import SCHEMA_VERSION, archive, experts, overview, pipeline, readers, serving, strategy_tables
from .executors import default_workers, make_executor
from .layout import (
    CLUSTER_DB,
    CLUSTER_PREFIX,
    EMPTY_SCHEMA,
    FORMAT_VERSION,
    MANIFEST,
    RUN_TABLES,
    SHARDS_DIR,
    UNSYNCED,
    _sql_path,
    connect,
    is_sharded,
    read_manifest,
    shard_name,
    sync_file,
)
from .pipeline import NoProfilingData, Progress
from .readers import memsnap as memsnap_reader
from .stages import _pack as pack_by_size  # (the packing plan_groups does, for ranks of any format)

SHARD_MEMORY_LIMIT = "800MB"  # DuckDB's limit per task, spilling past it (a worker peaks ~1.5 GB on a 10 GB trace)
# what the Cluster, Summary and Communication views read, loaded for every rank before any trace
SMALL_KINDS = frozenset({"step_trace_time", "communication", "communication_matrix", "analysis_db",
                         "msprof_communication", "msprof_communication_matrix"})
# tables of the small files, kept in cluster.duckdb for every rank (the shards have the same rows for theirs)
EARLY_TABLES = ("step_trace", "comm_ops", "comm_bandwidth", "comm_matrix", "comm_size_distribution")
PROGRESS_DIR = ".progress"
# a shard's input below this runs DuckDB on one thread a cursor: its statements are mostly planning, and its task
# keeps two cursors busy (trace and CSVs, or a db's two lane sets); a second thread a statement only adds
# scheduling (2026-12-02: 0.45 against 0.55 s for the 2-rank db sample, 2.07 against 2.25 s for 167 MB of 2 ranks)
THREADED_BYTES = 256 << 20
TASK_NICE = 10  # the shard tasks' processes run this much nicer than the ingest that waits for them
POLL_S = 0.05  # how often the waiting loop looks at progress files (an overview's note among them) and at the user
MIN_REWRITE_S = 0.5  # while shards finish, cluster.duckdb is rewritten at most this often …
REWRITE_FACTOR = 4  # … and for at most 1/this of the time waited (the first rewrite at once)
CLUSTER_BIG_ROWS = 50_000  # cluster.duckdb is written in DuckDB's default blocks past this many rows …
DEFAULT_BLOCK_BYTES = 256 << 10  # … of this size


@dataclass
class Shard:
    """One planned shard: its file, its ranks (their sources), input bytes and what it is made from."""

    file: str
    sources: list
    input_bytes: int
    source_id: str

    @property
    def ranks(self) -> list[int]:
        return [s.rank for s in self.sources]


def plan_shards(disc, group_bytes: int = pipeline.GROUP_BYTES, archive: Path | None = None) -> list[Shard]:
    """The shards of a run: its ranks packed in order up to ``group_bytes`` of input each, whatever their format,
    each named after its ranks (a shard's task stages together the ranks it can, ``pipeline.plan_groups``, and the
    others one by one: small db-export ranks share one task instead of paying a process each). ``archive``: the run
    was extracted from this file (its files' times are those of the extraction, not of the source)."""
    out = []
    sizes = [sum(readers.size(k, p) for k, p in s.files.items()) for s in disc.ranks]
    for members in pack_by_size(sizes, group_bytes):
        sources = [disc.ranks[i] for i in members]
        ranks = [s.rank for s in sources]
        file = shard_name(ranks[0]) if len(ranks) == 1 else shard_name(ranks[0], ranks[-1])
        out.append(Shard(file=file, sources=sources, input_bytes=sum(sizes[i] for i in members),
                         source_id=source_id(sources, disc.root, archive)))
    return out


def source_id(sources: list, root: Path, archive: Path | None = None) -> str:
    """A digest of what a shard is made from: each rank's files (path below the root, size, and mtime, or the
    archive's size and mtime when the files were extracted from one) and the versions of the code and schema that
    read them."""
    parts: list = [pipeline._version(), SCHEMA_VERSION, FORMAT_VERSION]
    if archive is not None:
        st = archive.stat()
        parts.append(["archive", st.st_size, st.st_mtime_ns])
    for src in sources:
        files = []
        extras = [("info", p) for p in (src.profiler_info_path, src.metadata_path) if p is not None]
        for kind, part in [(k, q) for k, path in sorted(src.files.items()) for q in readers.parts(k, path)] + extras:
            st = part.stat()
            files.append([kind, pipeline.display_name(part, root), st.st_size, None if archive else st.st_mtime_ns])
        parts.append([src.rank, pipeline.display_name(src.folder, root), files])
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def ingest_sharded(src, out_dir, *, executor: str = "process", workers: int | None = None,
                   ray_address: str | None = None, progress: Progress | None = None,
                   memory_limit: str = SHARD_MEMORY_LIMIT, wanted: Callable[[], list[int]] | None = None,
                   resume: bool = True, group_bytes: int | None = None) -> dict:
    """Ingest ``src`` (folder, archive or trace file) into the run folder ``out_dir``; return the summary (that
    of ``ingest_path`` plus ``shards``: file, ranks, status, seconds, warnings, error per shard, and
    ``reused``: the shards kept from an earlier ingest of the same source). ``wanted()``: the ranks to load
    first, asked again before each task starts. ``group_bytes``: small ranks are sharded together up to this much
    input (None: ``pipeline.group_target`` of the run; 0: a shard per rank)."""
    started = time.perf_counter()
    progress = progress or Progress()
    src_path, out = Path(src), Path(out_dir)
    pipeline._checked_size(memory_limit)
    out.mkdir(parents=True, exist_ok=True)
    sweep_temp(out)
    work = out / f".work-{os.getpid()}-{threading.get_ident()}"
    work.mkdir()
    batch = runner = None
    try:
        timing: dict[str, float] = {}
        try:
            disc = pipeline.prepare(src_path, work / "extracted", progress)
            timing["discover_s"] = round(time.perf_counter() - started, 3)
        except NoProfilingData:
            (out / MANIFEST).unlink(missing_ok=True)  # an old run of this folder is not this source's
            raise
        pool_workers = int(workers or default_workers())
        target = pipeline.group_target(disc.ranks, pool_workers) if group_bytes is None else group_bytes
        plan = plan_shards(disc, target, src_path if archive.is_archive(src_path) else None)
        entries = _entries(plan, _previous(out) if resume else {}, out)
        todo = [i for i, e in enumerate(entries) if e["status"] != "ready"]
        (out / SHARDS_DIR).mkdir(exist_ok=True)
        (out / PROGRESS_DIR).mkdir(exist_ok=True)
        progress.begin(sum(plan[i].input_bytes for i in todo) or 1, len(disc.ranks))
        # no more processes than tasks: a lone big rank gets every core (its files load side by side, its trace
        # in halves) instead of one core beside an idle worker
        n = max(1, min(pool_workers, len(todo) or 1))
        threads = max(1, (os.cpu_count() or 1) // n)
        # node-local scratch for Ray (another node may not have our temp folder); our run folder's otherwise
        scratch = None if executor == "ray" else tempfile.gettempdir()
        calls = [{"sources": plan[i].sources, "root": str(disc.root), "out": str(out / plan[i].file),
                  "src_path": str(src_path), "scratch": scratch,
                  "memory_limit": memsnap_reader.shard_memory_limit(plan[i].sources, memory_limit),
                  "threads": threads if plan[i].input_bytes >= THREADED_BYTES else 1,
                  "progress_path": str(out / PROGRESS_DIR / f"{Path(plan[i].file).stem}.bytes")} for i in todo]
        if todo:
            # the tasks start now, beside the small files, at a lower CPU priority: the small files answer the
            # first views and come first (as do the server's requests); the tasks take the CPU they leave
            runner = make_executor(executor, workers=n, ray_address=ray_address, nice=TASK_NICE)
            batch = runner.start(pipeline.ingest_shard, calls, order=_priority([plan[i] for i in todo], wanted))
            batch.fill()
        cluster = ClusterTables(out, disc, src_path, started)
        try:
            progress.phase("reading the small files of every rank")
            t0 = time.perf_counter()
            cluster.load_small(work, memory_limit)
            for e in entries:
                if e["status"] == "ready":
                    cluster.add_shard(e)
            cluster.write()
            _write_manifest(out, entries, src_path, "ingesting")
            timing["small_s"] = round(time.perf_counter() - t0, 3)
            progress.phase("reading the ranks")
            if batch is not None:
                _wait(batch, todo, plan, entries, cluster, out, src_path, progress)
            progress.phase("writing the cluster tables")
            t0 = time.perf_counter()
            cluster.write(final=True)
            timing["cluster_write_s"] = round(time.perf_counter() - t0, 3)
            summary = cluster.summary(entries)
        finally:
            cluster.close()
        timing["total_s"] = round(time.perf_counter() - started, 3)
        _write_manifest(out, entries, src_path, "complete", timing)
        _remove_stale(out, {e["file"] for e in entries})
    finally:
        if batch is not None and not batch.done:
            batch.stop()
        if runner is not None:
            runner.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out / PROGRESS_DIR, ignore_errors=True)
        sweep_temp(out)
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def _wait(batch, todo: list[int], plan: list[Shard], entries: list[dict], cluster: ClusterTables, out: Path,
          src_path: Path, progress: Progress) -> None:
    """Collect the shard tasks as they finish and publish them: failed ones into the cluster tables' warnings,
    ready ones into the cluster tables, which are rewritten before the manifest that marks them: the first time
    at once, then at most every MIN_REWRITE_S and for at most 1/REWRITE_FACTOR of the time waited (a budget, not
    a spacing: two shards finishing close together are both published soon). The rewrites run on a thread of
    their own, so a worker that frees starts its next shard at once, not after a rewrite; the last shards are
    left to the caller's final write."""
    finished: list[tuple[int, dict, str | None]] = []  # (plan index, its entry's new fields, error) to publish
    started: set[int] = set()
    last_write = -math.inf  # the first shards to finish are published at once: the first rank opens sooner
    waited_from, spent = time.monotonic(), 0.0  # (spent: seconds of the rewrites so far)
    job = None
    overviews_due = False  # a task announced its rank's overview (ingest.overview): the manifest says so

    def publish(items: list[tuple[int, dict, str | None]], write: bool) -> None:
        # (only this thread touches the entries and the cluster tables while the tasks run)
        for i, fields, error in items:
            shard, entry = plan[i], entries[i]
            entry.update(fields)
            if error is None:
                cluster.add_shard(entry)
            else:
                cluster.fail(shard, error)
                if (out / shard.file).is_file():  # an earlier ingest's: not this source's
                    (out / shard.file).unlink()
        if write:
            cluster.write()
            _write_manifest(out, entries, src_path, "ingesting")

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster-write") as writer:
        while not batch.done:
            for j, result, error in batch.poll(POLL_S):
                i = todo[j]
                shard = plan[i]
                if error is None:
                    finished.append((i, dict(status="ready", overview=None, bytes=(out / shard.file).stat().st_size,
                                             seconds=result["seconds"], warnings=len(result["warnings"]),
                                             error=None, counts=_counts(result), finished=round(time.time(), 3)),
                                     None))
                else:
                    finished.append((i, dict(status="failed", overview=None, error=error, bytes=None), error))
                progress.file_done(shard.ranks[0], _label(shard), shard.input_bytes,
                                   float((result or {}).get("seconds") or 0.0))
            batch.fill()  # the freed workers start their next shards now, whatever this loop does next
            for j in batch.running.values():  # bytes read so far by the tasks still running
                shard = plan[todo[j]]
                if j not in started:
                    started.add(j)
                    progress.file_start(shard.ranks[0], _label(shard), shard.input_bytes)
                progress_file = out / PROGRESS_DIR / f"{Path(shard.file).stem}.bytes"
                progress.file_progress(shard.ranks[0], _label(shard), pipeline.read_done_bytes(progress_file))
                overviews_due = _take_overview(entries[todo[j]], progress_file) or overviews_due
            if overviews_due and job is None:  # (a rewrite running now writes the manifest from the entries too)
                _write_manifest(out, entries, src_path, "ingesting")
                overviews_due = False
            if job is not None and job.done():
                job.result()  # (raises what the rewrite raised)
                job, last_write, spent = None, time.monotonic(), spent + cluster.write_s
            now = time.monotonic()
            due = now - last_write >= MIN_REWRITE_S and (
                spent == 0 or REWRITE_FACTOR * (spent + cluster.write_s) <= now - waited_from)
            if finished and job is None and due and not batch.done:
                job = writer.submit(publish, finished, True)
                finished = []
        if job is not None:
            job.result()
    publish(finished, write=False)  # the caller's final write publishes the last ones


WARNING_COUNTS = """
UPDATE out.cluster_ranks SET warning_count = (SELECT count(*) FROM out.warnings w WHERE w.rank = cluster_ranks.rank)
"""


def _take_overview(entry: dict, progress_file: Path) -> bool:
    """A pending shard whose task announced its rank's overview (``ingest.overview``) gets it in its entry:
    ``overview`` = its file and the rank's time range, which readers attach until the shard is ready. True when
    the entry changed."""
    if entry.get("overview") or entry["status"] != "pending":
        return False
    note = overview.read_note(progress_file)
    if note is None or not (progress_file.parent.parent / SHARDS_DIR / note["file"]).is_file():
        return False
    # (the key exists from the start: a manifest rewrite on the writer's thread may be iterating over the entry)
    entry["overview"] = {"file": f"{SHARDS_DIR}/{note['file']}", "start_ns": note["start_ns"],
                         "end_ns": note["end_ns"]}
    return True


def _counts(result: dict) -> dict:
    """What a shard holds, kept in its manifest entry (a resumed ingest sums them without opening it)."""
    return {k: result[k] for k in ("slices_per_kind", "flows_per_category", "counters", "tables")}


def _label(shard: Shard) -> str:
    return f"ranks {shard.ranks[0]}–{shard.ranks[-1]}" if len(shard.ranks) > 1 else f"rank {shard.ranks[0]}"


def _priority(shards: list[Shard], wanted: Callable[[], list[int]] | None):
    """``order`` for the batch: the pending shards holding the ranks ``wanted()`` names (in its order) first,
    then the rest in rank order."""
    where = {r: j for j, s in enumerate(shards) for r in s.ranks}

    def order(pending: list[int]) -> list[int]:
        first = []
        try:
            asked = list(wanted()) if wanted is not None else []
        except Exception:  # noqa: BLE001 - a wish that cannot be read is no wish
            asked = []
        for r in asked:
            j = where.get(r)
            if j in pending and j not in first:
                first.append(j)
        return first + sorted(j for j in pending if j not in first)

    return order


def _previous(out: Path) -> dict[str, dict]:
    """The ready entries of the manifest already in ``out`` (an interrupted or earlier ingest), by file."""
    try:
        manifest = read_manifest(out)
    except (OSError, ValueError):
        return {}
    if manifest.get("format_version") != FORMAT_VERSION or manifest.get("schema_version") != SCHEMA_VERSION:
        return {}
    return {e["file"]: e for e in manifest.get("shards", []) if e.get("status") == "ready" and e.get("file")}


def _entries(plan: list[Shard], previous: dict[str, dict], out: Path) -> list[dict]:
    """The manifest entry of every planned shard: ready when an earlier ingest left it whole and made from the
    same source, else pending."""
    entries = []
    for shard in plan:
        old = previous.get(shard.file)
        path = out / shard.file
        kept = (old is not None and old.get("source") == shard.source_id and old.get("ranks") == shard.ranks
                and path.is_file() and path.stat().st_size == old.get("bytes"))
        entry = {"file": shard.file, "ranks": shard.ranks, "status": "pending", "bytes": None,
                 "input_bytes": shard.input_bytes, "source": shard.source_id, "seconds": None, "warnings": None,
                 "error": None, "counts": None, "finished": None, "reused": False, "overview": None}
        if kept:
            entry.update(status="ready", bytes=old["bytes"], seconds=old.get("seconds"),
                         warnings=old.get("warnings"), counts=old.get("counts"), finished=old.get("finished"),
                         reused=True)
        entries.append(entry)
    return entries


class ClusterTables:
    """The run-wide tables of a run being ingested, kept in memory and written to ``cluster.duckdb`` whole:
    the small files' tables of every rank (``load_small``), then, rank by rank as shards are ready, the rows
    their shard has for them (``add_shard``): ``ranks``, ``files``, ``warnings`` and every ``cluster_*`` table
    replace the small files' rows of those ranks."""

    def __init__(self, out: Path, disc, src_path: Path, started: float):
        self.out, self.disc, self.src_path, self.started = out, disc, src_path, started
        self.con = duckdb.connect(":memory:", config=UNSYNCED)  # (the file is synced when written)
        self.con.execute("SET preserve_insertion_order = true")
        self.ready: list[int] = []  # ranks whose shard rows replace the small ones
        self.failed: list[tuple] = []  # warnings of failed shards
        self.write_s = 0.0
        self.tables: dict[str, bool] = {}  # table -> has a rank column
        self.empty: list[str] = []

    def load_small(self, work: Path, memory_limit: str) -> None:
        """Every rank's small files (SMALL_KINDS) into a scratch run database, then kept here."""
        small = [dataclasses.replace(s, files={k: p for k, p in s.files.items() if k in SMALL_KINDS})
                 for s in self.disc.ranks]
        path = work / "small.duckdb"
        pipeline.write_ranks(small, self.disc.root, path, src_path=self.src_path, work=work / "small",
                             progress=Progress(), workers=2, memory_limit=memory_limit, extra_warnings=[],
                             started=self.started, groups=pipeline.plan_groups(small, max_ranks=1024))
        self.con.execute(f"ATTACH '{_sql_path(path)}' AS small (READ_ONLY)")
        for table, columns in self.con.execute(
                "SELECT table_name, list(column_name) FROM duckdb_columns() WHERE database_name = 'small' AND "
                "table_name IN (SELECT table_name FROM duckdb_tables() WHERE database_name = 'small') "
                "GROUP BY table_name ORDER BY table_name").fetchall():
            if table in RUN_TABLES[1:] or table in EARLY_TABLES or table.startswith(CLUSTER_PREFIX):
                self.con.execute(f'CREATE TABLE "small_{table}" AS SELECT * FROM small."{table}"')
                self.con.execute(f'CREATE TABLE "shard_{table}" AS SELECT * FROM small."{table}" WHERE false')
                self.tables[table] = "rank" in columns
            elif table != "meta":  # a table only the shards have: its empty form, for a run with none ready yet
                self.con.execute(f'CREATE TABLE "empty_{table}" AS SELECT * FROM small."{table}" WHERE false')
                self.empty.append(table)
        self.con.execute("DETACH small")
        path.unlink(missing_ok=True)
        from .cluster import load_cluster_analysis

        self.analysis = [(None, *(str(w).partition(": ")[::2] if ": " in str(w) else ("cluster_analysis_output",
                                                                                         str(w))))
                         for w in [*(load_cluster_analysis(self.con, self.disc.root) or []),
                                   *serving.load_serving(self.con, self.disc.root),
                                   # the strategy over every rank's metadata, once (never per shard)
                                   *strategy_tables.build(self.con, "small_ranks"),
                                   *experts.load_experts(self.con, self.disc.root)]]

    def _columns(self, table: str) -> list[str]:
        return [c for (c,) in self.con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ?",
                                               [table]).fetchall()]

    def add_shard(self, entry: dict) -> None:
        """A ready shard's rows of its ranks."""
        self.con.execute(f"ATTACH '{_sql_path(self.out / entry['file'])}' AS s (READ_ONLY)")
        try:
            have = {t for (t,) in self.con.execute("SELECT table_name FROM duckdb_tables() "
                                                   "WHERE database_name = 's'").fetchall()}
            for table in sorted(have):
                if table in EARLY_TABLES and self.tables.get(table):
                    # rows a shard made from its traces for ranks whose small files had none (ingest.trace_tables:
                    # a Level0 or msprof rank's communication operators)
                    self.con.execute(f'INSERT INTO "shard_{table}" BY NAME SELECT * FROM s."{table}" '
                                     f'WHERE rank NOT IN (SELECT DISTINCT rank FROM "small_{table}")')
                    continue
                if not (table in RUN_TABLES[1:] or table.startswith(CLUSTER_PREFIX)):
                    continue
                if table not in self.tables:  # a cluster table only the shards have
                    self.con.execute(f'CREATE TABLE "shard_{table}" AS SELECT * FROM s."{table}" WHERE false')
                    self.con.execute(f'CREATE TABLE "small_{table}" AS SELECT * FROM s."{table}" WHERE false')
                    self.tables[table] = "rank" in self._columns(f"shard_{table}")
                self.con.execute(f'INSERT INTO "shard_{table}" BY NAME SELECT * FROM s."{table}"')
        finally:
            self.con.execute("DETACH s")
        self.ready.extend(entry["ranks"])

    def fail(self, shard: Shard, error: str) -> None:
        for src in shard.sources:
            self.failed.append((src.rank, pipeline.display_name(src.folder, self.disc.root),
                                f"not loaded: the shard task failed: {error}"))

    def write(self, final: bool = False) -> None:
        """cluster.duckdb as of now (temp file + rename)."""
        t0 = time.perf_counter()
        ready = sorted(set(self.ready))
        target = self.out / CLUSTER_DB
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        self.con.execute(f"ATTACH '{_sql_path(tmp)}' AS out (BLOCK_SIZE {self._block_size()})")
        try:
            for table, ranked in sorted(self.tables.items()):
                if table in EARLY_TABLES and ranked:  # the small files' rows, and those shards made for the others
                    sql = (f'SELECT * FROM "small_{table}" UNION ALL BY NAME SELECT * FROM "shard_{table}" '
                           'ORDER BY rank NULLS FIRST')
                elif table in EARLY_TABLES or not ranked:
                    sql = f'SELECT * FROM "small_{table}"'
                else:
                    sql = (f'SELECT * FROM "small_{table}" WHERE NOT list_contains(?, rank) '
                           f'UNION ALL BY NAME SELECT * FROM "shard_{table}" ORDER BY rank NULLS FIRST')
                params = [] if table in EARLY_TABLES or not ranked else [ready]
                self.con.execute(f'CREATE TABLE out."{table}" AS {sql}', params)
            for name in [t for (t,) in self.con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = 'memory' "
                    "AND (starts_with(table_name, 'cluster_analysis_') OR starts_with(table_name, 'serving_') "
                    "OR list_contains(?, table_name))", [[*strategy_tables.TABLES, *experts.TABLES]]
            ).fetchall()]:
                self.con.execute(f'CREATE TABLE out."{name}" AS SELECT * FROM "{name}"')
            self.con.execute(f"CREATE SCHEMA out.{EMPTY_SCHEMA}")
            for table in self.empty:
                self.con.execute(f'CREATE TABLE out.{EMPTY_SCHEMA}."{table}" AS SELECT * FROM "empty_{table}"')
            self.con.execute("CREATE TABLE out.meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            rows = list(self.disc.warnings) + self.analysis + self.failed
            if rows:
                pipeline.insert_rows(self.con, "out.warnings", rows)
                # a rank's count covers the run's warnings about it (discovery's too), as in a single-file run
                self.con.execute(WARNING_COUNTS)
            bytes_read = self.con.execute("SELECT coalesce(sum(size_bytes), 0) FROM out.files").fetchall()[0][0]
            meta = {"schema_version": str(SCHEMA_VERSION), "ascendscope_version": pipeline._version(),
                    "source_path": str(self.src_path), "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "ingest_seconds": f"{time.perf_counter() - self.started:.3f}", "bytes_read": str(int(bytes_read)),
                    "layout": "sharded", "complete": "true" if final else "false"}
            pipeline.insert_rows(self.con, "out.meta", list(meta.items()))
            self.con.execute("DETACH out")
            sync_file(tmp)
            os.replace(tmp, target)
        except BaseException:
            self.con.execute("DETACH DATABASE IF EXISTS out")
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
            raise
        self.write_s = time.perf_counter() - t0

    def _block_size(self) -> int:
        """Small blocks keep the file of a small run small (a block per column at least); past CLUSTER_BIG_ROWS
        rows the default blocks, which a rewrite checkpoints faster (the file is rewritten as shards become
        ready; its last write at 1,000 ranks took 0.75 s against 1.35 s, docs/benchmarks.md)."""
        counts = [f'SELECT count(*) AS n FROM "{prefix}_{table}"' for table in self.tables
                  for prefix in ("small", "shard")]
        rows = self.con.execute(f"SELECT coalesce(sum(n), 0) FROM ({' UNION ALL '.join(counts)})").fetchone()[0] \
            if counts else 0
        return pipeline.SMALL_BLOCK_BYTES if rows < CLUSTER_BIG_ROWS else DEFAULT_BLOCK_BYTES

    def summary(self, entries: list[dict]) -> dict:
        """The ingest summary of the whole run: that of a single file (the shards' counts added up, the small
        files' tables counted here), plus shards."""
        counts = [e["counts"] for e in entries if e["status"] == "ready" and e.get("counts")]

        def total(key: str) -> dict:
            sums: dict[str, int] = {}
            for c in counts:
                for k, v in c[key].items():
                    sums[k] = sums.get(k, 0) + v
            return dict(sorted(sums.items()))

        con = duckdb.connect(str(self.out / CLUSTER_DB), read_only=True)
        try:
            warnings = [{"rank": r, "file": f, "message": m} for r, f, m in con.execute(
                "SELECT rank, file, message FROM warnings ORDER BY rank NULLS FIRST, file").fetchall()]
            ranks = [r for (r,) in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
            bytes_read = int(con.execute("SELECT value FROM meta WHERE key = 'bytes_read'").fetchone()[0])
            tables = total("tables")
            cluster_rows = con.execute(pipeline.CLUSTER_ANALYSIS_ROWS_SQL).fetchone()[0]
            serving_rows = con.execute(serving.ROWS_SQL).fetchone()[0]
            expert_rows = con.execute(pipeline.EXPERT_ROWS_SQL).fetchone()[0]
            for t in EARLY_TABLES:  # every rank's rows are here, also those of shards that failed
                if t in self.tables:
                    tables[t] = con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
        finally:
            con.close()
        return {"ranks": ranks, "slices_per_kind": total("slices_per_kind"),
                "flows_per_category": total("flows_per_category"),
                "counters": sum(c["counters"] for c in counts), "tables": dict(sorted(tables.items())),
                "cluster_analysis_rows": cluster_rows, "serving_rows": serving_rows, "expert_rows": expert_rows,
                "warnings": warnings, "bytes_read": bytes_read, "layout": "sharded",
                "reused": sum(1 for e in entries if e.get("reused")),
                "shards": [{k: e[k] for k in ("file", "ranks", "status", "seconds", "warnings", "error")}
                           | {"rank": e["ranks"][0]} for e in entries]}

    def close(self) -> None:
        self.con.close()


def _write_manifest(out: Path, entries: list[dict], src_path: Path, status: str, timing: dict | None = None) -> None:
    counts = {"ready": 0, "pending": 0, "failed": 0}
    for e in entries:
        counts[e["status"]] = counts.get(e["status"], 0) + len(e["ranks"])
    manifest = {"format_version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION, "source": str(src_path),
                "created": datetime.now(UTC).isoformat(timespec="seconds"), "status": status, "cluster": CLUSTER_DB,
                "ranks": counts | {"total": sum(counts.values())},
                # seconds of the coordinator's own steps (bench.scaling projects a run onto N nodes from them)
                "timing": timing or {},
                "shards": [{k: v for k, v in e.items() if k != "reused"} for e in entries]}
    tmp = out / f".{MANIFEST}.tmp-{os.getpid()}-{threading.get_ident()}"
    tmp.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    os.replace(tmp, out / MANIFEST)


def _remove_stale(out: Path, keep: set[str]) -> None:
    """Shards of an earlier ingest into this folder that this one did not write."""
    for path in (out / SHARDS_DIR).glob("rank*.duckdb"):
        if f"{SHARDS_DIR}/{path.name}" not in keep and path.is_file():
            path.unlink(missing_ok=True)


def sweep_temp(out: Path) -> list[Path]:
    """Remove the temp files a killed task or ingest left in a run folder (a shard or cluster.duckdb being
    written, their WAL, a manifest being replaced): only call it when no live process writes into the folder
    (the server holds the run's ingest lock). Returns what was removed."""
    gone = []
    for pattern in (f"{CLUSTER_DB}.tmp-*", f".{MANIFEST}.tmp-*", f"{SHARDS_DIR}/*.tmp-*"):
        for path in Path(out).glob(pattern):
            path.unlink(missing_ok=True)
            gone.append(path)
    return gone


__all__ = ["FORMAT_VERSION", "NoProfilingData", "connect", "ingest_sharded", "is_sharded", "plan_shards",
           "read_manifest", "shard_name", "sweep_temp"]
