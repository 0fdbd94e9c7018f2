"""Phases: the mstx ranges of every rank as phases (``cluster_phases``, built at ingest by ``ingest/phases.py``).

Contract: every function takes a runner (``server.queries``) and reads ``cluster_phases`` and ``ranks`` only, so a
sharded run answers from its ``cluster.duckdb`` without attaching a shard. A run ingested before the table
existed answers ``available: false``.

* :func:`rows`: the phases themselves (filtered by role, rank, iteration, phase, source), each with a link to its
  rank's timeline at its range;
* :func:`summary`: per iteration its wall time and deciding chain, per iteration × role busy and idle time, per
  rank its idle gaps, the iteration × phase table, and the pipeline-parallel figures (``server/queries/
  phase_model.py`` has the definitions). The analysis uses, per rank, its device ranges when it has any (the
  stream's view of a range started with a stream), else its host ranges.
"""

from __future__ import annotations

import json

from ascendscope.server.queries import Page, Where, ns_str, paged
from ascendscope.server.queries import phase_model as model

MAX_ROWS = 20_000  # one page of phases (the view's Gantt draws at most this many)
MAX_SUMMARY_ROWS = 400_000  # beyond that the summary reads the first ones and says it was truncated
TIMELINE_PAD_NS = 0

TABLE_SQL = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'cluster_phases'"
COUNTS_SQL = """
SELECT count(*), count(DISTINCT rank), count(*) FILTER (WHERE source = 'device'),
       count(DISTINCT role), count(DISTINCT iteration), min(start_ns), max(end_ns)
FROM cluster_phases
"""
ROLES_SQL = "SELECT role, role_source, count(DISTINCT rank), count(*) FROM cluster_phases GROUP BY ALL ORDER BY 1, 2"
ROWS_SQL = """
SELECT role, rank, label, iteration, phase, message, microbatch, source, slice_id, start_ns, end_ns
FROM cluster_phases WHERE {where}
ORDER BY start_ns, rank, slice_id
LIMIT ? OFFSET ?
"""
ROWS_COUNT_SQL = "SELECT count(*) FROM cluster_phases WHERE {where}"
# per rank, its device ranges when it has any, else its host ranges
PREFERRED_SQL = """
WITH pref AS (SELECT rank, bool_or(source = 'device') AS dev FROM cluster_phases GROUP BY rank)
SELECT p.rank, p.role, p.iteration, p.phase, p.microbatch, p.slice_id, p.start_ns, p.end_ns
FROM cluster_phases p JOIN pref USING (rank)
WHERE p.source = CASE WHEN pref.dev THEN 'device' ELSE 'host' END
ORDER BY p.start_ns, p.rank, p.slice_id
LIMIT ?
"""
METADATA_SQL = "SELECT profiler_metadata FROM ranks WHERE profiler_metadata IS NOT NULL ORDER BY rank LIMIT 1"
# each rank's preferred ranges (what the summary counts): its device ranges when it has any, else its host ranges
PREFERRED_CLAUSE = ("source = CASE WHEN rank IN (SELECT rank FROM cluster_phases WHERE source = 'device') "
                    "THEN 'device' ELSE 'host' END")
LABELS_SQL = "SELECT DISTINCT rank, label FROM cluster_phases WHERE label IS NOT NULL ORDER BY rank"
ROW_COLUMNS = ["role", "rank", "label", "iteration", "phase", "message", "microbatch", "source", "slice_id", "start_ns",
               "end_ns", "dur_ns", "timeline"]
FILTERS = {"role": "role = ?", "rank": "rank = ?", "iteration": "iteration = ?", "phase": "phase = ?",
           "source": "source = ?"}
HOW_TO = ("No mstx ranges in this run. Mark the phases in the training script and profile with msprof_tx on: "
          "id = torch_npu.npu.mstx.range_start(\"forward_step\", torch_npu.npu.current_stream()) before the "
          "phase and torch_npu.npu.mstx.range_end(id) after it, with experimental_config="
          "torch_npu.profiler._ExperimentalConfig(msprof_tx=True). Pass no stream to record the host range only.")


def available(db) -> bool:
    return bool(db.rows(TABLE_SQL)[0][0])


def timeline_link(run_id: str, rank: int, slice_id: int | None, start_ns: int, end_ns: int) -> str:
    """The rank's timeline at the range (the slice selected). Every parameter is an integer, so nothing needs
    escaping (formatted directly: urlencode per row cost most of a 20,000-row page)."""
    link = (f"/runs/{run_id}/timeline?ranks={int(rank)}&start_ns={int(start_ns) - TIMELINE_PAD_NS}"
            f"&end_ns={int(end_ns) + TIMELINE_PAD_NS}")
    return link if slice_id is None else f"{link}&slice={int(slice_id)}"


def rows(db, run_id: str, filters: dict, page: Page) -> dict:
    """The phases matching ``filters`` (keys of :data:`FILTERS`, and ``preferred``: each rank's device ranges
    when it has any, else its host ranges), by start time, one page."""
    if not available(db):
        return {"available": False, "rows": [], "total": 0, "offset": page.offset, "limit": page.limit,
                "truncated": False}
    where = Where()
    for key, clause in FILTERS.items():
        if filters.get(key) is not None:
            where.add(clause, filters[key])
    if filters.get("preferred"):
        where.add(PREFERRED_CLAUSE)
    total = db.rows(ROWS_COUNT_SQL.format(where=where.sql()), where.params)[0][0]
    got = db.rows(ROWS_SQL.format(where=where.sql()), [*where.params, page.limit, page.offset])
    out = [{"role": role, "rank": rank, "label": label, "iteration": it, "phase": phase, "message": message,
            "microbatch": mb, "source": source, "slice_id": sid, "start_ns": ns_str(s), "end_ns": ns_str(e),
            "dur_ns": int(e - s), "timeline": timeline_link(run_id, rank, sid, s, e)}
           for role, rank, label, it, phase, message, mb, source, sid, s, e in got]
    return {"available": True, **paged(out, page, total)}


def _pp_info(db) -> tuple[str | None, int | None]:
    """``pp_info`` of profiler_metadata.json (``prof.add_metadata('pp_info', …)``): the schedule and microbatches."""
    got = db.rows(METADATA_SQL)
    if not got:
        return None, None
    try:
        meta = json.loads(got[0][0]) if isinstance(got[0][0], str) else got[0][0]
        info = meta.get("pp_info") if isinstance(meta, dict) else None
        if isinstance(info, str):
            info = json.loads(info)
    except (ValueError, TypeError):
        return None, None
    if not isinstance(info, dict):
        return None, None
    mb = info.get("microbatch_num")
    kind = info.get("pp_type")
    return (kind if isinstance(kind, str) else None,
            mb if isinstance(mb, int) and not isinstance(mb, bool) and mb > 0 else None)


def summary(db) -> dict:
    """Iterations, roles, idle gaps, the iteration × phase table and the pipeline figures (module note)."""
    if not available(db):
        return {"available": False, "has_phases": False, "how_to": HOW_TO}
    count, ranks, device, _, _, lo, hi = db.rows(COUNTS_SQL)[0]
    if not count:
        return {"available": True, "has_phases": False, "how_to": HOW_TO, "phases": 0}
    got = db.rows(PREFERRED_SQL, [MAX_SUMMARY_ROWS + 1])
    truncated = len(got) > MAX_SUMMARY_ROWS
    data = [{"rank": r, "role": role, "iteration": it, "phase": ph, "microbatch": mb, "slice_id": sid,
             "start_ns": int(s), "end_ns": int(e)}
            for r, role, it, ph, mb, sid, s, e in got[:MAX_SUMMARY_ROWS]]
    pp_type, microbatches = _pp_info(db)
    known: dict = {}
    iterations = model.iterations(data, known)
    pipeline = model.pipeline(data, pp_type, microbatches, known)
    roles = [{"role": role, "role_source": src, "ranks": n, "phases": c} for role, src, n, c in db.rows(ROLES_SQL)]
    return {
        "available": True, "has_phases": True, "phases": count, "ranks": ranks, "device_phases": device,
        "start_ns": ns_str(lo), "end_ns": ns_str(hi), "truncated": truncated, "roles": roles,
        "labels": {str(rank): label for rank, label in db.rows(LABELS_SQL)},
        "mode": "pipeline" if pipeline else "roles" if any(r["role"] for r in roles) else "phases",
        "iterations": iterations, "pipeline": pipeline,
    }
