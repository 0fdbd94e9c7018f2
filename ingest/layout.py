"""The sharded run layout (docs/schema.md), and reading such a run as one database. Only DuckDB: the web
process imports this, never the ingest pipeline.

A run folder holds ``manifest.json`` (written last: a folder without one is not a run), ``cluster.duckdb`` (the
run-wide tables) and ``shards/rank_<rank:05d>.duckdb`` (one single-file run database per rank, its ids in the
rank's own range: track ids from ``rank << 16``, slice and flow ids from ``rank << 36``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CLUSTER_DB = "cluster.duckdb"
SHARDS_DIR = "shards"
RUN_TABLES = ("meta", "ranks", "files", "warnings")  # run-wide: read from cluster.duckdb, never from the shards
CLUSTER_PREFIX = "cluster_"
TRACK_ID_BITS, SLICE_ID_BITS = 16, 36
MAX_SHARD_RANK = (1 << (31 - TRACK_ID_BITS)) - 1  # track_id is an INTEGER


def shard_name(rank: int) -> str:
    return f"{SHARDS_DIR}/rank_{rank:05d}.duckdb"


def is_sharded(path: str | os.PathLike) -> bool:
    """True for a run folder with a manifest (the sharded layout)."""
    return (Path(path) / MANIFEST).is_file()


def read_manifest(out_dir: str | os.PathLike) -> dict:
    return json.loads((Path(out_dir) / MANIFEST).read_text(encoding="utf-8"))


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def connect(out_dir: str | os.PathLike, ranks: list[int] | None = None, *, manifest: dict | None = None,
            threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, list[int]]:
    """The run as one database, reading only the shards of ``ranks`` (None: every ready shard): an in-memory
    connection that attaches ``cluster.duckdb`` and those shards read-only, and views with the single-file
    table names: a run-wide table reads cluster.duckdb, any other the ``UNION ALL BY NAME`` of the attached
    shards. Returns the connection and the ranks loaded (requested ranks without a ready shard are left out).
    Cursors of the connection see the views too."""
    root = Path(out_dir)
    manifest = manifest if manifest is not None else read_manifest(root)
    ready = {e["rank"]: e["file"] for e in manifest["shards"] if e["status"] == "ready"}
    loaded = sorted(ready if ranks is None else set(ranks) & set(ready))
    con = duckdb.connect(":memory:")
    try:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        con.execute(f"ATTACH '{_sql_path(root / manifest.get('cluster', CLUSTER_DB))}' AS cluster (READ_ONLY)")
        for rank in loaded:
            con.execute(f"ATTACH '{_sql_path(root / ready[rank])}' AS r{rank} (READ_ONLY)")
        tables: dict[str, list[str]] = {}
        for db, table in con.execute("SELECT database_name, table_name FROM duckdb_tables() "
                                     "WHERE database_name <> 'memory' ORDER BY table_name").fetchall():
            tables.setdefault(table, []).append(db)
        shard_dbs = [f"r{rank}" for rank in loaded]
        for table, dbs in tables.items():
            if "cluster" in dbs:
                sql = f'SELECT * FROM cluster."{table}"'
            else:
                sql = " UNION ALL BY NAME ".join(f'SELECT * FROM {db}."{table}"' for db in shard_dbs if db in dbs)
            con.execute(f'CREATE VIEW main."{table}" AS {sql}')
    except BaseException:
        con.close()
        raise
    return con, loaded
