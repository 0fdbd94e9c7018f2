"""The run-level serving tables from msServiceProfiler's parsed output (``ingest.readers.serving`` reads it).

``load_serving(con, root)`` finds every serving output folder under the run's root (up to ``MAX_DEPTH`` levels,
not inside torch_npu rank folders), and writes ``serving_requests``, ``serving_batches``,
``serving_batch_requests``, ``serving_kvcache`` and the other files' tables (``serving_forward``,
``serving_request_status``, ``serving_pd_requests``, ``serving_pd_kvcache``, ``serving_coordinator``,
``serving_curves``; ``ingest.readers.serving_more``) always, empty without serving data, so queries never fail on a
missing table; and its files into ``serving_files``. It returns its warnings as ``"file: message"`` texts, as
``ingest.cluster.load_cluster_analysis`` does. A single-file run gets them in its file; a sharded run in
``cluster.duckdb`` (``ingest.shards.ClusterTables``). Columns: docs/schema.md, "Serving tables".
"""

from __future__ import annotations

import os
from pathlib import Path

from .readers import serving as reader
from .readers import serving_more

MAX_DEPTH = 5
PREFIX = "serving_"

DDL = {
    "serving_requests": "source VARCHAR, src_row INTEGER, rid VARCHAR, arrival_ns BIGINT, end_ns BIGINT, "
                        "input_tokens BIGINT, output_tokens BIGINT, queue_ns BIGINT, ttft_ns BIGINT, "
                        "prefill_ns BIGINT, decode_ns BIGINT, e2e_ns BIGINT, tpot_ns BIGINT, cache_hit_rate DOUBLE, "
                        "ttft_source VARCHAR, preempted BOOLEAN",
    "serving_batches": "source VARCHAR, src_row INTEGER, batch_id INTEGER, name VARCHAR, phase VARCHAR, "
                       "start_ns BIGINT, end_ns BIGINT, dur_ns BIGINT, batch_type VARCHAR, batch_size BIGINT, "
                       "prefill_size BIGINT, decode_size BIGINT, prefill_tokens BIGINT, decode_tokens BIGINT, "
                       "total_tokens BIGINT, prof_id VARCHAR, dp_rank VARCHAR",
    "serving_batch_requests": "source VARCHAR, batch_id INTEGER, rid VARCHAR, iter BIGINT, phase VARCHAR, "
                              "tokens BIGINT",
    "serving_kvcache": "source VARCHAR, src_row INTEGER, ts_ns BIGINT, rid VARCHAR, name VARCHAR, "
                       "free_blocks BIGINT, used_blocks BIGINT, total_blocks BIGINT, usage_rate DOUBLE",
    "serving_forward": "source VARCHAR, src_row INTEGER, name VARCHAR, start_ns BIGINT, end_ns BIGINT, "
                       "dur_ns BIGINT, bubble_ns BIGINT, batch_size BIGINT, batch_type VARCHAR, forward_iter BIGINT, "
                       "dp_rank VARCHAR, prof_id VARCHAR, hostname VARCHAR",
    "serving_request_status": "source VARCHAR, src_row INTEGER, ts_ns BIGINT, hostuid VARCHAR, pid VARCHAR, "
                              "queue VARCHAR, size BIGINT",
    "serving_pd_requests": "source VARCHAR, src_row INTEGER, rid VARCHAR, http_req_ns BIGINT, send_ns BIGINT, "
                           "send_succ_ns BIGINT, prefill_res_ns BIGINT, end_ns BIGINT",
    "serving_pd_kvcache": "source VARCHAR, src_row INTEGER, rid VARCHAR, rank VARCHAR, seq_len BIGINT, "
                          "start_ns BIGINT, end_ns BIGINT, dur_ns BIGINT",
    "serving_coordinator": "source VARCHAR, src_row INTEGER, ts_ns BIGINT, address VARCHAR, node_type VARCHAR, "
                           "add_count BIGINT, end_count BIGINT, running_count BIGINT",
    "serving_curves": "source VARCHAR, curve VARCHAR, src_row INTEGER, ts_ns BIGINT, ts_text VARCHAR, avg DOUBLE, "
                      "p50 DOUBLE, p90 DOUBLE, p99 DOUBLE",
    "serving_files": "source VARCHAR, file VARCHAR, kind VARCHAR, size_bytes BIGINT, rows BIGINT",
}
TABLES = tuple(DDL)
# the rows a run's serving tables hold (what its Serving view shows): a run of serving output alone is not empty
ROWS_SQL = "SELECT " + " + ".join(f"(SELECT count(*) FROM {t})" for t in TABLES if t != "serving_files")


def find(root: Path) -> list[Path]:
    """The serving output folders under ``root`` (itself included), in path order."""
    root = Path(root)
    if not root.is_dir():
        return []
    found, stack = [], [(root, 0)]
    while stack:
        path, depth = stack.pop()
        if path.name.endswith("_ascend_pt") or (path / "ASCEND_PROFILER_OUTPUT").is_dir():
            continue
        if reader.is_serving_dir(path):
            found.append(path)
        if depth >= MAX_DEPTH:
            continue
        try:
            children = [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        stack.extend((c, depth + 1) for c in children)
    return sorted(found)


def _rows(data: reader.Serving, table: str) -> list[list]:
    cols = [c.split()[0] for c in DDL[table].split(", ")]
    recs = {"serving_requests": data.requests, "serving_batches": data.batches,
            "serving_batch_requests": data.batch_requests, "serving_kvcache": data.kvcache}.get(table)
    if recs is None and table != "serving_files":
        recs = data.more.get(table.removeprefix(PREFIX), [])
    if recs is None:
        return [[data.source, *f] for f in data.files]
    return [[data.source if c == "source" else rec.get(c) for c in cols] for rec in recs]


def load_serving(con, root: Path) -> list[str]:
    for table, ddl in DDL.items():
        con.execute(f"CREATE OR REPLACE TABLE {table} ({ddl})")
    warnings = []
    for folder in find(root):
        rel = folder.relative_to(root).as_posix() if folder != Path(root) else "."
        data = serving_more.read(folder, rel)
        for table in TABLES:
            rows = _rows(data, table)
            if rows:
                con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        warnings.extend(f"{file}: {message}" for file, message in data.warnings)
    return warnings
