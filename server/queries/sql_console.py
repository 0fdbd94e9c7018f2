"""The SQL console: one read-only statement over a run's documented tables, time-limited and row-capped.

The rules are ``ascendscope.readonly``'s, the ones ``Run.sql`` follows: :func:`run` hands the query to
``readonly.run_query`` on a cursor of the console's locked connection (``server/console.py``), which refuses
anything but exactly one reading statement (``SELECT``, ``WITH … SELECT``, ``VALUES``, ``FROM …``, ``DESCRIBE`` /
``SHOW`` / ``SUMMARIZE``, ``EXPLAIN``) by DuckDB's own parse of it (ATTACH, COPY, INSTALL, LOAD, SET, PRAGMA, CALL,
EXPORT, CREATE, UPDATE… are other statement types), and any call of a blocked function (SQL run from a string,
server paths and settings); a file name or URL in a query fails on the locked connection. Each refusal becomes a
``QueryError`` (400) with the rule's code; a query past its deadline is interrupted (``QueryTimeout``, 504).
:func:`run` answers at most ``max_rows`` rows, and only as many as fit in ``MAX_JSON_BYTES`` of JSON
(``MAX_CSV_BYTES`` for the CSV export); a list, map or struct value keeps at most ``MAX_CELL_ITEMS`` items and a
string ``MAX_CELL_CHARS`` characters (``truncated`` / ``truncated_by`` say when the answer was cut).

Values leave JSON-ready: integers beyond 2**53 (epoch ns) as decimal strings, other non-JSON types as text.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import json
import re
import time
import uuid

from ascendscope import readonly
from ascendscope.server.db import QueryTimeout
from ascendscope.server.queries import QueryError
from ascendscope.server.requestclock import ClientGone

MAX_SQL_CHARS = 20_000
MAX_ROWS = 5_000
MAX_CELL_CHARS = 2_000
MAX_CELL_ITEMS = 1_000  # of a list, map or struct value; past it a "…" item says the rest was left out
MAX_JSON_BYTES = 8_000_000  # of the rows of one answer, as JSON: past it the answer stops, truncated
MAX_CSV_BYTES = 32_000_000
EXACT_INT = 2 ** 53
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


def cell(v):
    """A value as JSON takes it (see the module note)."""
    if v is None or isinstance(v, (bool, str)):
        return v if not isinstance(v, str) or len(v) <= MAX_CELL_CHARS else v[:MAX_CELL_CHARS] + "…"
    if isinstance(v, int):
        return v if -EXACT_INT <= v <= EXACT_INT else str(v)
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [cell(x) for x in v[:MAX_CELL_ITEMS]] + (["…"] if len(v) > MAX_CELL_ITEMS else [])
    if isinstance(v, dict):
        out = {str(k): cell(x) for k, x in itertools.islice(v.items(), MAX_CELL_ITEMS)}
        if len(v) > MAX_CELL_ITEMS:
            out["…"] = f"{len(v) - MAX_CELL_ITEMS} more"
        return out
    return str(v)


def run(conn, sql: str, *, timeout_s: float, max_rows: int = MAX_ROWS, max_bytes: int = MAX_JSON_BYTES,
        deadline: float | None = None, cancel=None) -> dict:
    """Run one statement on a cursor of the console connection ``conn``: ``{columns, types, rows, row_count,
    truncated, truncated_by, row_cap, byte_cap, elapsed_ms}``. At most ``max_rows`` rows, and rows only while their
    JSON stays within ``max_bytes`` (``truncated_by``: ``"rows"`` or ``"bytes"``); rows are converted as they are
    fetched, a batch at a time, so no more than one batch past the cap is ever held. Raises ``QueryError`` for a
    query the rules refuse or DuckDB rejects, ``QueryTimeout`` (504) for one that ran out of time: ``timeout_s``, or
    the request's ``deadline`` (``time.monotonic()``, from its arrival) if sooner, which the fetch and conversion
    of rows count against too. ``cancel`` (``server.requestclock.CancelToken``): the client went away, the query is
    interrupted and ``ClientGone`` raised."""
    if deadline is not None:
        timeout_s = min(timeout_s, deadline - time.monotonic())
        if timeout_s <= 0:
            raise QueryTimeout("no time left for the query within the request's time limit (the server was busy)")
    deadline = time.monotonic() + timeout_s
    cur = conn.cursor()  # one per request: check and run on it, never on the shared connection
    t0 = time.perf_counter()
    out: list[list] = []
    state = {"bytes": 0, "by": None, "stopped": False}

    def keep(batch: list[tuple]) -> bool:
        if time.monotonic() > deadline or (cancel is not None and cancel.cancelled):
            state["stopped"] = True
            return False
        for r in batch:
            if len(out) == max_rows:
                state["by"] = "rows"
                return False
            row = [cell(v) for v in r]
            size = len(json.dumps(row, ensure_ascii=False, default=str)) + 1
            if state["bytes"] + size > max_bytes:
                state["by"] = "bytes"
                return False
            state["bytes"] += size
            out.append(row)
        return True

    try:
        names, types, _ = readonly.run_query(cur, sql, timeout_s=timeout_s, fetch="typed", max_rows=max_rows + 1,
                                             keep=keep, watch=None if cancel is None else cancel.watch)
    except readonly.QueryTimedOut:
        state["stopped"] = True
    except readonly.ReadOnlyQueryError as exc:
        if cancel is not None and cancel.cancelled:
            raise ClientGone("the client went away before the answer was ready") from None
        raise QueryError(exc.code, str(exc)) from None
    finally:
        cur.close()
    if state["stopped"]:
        if cancel is not None and cancel.cancelled:
            raise ClientGone("the client went away before the answer was ready")
        raise QueryTimeout(f"the query ran longer than {timeout_s:g} s and was stopped")
    return {"columns": names, "types": types, "rows": out, "row_count": len(out), "truncated": state["by"] is not None,
            "truncated_by": state["by"], "row_cap": max_rows, "byte_cap": max_bytes,
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
