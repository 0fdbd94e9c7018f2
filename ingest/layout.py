"""The sharded run layout (docs/schema.md), and reading such a run as one database. Only DuckDB: the web
process imports this, never the ingest pipeline.

A run folder holds ``manifest.json`` (a folder without one is not a run; while the run ingests it lists its
shards as pending or ready, and is rewritten as they become ready), ``cluster.duckdb`` (the run-wide tables) and
``shards/rank_<rank:05d>.duckdb`` or ``shards/ranks_<first:05d>-<last:05d>.duckdb`` (a single-file run database of
one rank or of several small ones, each rank's ids in its own range: track ids from ``rank << 16``, slice and flow
ids from ``rank << 36``). Only ``ready`` shards are read, and the ``overview`` of a pending one (every lane of a
big rank, coarse, as soon as it is parsed: ``ingest.overview``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb

FORMAT_VERSION = 2  # 1: one shard per rank, the manifest written once at the end
MANIFEST = "manifest.json"
CLUSTER_DB = "cluster.duckdb"
SHARDS_DIR = "shards"
RUN_TABLES = ("meta", "ranks", "files", "warnings")  # run-wide: read from cluster.duckdb, never from the shards
CLUSTER_PREFIX = "cluster_"
EMPTY_SCHEMA = "empty"  # cluster.duckdb's empty copy of every shard table, read while no shard holding it is attached
TRACK_ID_BITS, SLICE_ID_BITS = 16, 36
MAX_SHARD_RANK = (1 << (31 - TRACK_ID_BITS)) - 1  # track_id is an INTEGER


# A database file being written is thrown away unless it is complete, so none of its many commits (each table's
# DDL, each stage's rows: 80-250 for a small run) needs to reach the disk on its own: the ingest's connections sync
# none of them (each sync took 1-3 ms here, far more on a network disk), and the finished file is synced once,
# before it takes its name (``sync_file``).
UNSYNCED = {"fsync_mode": "NONE"}


def sync_file(path: str | os.PathLike) -> None:
    """Flush ``path``'s bytes to stable storage (before a rename makes it the file readers open)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def shard_name(rank: int, last: int | None = None) -> str:
    """The shard file of one rank, or of the ranks ``rank`` to ``last``."""
    if last is None or last == rank:
        return f"{SHARDS_DIR}/rank_{rank:05d}.duckdb"
    return f"{SHARDS_DIR}/ranks_{rank:05d}-{last:05d}.duckdb"


def is_sharded(path: str | os.PathLike) -> bool:
    """True for a run folder with a manifest (the sharded layout)."""
    return (Path(path) / MANIFEST).is_file()


def read_manifest(out_dir: str | os.PathLike) -> dict:
    """The manifest, every shard entry with its ``ranks`` (a format-1 entry names one ``rank``)."""
    manifest = json.loads((Path(out_dir) / MANIFEST).read_text(encoding="utf-8"))
    for entry in manifest.get("shards", []):
        if "ranks" not in entry:
            entry["ranks"] = [entry["rank"]]
    return manifest


def ready_shards(manifest: dict) -> dict[int, str]:
    """rank -> the file of its ready shard, or of its shard's overview (``overview``, see ``ingest.overview``)
    while the rest of it ingests."""
    out = {}
    for e in manifest["shards"]:
        file = e["file"] if e["status"] == "ready" else (e.get("overview") or {}).get("file")
        if file:
            out.update(dict.fromkeys(e["ranks"], file))
    return out


def partial_ranks(manifest: dict) -> dict[int, dict]:
    """rank -> ``{"overview": True, "start_ns", "end_ns"}`` (the rank's time range) for a rank read from its
    overview: its tracks, and its lanes' busy time in coarse buckets (``slice_lod``), are there; none of its slices
    yet."""
    return {r: {"overview": True, "start_ns": e["overview"]["start_ns"], "end_ns": e["overview"]["end_ns"]}
            for e in manifest["shards"] if e["status"] == "pending" and e.get("overview") for r in e["ranks"]}


def shard_aliases(manifest: dict) -> dict[int, str]:
    """rank -> the name :func:`connect` attaches its ready shard under: ``r<the shard's first rank>`` (the
    server reads one rank's viewport from that shard alone)."""
    ready = ready_shards(manifest)
    first: dict[str, int] = {}
    for rank, file in ready.items():
        first[file] = min(first.get(file, rank), rank)
    return {rank: f"r{first[file]}" for rank, file in ready.items()}


def manifest_ranks(manifest: dict) -> dict[str, list[int]]:
    """The run's ranks by the state of their shard: ``ready``, ``pending`` (still ingesting; some of them may be
    read from an overview, see :func:`partial_ranks`) and ``failed``."""
    out: dict[str, list[int]] = {"ready": [], "pending": [], "failed": []}
    for e in manifest["shards"]:
        out.setdefault(e["status"], []).extend(e["ranks"])
    return {k: sorted(v) for k, v in out.items()}


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def connect(out_dir: str | os.PathLike, ranks: list[int] | None = None, *, manifest: dict | None = None,
            threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, list[int]]:
    """The run as one database, reading only the shards holding ``ranks`` (None: every ready shard): an
    in-memory connection that attaches ``cluster.duckdb`` and those shards read-only, and views with the
    single-file table names: a table cluster.duckdb has reads it, any other the ``UNION ALL BY NAME`` of the
    attached shards. Returns the connection and the ranks loaded: those of the attached shards (a shard of
    several ranks brings them all; requested ranks without a ready shard are left out). Cursors of the
    connection see the views too."""
    root = Path(out_dir)
    manifest = manifest if manifest is not None else read_manifest(root)
    ready = ready_shards(manifest)
    files = sorted({ready[r] for r in (ready if ranks is None else set(ranks) & set(ready))})
    loaded = sorted(r for r, f in ready.items() if f in files)
    con = duckdb.connect(":memory:")
    try:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        con.execute(f"ATTACH '{_sql_path(root / manifest.get('cluster', CLUSTER_DB))}' AS cluster (READ_ONLY)")
        aliases = shard_aliases(manifest)
        alias_of = {ready[r]: aliases[r] for r in loaded}
        for file in files:
            con.execute(f"ATTACH '{_sql_path(root / file)}' AS {alias_of[file]} (READ_ONLY)")
        tables: dict[str, list[str]] = {}
        empty: set[str] = set()
        for db, schema, table in con.execute("SELECT database_name, schema_name, table_name FROM duckdb_tables() "
                                             "WHERE database_name <> 'memory' ORDER BY table_name").fetchall():
            if schema == "main":
                tables.setdefault(table, []).append(db)
            elif db == "cluster" and schema == EMPTY_SCHEMA:
                empty.add(table)
        shard_dbs = [alias_of[file] for file in files]
        for table, dbs in tables.items():
            if "cluster" in dbs:
                sql = f'SELECT * FROM cluster."{table}"'
            else:
                sql = " UNION ALL BY NAME ".join(f'SELECT * FROM {db}."{table}"' for db in shard_dbs if db in dbs)
            con.execute(f'CREATE VIEW main."{table}" AS {sql}')
        for table in sorted(empty - tables.keys()):  # no shard ready yet (or none attached): the empty table
            con.execute(f'CREATE VIEW main."{table}" AS SELECT * FROM cluster.{EMPTY_SCHEMA}."{table}"')
    except BaseException:
        con.close()
        raise
    return con, loaded
