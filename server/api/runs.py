"""``/api/runs``: the runs in the store, and one run's status, ranks, time range and warnings."""

from __future__ import annotations

import json

import duckdb
from fastapi import APIRouter, Request

from server.api import ApiError, FastJSONResponse, RunDep, SettingsDep, StoreDep, fast_json, get_databases, ns_str
from server.db import query
from server.runs import Run

router = APIRouter(prefix="/api/runs", tags=["runs"])

MAX_RUNS = 1000
MAX_WARNINGS = 200

RANK_COLUMNS = ("rank", "device_id", "folder", "rank_source", "profiler_level", "torch_npu_version",
                "cann_version", "has_trace", "overlap_source", "start_ns", "end_ns")
RANKS_SQL = """
SELECT rank, device_id, folder, rank_source, profiler_level, torch_npu_version, cann_version, has_trace,
       overlap_source, start_ns, end_ns
FROM ranks ORDER BY rank
"""
WARNINGS_SQL = "SELECT rank, file, message FROM warnings ORDER BY rank NULLS FIRST, file LIMIT ?"
WARNING_COUNT_SQL = "SELECT count(*) FROM warnings"
META_SQL = "SELECT key, value FROM meta"
TRACK_KINDS_SQL = "SELECT kind, count(*), sum(slice_count) FROM tracks GROUP BY kind ORDER BY kind"


def run_summary(run: Run) -> FastJSONResponse:
    data = run.to_json()
    data.pop("summary", None)
    data.pop("source_fingerprint", None)
    return data


@router.get("")
@fast_json
def list_runs(store: StoreDep) -> FastJSONResponse:
    """Every run in the data dir, newest first: id, name, source, status, error, created, size."""
    runs = store.list()
    return {"runs": [run_summary(r) for r in runs[:MAX_RUNS]], "count": len(runs), "truncated": len(runs) > MAX_RUNS}


@router.get("/{run_id}")
@fast_json
def get_run(run: RunDep, store: StoreDep, settings: SettingsDep, request: Request) -> FastJSONResponse:
    """One run: its record and, once ready, its ranks, time range (absolute epoch ns as strings) and warnings.

    ``origin_ns`` is the zero of every relative time in the timeline responses.
    """
    data = run_summary(run)
    if run.status == "ready":
        data |= _ready_details(run, store.db_path(run.id), get_databases(request), settings.query_timeout_s)
    return data


def _ready_details(run: Run, path, databases, timeout_s: float) -> dict:
    try:
        info = databases.info(run.id, path)
        cur = databases.cursor(run.id, path)
    except (OSError, duckdb.Error) as exc:
        raise ApiError(500, "database_unavailable", f"cannot open the database of run {run.id!r}: {exc}") from exc
    try:
        ranks = [dict(zip(RANK_COLUMNS, r)) for r in query(cur, RANKS_SQL, timeout_s=timeout_s)]
        for r in ranks:
            r["start_ns"], r["end_ns"] = ns_str(r["start_ns"]), ns_str(r["end_ns"])
        warnings = [{"rank": r, "file": f, "message": m}
                    for r, f, m in query(cur, WARNINGS_SQL, [MAX_WARNINGS], timeout_s=timeout_s)]
        warning_count = query(cur, WARNING_COUNT_SQL, timeout_s=timeout_s, fetch="one")[0]
        meta = dict(query(cur, META_SQL, timeout_s=timeout_s))
        kinds = {k: {"tracks": n, "slices": int(s or 0)}
                 for k, n, s in query(cur, TRACK_KINDS_SQL, timeout_s=timeout_s)}
    finally:
        cur.close()
    return {
        "origin_ns": ns_str(info.origin_ns),
        "start_ns": ns_str(info.start_ns),
        "end_ns": ns_str(info.end_ns),
        "duration_ns": info.end_ns - info.start_ns,
        "ranks": ranks,
        "track_kinds": kinds,
        "meta": meta,
        "warnings": {"count": warning_count, "items": warnings, "truncated": warning_count > len(warnings)},
        "ingest_summary": _small(run.summary),
    }


def _small(summary: dict | None) -> dict | None:
    if not summary:
        return None
    keep = {k: summary[k] for k in ("seconds", "bytes_read", "ranks", "slices_per_kind", "flows_per_category",
                                    "tables") if k in summary}
    return json.loads(json.dumps(keep, default=str))
