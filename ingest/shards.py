"""Ingest a run as one shard per rank plus small cluster tables, described by a manifest (docs/schema.md).

``ingest_sharded(src, out_dir)`` discovers the ranks once (so rank ids and file names are those of a single-file
ingest), then runs one task per rank on an executor (``ingest.executors``: a process pool, or Ray): each writes
``shards/rank_<rank:05d>.duckdb`` — exactly a single-file run database of that rank, with its fixed id range
(``pipeline.rank_id_bases``) — through a temp name. The level-of-detail tables need the whole run's widths, so
a second round of tasks builds them in every shard once all are written. Then ``cluster.duckdb`` gathers the run-
wide tables (``meta``, ``ranks``, ``files``, ``warnings``, ``lod_levels``, the ``cluster_*`` tables of every shard
and ``cluster_analysis_*``), a few shards attached at a time. ``manifest.json`` is written last (temp + rename):
a folder without one is not a run.

A rank whose task fails (an error, a worker that died twice) is a ``failed`` entry of the manifest with the
reason, and a row of ``warnings`` naming its folder; the other ranks still load. Nothing else in ``out_dir`` is
touched but the manifest, ``cluster.duckdb``, ``shards/`` and their temp files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from . import SCHEMA_VERSION, lod, pipeline, readers
from .executors import default_workers, make_executor
from .layout import (
    CLUSTER_DB,
    CLUSTER_PREFIX,
    FORMAT_VERSION,
    MANIFEST,
    RUN_TABLES,
    SHARDS_DIR,
    _sql_path,
    connect,
    is_sharded,
    read_manifest,
    shard_name,
)
from .pipeline import NoProfilingData, Progress, ingest_rank
from .schema import CORE_DDL

ATTACH_BATCH = 16  # shards attached at once while cluster.duckdb is assembled
SHARD_MEMORY_LIMIT = "1GB"  # DuckDB's limit per task (spilling past it), so a worker stays within ~1.5 GB


def build_shard_lod(path: str, base_ns: int, span_ns: int, memory_limit: str = SHARD_MEMORY_LIMIT,
                    threads: int | None = None) -> list[tuple[int, int, int]]:
    """Second round: the shard's level-of-detail tables at the run's widths, in one transaction."""
    con = duckdb.connect(path)
    try:
        con.execute(f"SET memory_limit = '{pipeline._checked_size(memory_limit)}'")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("BEGIN TRANSACTION")
        levels = lod.build(con, base_ns=base_ns, span_ns=span_ns)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return levels


def ingest_sharded(src, out_dir, *, executor: str = "process", workers: int | None = None,
                   ray_address: str | None = None, progress: Progress | None = None,
                   memory_limit: str = SHARD_MEMORY_LIMIT) -> dict:
    """Ingest ``src`` (folder, archive or trace file) into the run folder ``out_dir``; return the summary (that
    of ``ingest_path`` plus ``shards``: rank, status, seconds, warnings, error per shard)."""
    started = time.perf_counter()
    progress = progress or Progress()
    src_path, out = Path(src), Path(out_dir)
    pipeline._checked_size(memory_limit)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # from here until the new manifest, the folder is not a run
    work = out / f".work-{os.getpid()}-{threading.get_ident()}"
    work.mkdir()
    runner = None
    try:
        disc = pipeline.prepare(src_path, work / "extracted", progress)
        sizes = {s.rank: sum(readers.size(k, p) for k, p in s.files.items()) for s in disc.ranks}
        progress.begin(sum(sizes.values()), len(disc.ranks))
        (out / SHARDS_DIR).mkdir(exist_ok=True)
        # no more processes than ranks: a lone rank gets every core (its files load side by side, its trace in
        # halves) instead of one core beside an idle worker
        n = max(1, min(int(workers or default_workers()), len(disc.ranks)))
        threads = max(1, (os.cpu_count() or 1) // n)
        # node-local scratch for Ray (another node may not have our temp folder); our run folder's otherwise
        scratch = None if executor == "ray" else tempfile.gettempdir()
        runner = make_executor(executor, workers=n, ray_address=ray_address)
        calls = [{"source": s, "root": str(disc.root), "out": str(out / shard_name(s.rank)),
                  "src_path": str(src_path), "scratch": scratch, "memory_limit": memory_limit, "threads": threads}
                 for s in disc.ranks]
        results: dict[int, dict] = {}
        errors: dict[int, str] = {}
        for i, result, error in runner.run(ingest_rank, calls):
            rank = disc.ranks[i].rank
            if error is None:
                results[rank] = result
            else:
                errors[rank] = error
            progress.file_done(rank, pipeline._display(disc.ranks[i].folder, disc.root), sizes[rank],
                               float(result["seconds"]) if result else 0.0)
        plan = lod.base_from_inputs([r["lod_inputs"] for r in results.values()])
        levels: dict[int, list] = {}
        if plan is not None:
            progress.phase("building the level-of-detail tables")
            ranks = sorted(r for r in results if results[r]["lod_inputs"]["slices"])
            lod_calls = [{"path": calls[_index(disc, r)]["out"], "base_ns": plan[0], "span_ns": plan[1],
                          "memory_limit": memory_limit, "threads": threads} for r in ranks]
            for i, result, error in runner.run(build_shard_lod, lod_calls):
                if error is None:
                    levels[ranks[i]] = result
                else:  # the shard is incomplete: it does not load
                    errors[ranks[i]] = f"level-of-detail tables: {error}"
                    results.pop(ranks[i])
        runner.close()
        runner = None
        progress.phase("writing the cluster tables")
        entries = _entries(out, disc, results, errors)
        failed = [(r, pipeline._display(_source(disc, r).folder, disc.root), m) for r, m in sorted(errors.items())]
        _write_cluster(out, disc, sorted(results), levels, failed, src_path, started)
        summary = _summary(out, entries, results)
        _write_manifest(out, entries, src_path)
        _remove_stale(out, {e["file"] for e in entries if e["file"]})
    finally:
        if runner is not None:
            runner.close()
        shutil.rmtree(work, ignore_errors=True)
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def _index(disc, rank: int) -> int:
    return next(i for i, s in enumerate(disc.ranks) if s.rank == rank)


def _source(disc, rank: int):
    return disc.ranks[_index(disc, rank)]


def _entries(out: Path, disc, results: dict[int, dict], errors: dict[int, str]) -> list[dict]:
    entries = []
    for s in disc.ranks:
        r = s.rank
        ok = r in results
        path = out / shard_name(r)
        entries.append({
            "rank": r, "file": shard_name(r) if ok else None, "bytes": path.stat().st_size if ok else None,
            "status": "ready" if ok else "failed", "warnings": len(results[r]["warnings"]) if ok else 1,
            "seconds": results[r]["seconds"] if ok else None, "error": None if ok else errors.get(r)})
    return entries


def _write_cluster(out: Path, disc, ready: list[int], levels: dict[int, list], failed: list[tuple],
                   src_path: Path, started: float) -> None:
    """cluster.duckdb: the run-wide tables, from every ready shard (a few attached at a time), then renamed."""
    with pipeline.atomic_duckdb(out / CLUSTER_DB) as con:
        made: set[str] = set()
        for start in range(0, len(ready), ATTACH_BATCH):
            batch = ready[start:start + ATTACH_BATCH]
            for j, rank in enumerate(batch):
                con.execute(f"ATTACH '{_sql_path(out / shard_name(rank))}' AS s{j} (READ_ONLY)")
            for j, _ in enumerate(batch):
                names = [t for (t,) in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [f"s{j}"]).fetchall()]
                for table in names:
                    if table == "meta" or not (table in RUN_TABLES or table.startswith(CLUSTER_PREFIX)):
                        continue
                    if table in made:
                        con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM s{j}."{table}"')
                    else:
                        con.execute(f'CREATE TABLE "{table}" AS SELECT * FROM s{j}."{table}"')
                        made.add(table)
            for j, _ in enumerate(batch):
                con.execute(f"DETACH s{j}")
        for ddl in CORE_DDL:  # the run-wide tables exist even when no shard is ready
            name = ddl.split()[2]
            if name in RUN_TABLES and name not in made and name != "meta":
                con.execute(ddl)
        con.execute(CORE_DDL[0])  # meta: the run's own
        rows = list(disc.warnings) + failed
        if rows:
            con.executemany("INSERT INTO warnings VALUES (?, ?, ?)", [list(w) for w in rows])
        con.execute("CREATE TABLE lod_levels (level INTEGER, bucket_ns BIGINT, row_count BIGINT)")
        totals: dict[tuple[int, int], int] = {}
        for shard_levels in levels.values():
            for level, bucket_ns, count in shard_levels:
                totals[(level, bucket_ns)] = totals.get((level, bucket_ns), 0) + count
        if totals:
            con.executemany("INSERT INTO lod_levels VALUES (?, ?, ?)", [[lv, b, c] for (lv, b), c in
                                                                       sorted(totals.items())])
        pipeline.load_cluster_analysis(con, disc.root)
        bytes_read = con.execute("SELECT coalesce(sum(size_bytes), 0) FROM files").fetchone()[0]
        meta = {"schema_version": str(SCHEMA_VERSION), "ascendscope_version": pipeline._version(),
                "source_path": str(src_path), "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "ingest_seconds": f"{time.perf_counter() - started:.3f}", "bytes_read": str(int(bytes_read)),
                "layout": "sharded"}
        con.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))


def _summary(out: Path, entries: list[dict], results: dict[int, dict]) -> dict:
    """The ingest summary of the whole run: that of a single file (warnings from cluster.duckdb), plus shards."""
    def total(key: str) -> dict:
        sums: dict[str, int] = {}
        for r in results.values():
            for k, v in r[key].items():
                sums[k] = sums.get(k, 0) + v
        return dict(sorted(sums.items()))

    con = duckdb.connect(str(out / CLUSTER_DB), read_only=True)
    try:
        warnings = [{"rank": r, "file": f, "message": m} for r, f, m in con.execute(
            "SELECT rank, file, message FROM warnings ORDER BY rank NULLS FIRST, file").fetchall()]
        ranks = [r for (r,) in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
        bytes_read = int(con.execute("SELECT value FROM meta WHERE key = 'bytes_read'").fetchone()[0])
    finally:
        con.close()
    return {"ranks": ranks, "slices_per_kind": total("slices_per_kind"),
            "flows_per_category": total("flows_per_category"),
            "counters": sum(r["counters"] for r in results.values()), "tables": total("tables"),
            "warnings": warnings, "bytes_read": bytes_read, "layout": "sharded",
            "shards": [{k: e[k] for k in ("rank", "status", "seconds", "warnings", "error")} for e in entries]}


def _write_manifest(out: Path, entries: list[dict], src_path: Path) -> None:
    manifest = {"format_version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION, "source": str(src_path),
                "created": datetime.now(UTC).isoformat(timespec="seconds"), "cluster": CLUSTER_DB,
                "shards": entries}
    tmp = out / f".{MANIFEST}.tmp-{os.getpid()}-{threading.get_ident()}"
    tmp.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    os.replace(tmp, out / MANIFEST)


def _remove_stale(out: Path, keep: set[str]) -> None:
    """Shards of an earlier ingest into this folder that this one did not write."""
    for path in (out / SHARDS_DIR).glob("rank_*.duckdb"):
        if f"{SHARDS_DIR}/{path.name}" not in keep and path.is_file():
            path.unlink(missing_ok=True)


__all__ = ["FORMAT_VERSION", "NoProfilingData", "connect", "ingest_sharded", "is_sharded", "read_manifest",
           "shard_name"]
