"""What a sharded run costs to keep and to open, for docs/scaling.md.

    python -m ascendscope.bench.shardstats SRC [--out DIR] [--workers N]

Ingests ``SRC`` with ``ingest.shards.ingest_sharded`` (process pool) into ``DIR`` (kept when given, else a temp
folder), then reports: input bytes, shard bytes (total, per rank, and as a share of the input), the size and row
counts of ``cluster.duckdb`` (what the cluster views read), and the time to open the run as the server does
with ``shards.connect``: the cluster tables alone, one rank, and every rank, each followed by one query on a
shard table, so the attach cost is paid. Timings are single runs: read them with the machine's load beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ascendscope.bench.ingest import dir_bytes


def open_cost(out: Path, ranks: list[int] | None) -> dict:
    from ascendscope.ingest.shards import connect

    t0 = time.perf_counter()
    con, loaded = connect(out, ranks)
    opened = time.perf_counter() - t0
    try:
        n = con.execute("SELECT count(*) FROM tracks").fetchone()[0] if loaded else 0
    finally:
        con.close()
    return {"ranks": len(loaded), "open_s": round(opened, 3), "open_and_count_s": round(time.perf_counter() - t0, 3),
            "tracks": n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ascendscope.bench.shardstats", description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("--out", type=Path, help="keep the sharded run here (default: a temp folder, removed)")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args(argv)

    import duckdb

    from ascendscope.ingest.shards import CLUSTER_DB, SHARDS_DIR, ingest_sharded

    out = args.out or Path(tempfile.mkdtemp(prefix="shardstats-"))
    try:
        t0 = time.perf_counter()
        summary = ingest_sharded(args.src, out, workers=args.workers)
        wall = time.perf_counter() - t0
        input_bytes = dir_bytes(args.src)
        shards = sorted((out / SHARDS_DIR).glob("*.duckdb"))
        shard_bytes = sum(p.stat().st_size for p in shards)
        cluster = out / CLUSTER_DB
        con = duckdb.connect(str(cluster), read_only=True)
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
        rows = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        con.close()
        first = min((s["rank"] for s in summary.get("shards", []) if s.get("status") == "ready"), default=0)
        report = {
            "ranks": len(shards), "input_mb": round(input_bytes / 1e6, 1), "ingest_s": round(wall, 2),
            "s_per_gb": round(wall / (input_bytes / 1e9), 1),
            "shards_mb": round(shard_bytes / 1e6, 1), "shard_share_of_input": round(shard_bytes / input_bytes, 3),
            "shard_mb_per_rank": round(shard_bytes / 1e6 / max(1, len(shards)), 3),
            "cluster_db_mb": round(cluster.stat().st_size / 1e6, 2), "cluster_rows": rows,
            "open": {"cluster_only": open_cost(out, []), "one_rank": open_cost(out, [first]),
                     "every_rank": open_cost(out, None)},
            "cpus": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
