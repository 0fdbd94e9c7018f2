"""The SQL console: one read-only statement over a run's documented tables, row-, byte- and cell-capped.

The rules are ``ascendscope.readonly``'s, the ones ``Run.sql`` follows (``ascendscope.sqlrules``): exactly one
reading statement (``SELECT``, ``WITH … SELECT``, ``VALUES``, ``FROM …``, ``DESCRIBE`` / ``SHOW`` / ``SUMMARIZE``,
``EXPLAIN``) by DuckDB's own parse of it, no function that runs SQL from a string or shows the server's paths and
settings, no table function that reads files, whatever the folder. Each refusal is a ``ReadOnlyQueryError`` whose
``code`` the API answers with (400).

:func:`run` runs in a console worker process (``ascendscope.sqlproc``, ``server.consolepool``: the deadline, the
memory limit and the kill are theirs) and streams the result from DuckDB as Arrow batches, each cut where it lies
(``sql_cells``: strings to ``MAX_CELL_CHARS`` characters, lists, maps and structs to ``MAX_CELL_ITEMS`` items, at
every depth) before any value becomes a Python object; rows stop at ``max_rows`` and at ``max_bytes`` of JSON
(``MAX_JSON_BYTES``, ``MAX_CSV_BYTES`` for the CSV export). ``truncated`` / ``truncated_by`` (``rows`` or
``bytes``) say rows were left out, ``cells_cut`` how many values were shortened.
"""

from __future__ import annotations

import re
import time

import orjson

from ascendscope import readonly
from ascendscope.server.queries.sql_cells import MAX_CELL_CHARS, MAX_CELL_ITEMS, Cells, cell, cut, fitting, rows_of

__all__ = ["MAX_CELL_CHARS", "MAX_CELL_ITEMS", "cell", "examples", "run", "schema"]

MAX_SQL_CHARS = 20_000
MAX_ROWS = 5_000
MAX_JSON_BYTES = 8_000_000  # of the rows of one answer, as JSON: past it the answer stops, truncated
MAX_CSV_BYTES = 32_000_000
BATCH_ROWS = 256  # rows DuckDB hands over at a time, as Arrow
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# docs/schema.md, "Example queries": the same text (a test keeps the two equal), one click away in the console
EXAMPLES = (
    ("The ten longest kernels of rank 0",
     "SELECT name, duration_ns / 1e3 AS us FROM kernels WHERE rank = 0 ORDER BY duration_ns DESC LIMIT 10;"),
    ("The kernel each torch op launched",
     "SELECT o.name AS op, k.name AS kernel, k.dur_ns\n"
     "FROM flows f JOIN slices o ON o.slice_id = f.src_slice_id JOIN slices k ON k.slice_id = f.dst_slice_id\n"
     "WHERE f.cat = 'async_npu';"),
    ("Kernel time per type and rank",
     "SELECT rank, type, count(*) AS kernels, sum(duration_ns) / 1e6 AS ms\n"
     "FROM kernels GROUP BY rank, type ORDER BY ms DESC LIMIT 20;"),
    ("Step time per rank and step",
     "SELECT rank, step, step_ns / 1e6 AS step_ms, computing_ns / 1e6 AS computing_ms, free_ns / 1e6 AS free_ms\n"
     "FROM cluster_steps ORDER BY step, rank;"),
    ("Collectives that waited longest for their last rank",
     "SELECT group_id, op_name, seq, arg_max(rank, start_ns) AS last_rank,\n"
     "       (max(start_ns) - min(start_ns)) / 1e3 AS spread_us, count(*) AS ranks\n"
     "FROM cluster_collectives GROUP BY group_id, op_name, seq HAVING count(*) > 1\n"
     "ORDER BY spread_us DESC LIMIT 20;"),
)
# one line per documented table (docs/schema.md has the columns' meaning)
TABLE_NOTES = {
    "meta": "schema version, source, ingest time", "ranks": "one row per rank: device, folder, time range",
    "files": "every input file seen, its kind, rows and status", "warnings": "everything not loaded as it was",
    "tracks": "timeline lanes (per rank, pid, tid)", "slices": "every trace slice (X events), nested",
    "flows": "flow arrows paired to their slices", "counters": "counter samples (C events)",
    "steps": "ProfilerStep ranges, host and device", "slice_lod": "level-of-detail summary of slices",
    "lod_levels": "the level-of-detail widths", "kernels": "kernel_details.csv", "operators": "operator_details.csv",
    "op_statistic": "op_statistic.csv", "api_statistic": "api_statistic.csv", "step_trace": "step_trace_time.csv",
    "memory_record": "memory_record.csv", "operator_memory": "operator_memory.csv",
    "npu_module_mem": "npu_module_mem.csv", "l2_cache": "l2_cache.csv", "comm_ops": "communication.json, per op",
    "comm_bandwidth": "communication.json, per op and transport",
    "comm_size_distribution": "communication.json, packet sizes", "comm_matrix": "communication_matrix.json",
    "cluster_ranks": "per rank: counts (whole run)", "cluster_steps": "per rank and step: the breakdown (whole run)",
    "cluster_comm_matrix": "per rank file and link (whole run)",
    "cluster_collectives": "per collective instance and rank: arrival and window (whole run)",
    "cluster_phases": "per mstx range and rank: role, iteration, phase, message (whole run)",
    "cluster_moe_kernels": "per rank: GroupedMatmul, MoE dispatch and combine kernels, call and tokens (whole run)",
    "parallel_strategy": "the parallel sizes and the rank order (whole run)",
    "rank_grid": "per rank of the world: dp, pp, tp, cp, ep and what placed it (whole run)",
    "parallel_groups": "the HCCL groups profiler_metadata.json states, their kind and ranks (whole run)",
    "expert_hotspot": "MindIE expert hotspot dumps: tokens per layer, rank and slot",
    "expert_deployment": "MindIE expert deployment: the expert in each slot per layer and rank",
    "expert_files": "the expert dump files read",
    "cluster_analysis_files": "cluster_analysis_output files",
    "cluster_analysis_step_trace": "cluster_step_trace_time.csv",
    "cluster_analysis_comm_matrix": "cluster_communication_matrix.json",
    "cluster_analysis_comm_ops": "cluster_communication.json, per op and rank",
    "cluster_analysis_comm_bandwidth": "cluster_communication.json, per transport",
    "cluster_analysis_groups": "communication_group.json",
    "serving_requests": "msServiceProfiler request.csv: one row per request (whole run)",
    "serving_batches": "msServiceProfiler batch.csv: forming and running each batch", "serving_batch_requests":
    "the requests of each batch (batch.csv res_list)", "serving_kvcache": "msServiceProfiler kvcache.csv",
    "serving_forward": "msServiceProfiler forward.csv: each card's model forward passes",
    "serving_request_status": "msServiceProfiler request_status: queue sizes over time",
    "serving_pd_requests": "msServiceProfiler pd_split_communication.csv: PD hand-over per request",
    "serving_pd_kvcache": "msServiceProfiler pd_split_kvcache.csv: KV-cache pulls from P to D",
    "serving_coordinator": "msServiceProfiler coordinator.csv: requests routed per instance and window",
    "serving_curves": "profiler.db's own latency curves (avg, p50, p90, p99)",
    "serving_files": "the serving files read",
}
SCHEMA_SQL = """
SELECT table_name, column_name, data_type FROM information_schema.columns
WHERE table_schema = 'main' AND table_catalog = current_catalog() ORDER BY table_name, ordinal_position
"""


def run(conn, sql: str, *, max_rows: int = MAX_ROWS, max_bytes: int = MAX_JSON_BYTES, watch=None) -> dict:
    """Run one statement on a cursor of the console connection ``conn``: ``{columns, types, rows, row_count,
    truncated, truncated_by, row_cap, byte_cap, cells_cut, elapsed_ms}``. At most ``max_rows`` rows, and rows only
    while their JSON stays within ``max_bytes`` (``truncated_by``: ``"rows"`` or ``"bytes"``); each Arrow batch is
    cut (``sql_cells.cut``) and only its rows that fit the bytes left are converted, so no more than a row past the
    cap is ever held as Python objects. ``watch(interrupt)`` is handed the query's interrupt (and None when it
    ends), for its worker's deadline and its client's going away. Raises ``ReadOnlyQueryError`` for a query the
    rules refuse; DuckDB's and Arrow's own errors as they are."""
    t0 = time.perf_counter()
    readonly.check_query(conn, sql)
    cur = conn.cursor()  # one per query: check and run on it, never on the shared connection
    if watch is not None:
        watch(cur.interrupt)
    out: list[list] = []
    used, by = 0, None
    cells = Cells()
    try:
        rel = cur.sql(sql)
        names, types = list(rel.columns), [str(t) for t in rel.types]
        for batch in rel.to_arrow_reader(BATCH_ROWS):
            batch = cut(batch.slice(0, max_rows + 1 - len(out)))  # (one row past the cap says there were more)
            take = fitting(batch, max_bytes - used)
            for r in rows_of(batch.slice(0, take)):
                if len(out) == max_rows:
                    by = "rows"
                    break
                row = [cells.value(v) for v in r]
                size = len(orjson.dumps(row)) + 1
                if used + size > max_bytes:
                    by = "bytes"
                    break
                used += size
                out.append(row)
            if by is None and take < batch.num_rows:  # the rest is past the byte cap by its Arrow size alone
                by = "bytes"
            if by is not None:
                break
    finally:
        if watch is not None:
            watch(None)
        cur.close()
    return {"columns": names, "types": types, "rows": out, "row_count": len(out), "truncated": by is not None,
            "truncated_by": by, "row_cap": max_rows, "byte_cap": max_bytes, "cells_cut": cells.cut,
            "elapsed_ms": round((time.perf_counter() - t0) * 1000, 1)}


def schema(conn) -> list[dict]:
    """The tables and views the console sees, with their columns and a note for the documented ones."""
    cur = conn.cursor()
    try:
        rows = cur.execute(SCHEMA_SQL).fetchall()
    finally:
        cur.close()
    tables: dict[str, dict] = {}
    for table, column, data_type in rows:
        if not NAME_RE.match(table):
            continue
        t = tables.setdefault(table, {"name": table, "note": TABLE_NOTES.get(table), "columns": []})
        t["columns"].append({"name": column, "type": data_type})
    documented = [tables[n] for n in TABLE_NOTES if n in tables]
    return documented + [t for n, t in sorted(tables.items()) if n not in TABLE_NOTES]


def examples() -> list[dict]:
    return [{"title": t, "sql": s} for t, s in EXAMPLES]
