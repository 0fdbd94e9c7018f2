"""Cluster views: ranks × steps, slow ranks and the rank × rank communication matrix, at 1,000 ranks.

Contract: every function reads only the small cluster tables ingest writes (``cluster_ranks``, ``cluster_steps``,
``cluster_comm_matrix``, ``cluster_analysis_*``; see ``ingest/cluster.py``), never the per-rank tables, so a
sharded run answers from its ``cluster.duckdb`` alone. A table that is absent (a run ingested before these tables
existed) reads as empty. Answers are columnar (one array per column) and bounded: at most
:data:`MAX_HEATMAP_CELLS` heatmap cells, a matrix of at most :data:`MAX_DENSE_RANKS` squared cells (larger runs
are binned: each cell sums the links between two blocks of consecutive ranks), :data:`MAX_SLOW_LINKS` slow links.

Slow ranks: over the ranks' mean per step, a rank is slow in a metric (step time, computing, free) when its value
is above median + :data:`MAD_K` × 1.4826 × MAD (the robust standard deviation), and above the median by at least
:data:`MIN_EXCESS_RATIO` of it (so identical ranks are never called out). High exposed communication marks a rank
that waits for the others: it is listed as ``waiting``, not as a cause.
"""

from __future__ import annotations

import math
import statistics

from ascendscope.server.queries import QueryError, Where, ns_str

METRICS = {"step": "step_ns", "computing": "computing_ns", "exposed_comm": "exposed_comm_ns", "free": "free_ns"}
# cluster_step_trace_time.csv holds the same breakdown under the step_trace names
ANALYSIS_METRICS = {"step": "computing_ns + communication_not_overlapped_ns + free_ns",
                    "computing": "computing_ns", "exposed_comm": "communication_not_overlapped_ns",
                    "free": "free_ns"}
SOURCES = ("ranks", "cluster_analysis")
SLOW_METRICS = ("step", "computing", "free")
MAD_K = 3.0
MAD_SCALE = 1.4826
MIN_EXCESS_RATIO = 0.02
MAX_SLOW_RANKS = 100
MAX_HEATMAP_CELLS = 200_000
MAX_DENSE_RANKS = 256
MAX_SLOW_LINKS = 20
MAX_OPTIONS = 500
SLOW_LINK_MIN_MB = 1.0

# information_schema lists views too: a sharded run's cluster tables are views over its cluster.duckdb
TABLES_SQL = "SELECT DISTINCT table_name FROM information_schema.tables WHERE table_name LIKE 'cluster%'"
RANKS_SQL = """
SELECT rank, device_id, folder, has_trace, start_ns, end_ns, slice_count, kernel_count, comm_op_count, step_count,
       warning_count
FROM cluster_ranks ORDER BY rank
"""
RANK_MEANS_SQL = """
SELECT rank, count(*) AS steps, avg(step_ns) AS step_ns, avg(computing_ns) AS computing_ns,
       avg(exposed_comm_ns) AS exposed_comm_ns, avg(free_ns) AS free_ns, sum(step_ns) AS total_step_ns
FROM cluster_steps GROUP BY rank ORDER BY rank
"""
ANALYSIS_MEANS_SQL = """
SELECT rank, count(*) AS steps, avg(computing_ns + communication_not_overlapped_ns + free_ns) AS step_ns,
       avg(computing_ns) AS computing_ns, avg(communication_not_overlapped_ns) AS exposed_comm_ns,
       avg(free_ns) AS free_ns, sum(computing_ns + communication_not_overlapped_ns + free_ns) AS total_step_ns
FROM cluster_analysis_step_trace WHERE type = 'rank' AND rank IS NOT NULL GROUP BY rank ORDER BY rank
"""
STEPS_SQL = "SELECT DISTINCT step FROM cluster_steps ORDER BY step NULLS FIRST"
ANALYSIS_STEPS_SQL = """
SELECT DISTINCT step FROM cluster_analysis_step_trace WHERE type = 'rank' AND rank IS NOT NULL
ORDER BY step NULLS FIRST
"""
CELLS_SQL = "SELECT rank, step, {expr} FROM cluster_steps ORDER BY rank, step NULLS FIRST"
ANALYSIS_CELLS_SQL = """
SELECT rank, step, {expr} FROM cluster_analysis_step_trace WHERE type = 'rank' AND rank IS NOT NULL
ORDER BY rank, step NULLS FIRST
"""
ANALYSIS_FILES_SQL = "SELECT file, kind, rows, status FROM cluster_analysis_files ORDER BY file"
MATRIX_OPTIONS_SQL = """
SELECT step, comm_type, group_id, list(DISTINCT op_type ORDER BY op_type) AS op_types, count(*) AS links
FROM cluster_comm_matrix GROUP BY ALL ORDER BY step, comm_type, group_id NULLS FIRST LIMIT ?
"""
# One row per link of an op type: several rank files may carry it; the source rank's file wins (as in the
# Communication view), then the links are summed over the chosen steps, groups and op types. Ranks are numbered
# in order and put in blocks of ``bin`` consecutive ranks (1 up to MAX_DENSE_RANKS ranks).
LINKS_CTE = """
WITH m AS (
  SELECT *, row_number() OVER (PARTITION BY step, comm_type, group_id, op_type, src_rank, dst_rank
                               ORDER BY (rank = src_rank) DESC, rank) AS pick
  FROM cluster_comm_matrix WHERE {where}
), links AS (
  SELECT src_rank, dst_rank,
         CASE WHEN count(DISTINCT transport_type) = 1 THEN any_value(transport_type) ELSE 'MIXED' END
           AS transport_type,
         sum(transit_size_mb) AS transit_size_mb, sum(transit_time_ns) AS transit_time_ns,
         CASE WHEN count(*) = 1 THEN any_value(bandwidth_gbps)
              WHEN sum(transit_time_ns) > 0 THEN sum(transit_size_mb) / (sum(transit_time_ns) / 1e6) END
           AS bandwidth_gbps
  FROM m WHERE pick = 1 GROUP BY src_rank, dst_rank
), r AS (
  SELECT rank FROM {ranks_table} UNION SELECT src_rank FROM links UNION SELECT dst_rank FROM links
), p AS (
  SELECT rank, (row_number() OVER (ORDER BY rank) - 1) // ? AS b FROM r
)"""
RANK_COUNT_SQL = LINKS_CTE + "\nSELECT count(*) FROM r"
RANK_LIST_SQL = LINKS_CTE + "\nSELECT rank FROM r ORDER BY rank"
# a cell of one link keeps the source's bandwidth; a sum is size / time; min: the slowest link inside
CELLS_MATRIX_SQL = LINKS_CTE + """
SELECT ps.b AS i, pd.b AS j, count(*) AS links, sum(transit_size_mb) AS transit_size_mb,
       sum(transit_time_ns)::BIGINT AS transit_time_ns, min(bandwidth_gbps) AS min_bandwidth_gbps,
       CASE WHEN count(*) = 1 THEN any_value(bandwidth_gbps)
            WHEN sum(transit_time_ns) > 0 THEN sum(transit_size_mb) / (sum(transit_time_ns) / 1e6) END
         AS bandwidth_gbps
FROM links JOIN p ps ON ps.rank = links.src_rank JOIN p pd ON pd.rank = links.dst_rank
GROUP BY ps.b, pd.b ORDER BY ps.b, pd.b
"""
TRANSPORTS_SQL = LINKS_CTE + "\nSELECT transport_type, count(*) FROM links GROUP BY ALL ORDER BY 1"
# the slowest links; those that moved under SLOW_LINK_MIN_MB only when no larger one did (tiny sizes give
# meaningless bandwidths); each with the median of its transport
SLOW_LINKS_SQL = LINKS_CTE + """,
cand AS (
  SELECT * FROM links WHERE bandwidth_gbps IS NOT NULL AND transport_type <> 'LOCAL'
), kept AS (
  SELECT * FROM cand
  WHERE transit_size_mb >= ? OR NOT EXISTS (SELECT 1 FROM cand WHERE transit_size_mb >= ?)
)
SELECT src_rank, dst_rank, transport_type, transit_size_mb, transit_time_ns::BIGINT AS transit_time_ns,
       bandwidth_gbps, median(bandwidth_gbps) OVER (PARTITION BY transport_type) AS median_gbps
FROM kept ORDER BY bandwidth_gbps, src_rank, dst_rank LIMIT ?
"""


def tables(db) -> set[str]:
    return {r[0] for r in db.rows(TABLES_SQL)}


def _i(v) -> int | None:
    return None if v is None else int(round(v))


def _columns(rows: list[dict], keys: tuple[str, ...]) -> dict[str, list]:
    return {k: [r[k] for r in rows] for k in keys}


def _median_mad(values: list[float]) -> tuple[float, float]:
    med = statistics.median(values)
    return med, statistics.median(abs(v - med) for v in values)


def slow_ranks(means: list[dict]) -> tuple[list[dict], list[dict], dict]:
    """``(slow, waiting, medians)`` over the per-rank means: ``slow`` ranks with the metrics that make them slow
    (worst excess first), ``waiting`` ranks whose exposed communication is an outlier."""
    if len(means) < 3:  # a median of two says nothing about which one is off
        return [], [], {}
    medians, flagged = {}, {}
    for metric in (*SLOW_METRICS, "exposed_comm"):
        col = METRICS[metric]
        values = [float(r[col] or 0) for r in means]
        med, mad = _median_mad(values)
        medians[metric] = _i(med)
        threshold = med + max(MAD_K * MAD_SCALE * mad, MIN_EXCESS_RATIO * abs(med))
        for r, v in zip(means, values):
            if v > threshold and v > 0:
                flagged.setdefault(r["rank"], []).append(
                    {"metric": metric, "value_ns": _i(v), "median_ns": _i(med), "excess_ns": _i(v - med)})
    slow, waiting = [], []
    for rank, found in flagged.items():
        causes = sorted((f for f in found if f["metric"] in SLOW_METRICS), key=lambda f: -f["excess_ns"])
        # step time is the symptom; the cause is the part that grew the most (if any did)
        parts = [f for f in causes if f["metric"] != "step"]
        if causes:
            slow.append({"rank": rank, "reason": (parts or causes)[0]["metric"], "metrics": causes,
                         "excess_ns": causes[0]["excess_ns"]})
        exposed = [f for f in found if f["metric"] == "exposed_comm"]
        if exposed:
            waiting.append({"rank": rank, **exposed[0]})
    slow.sort(key=lambda s: -s["excess_ns"])
    waiting.sort(key=lambda s: -s["excess_ns"])
    return slow, waiting, medians


def _means(db, source: str, have: set[str]) -> list[dict]:
    if source == "cluster_analysis":
        return db.dicts(ANALYSIS_MEANS_SQL) if "cluster_analysis_step_trace" in have else []
    return db.dicts(RANK_MEANS_SQL) if "cluster_steps" in have else []


def _source(source: str | None) -> str:
    source = source or "ranks"
    if source not in SOURCES:
        raise QueryError("bad_source", f"source must be one of: {', '.join(SOURCES)}")
    return source


def overview(db, source: str | None = None) -> dict:
    """The ranks (columnar), the steps, per-rank means per step, the slow and the waiting ranks, and what
    ``cluster_analysis_output`` held."""
    source = _source(source)
    have = tables(db)
    ranks = db.dicts(RANKS_SQL) if "cluster_ranks" in have else []
    for r in ranks:
        r["start_ns"], r["end_ns"] = ns_str(r["start_ns"]), ns_str(r["end_ns"])
    means = _means(db, source, have)
    for r in means:
        for k in ("step_ns", "computing_ns", "exposed_comm_ns", "free_ns", "total_step_ns"):
            r[k] = _i(r[k])
    slow, waiting, medians = slow_ranks(means)
    steps_sql = ANALYSIS_STEPS_SQL if source == "cluster_analysis" else STEPS_SQL
    steps = [r[0] for r in db.rows(steps_sql)] if (
        "cluster_analysis_step_trace" if source == "cluster_analysis" else "cluster_steps") in have else []
    files = db.dicts(ANALYSIS_FILES_SQL) if "cluster_analysis_files" in have else []
    analysis_ranks = len(_means(db, "cluster_analysis", have)) if files else 0
    return {
        "source": source,
        "rank_count": len(ranks),
        "ranks": _columns(ranks, ("rank", "device_id", "folder", "has_trace", "start_ns", "end_ns", "slice_count",
                                  "kernel_count", "comm_op_count", "step_count", "warning_count")),
        "steps": steps,
        "per_rank": _columns(means, ("rank", "steps", "step_ns", "computing_ns", "exposed_comm_ns", "free_ns",
                                     "total_step_ns")),
        "medians": medians,
        "slow_ranks": slow[:MAX_SLOW_RANKS], "slow_ranks_total": len(slow),
        "waiting_ranks": waiting[:MAX_SLOW_RANKS], "waiting_ranks_total": len(waiting),
        "cluster_analysis": {"found": bool(files), "files": files, "ranks": analysis_ranks},
        "metrics": list(METRICS),
    }


def heatmap(db, metric: str = "step", source: str | None = None) -> dict:
    """Ranks × steps of one metric: ``z[i][j]`` is rank ``ranks[i]`` at step ``steps[j]`` in ns (null where the
    rank has no such step); per-rank mean and total, per-step median."""
    if metric not in METRICS:
        raise QueryError("bad_metric", f"metric must be one of: {', '.join(METRICS)}")
    source = _source(source)
    have = tables(db)
    table = "cluster_analysis_step_trace" if source == "cluster_analysis" else "cluster_steps"
    rows = []
    if table in have:
        sql = (ANALYSIS_CELLS_SQL if source == "cluster_analysis" else CELLS_SQL).format(
            expr=ANALYSIS_METRICS[metric] if source == "cluster_analysis" else METRICS[metric])
        rows = db.rows(sql)
    ranks = sorted({r for r, _, _ in rows})
    steps = sorted({s for _, s, _ in rows}, key=lambda s: (s is not None, s or 0))
    truncated = len(ranks) * len(steps) > MAX_HEATMAP_CELLS
    if truncated:  # keep every rank, drop the latest steps
        steps = steps[:max(1, MAX_HEATMAP_CELLS // max(1, len(ranks)))]
    ri = {r: i for i, r in enumerate(ranks)}
    si = {s: j for j, s in enumerate(steps)}
    z: list[list] = [[None] * len(steps) for _ in ranks]
    for r, s, v in rows:
        j = si.get(s)
        if j is not None and v is not None:
            z[ri[r]][j] = int(v)
    totals = [sum(v for v in row if v is not None) for row in z]
    counts = [sum(1 for v in row if v is not None) for row in z]
    medians = []
    for j in range(len(steps)):
        col = [z[i][j] for i in range(len(ranks)) if z[i][j] is not None]
        medians.append(_i(statistics.median(col)) if col else None)
    return {"metric": metric, "source": source, "ranks": ranks, "steps": steps, "z": z,
            "rank_total_ns": totals, "rank_mean_ns": [_i(t / c) if c else None for t, c in zip(totals, counts)],
            "step_median_ns": medians, "truncated": truncated}


def matrix_options(db) -> dict:
    if "cluster_comm_matrix" not in tables(db):
        return {"keys": [], "truncated": False}
    rows = db.dicts(MATRIX_OPTIONS_SQL, [MAX_OPTIONS + 1])
    return {"keys": rows[:MAX_OPTIONS], "truncated": len(rows) > MAX_OPTIONS}


CELL_COLUMNS = ("i", "j", "links", "bandwidth_gbps", "min_bandwidth_gbps", "transit_time_ns", "transit_size_mb")


def matrix(db, step: str | None = None, group: str | None = None, op_type: str | None = None) -> dict:
    """The src × dst matrix (LOCAL links on the diagonal left out) as sparse columnar cells over ``labels``:
    ``cells.i`` is the source's index in ``labels``, ``cells.j`` the destination's, with the cell's number of
    links, ``bandwidth_gbps``, ``min_bandwidth_gbps`` (its slowest link), ``transit_time_ns`` and
    ``transit_size_mb``. Over :data:`MAX_DENSE_RANKS` ranks a label is a block of ``bin_size`` consecutive ranks
    (so at most MAX_DENSE_RANKS squared cells); size and time are summed, bandwidth = size / time. ``slow_links`` lists
    the links with the lowest bandwidth."""
    have = tables(db)
    out = {"step": step, "group": group, "op_type": op_type, "ranks": [], "bin_size": 1, "labels": [],
           "cells": {c: [] for c in CELL_COLUMNS}, "links": 0, "slow_links": [], "transports": {}}
    if "cluster_comm_matrix" not in have:
        return out
    w = Where().add("src_rank <> dst_rank")
    if step:
        w.add("step = ?", step)
    if group:
        w.add("group_id = ?", group)
    if op_type:
        w.add("op_type = ?", op_type)
    ranks_table = "cluster_ranks" if "cluster_ranks" in have else "(SELECT NULL::INTEGER AS rank WHERE false)"

    def sql(template: str) -> str:
        return template.format(where=w.sql(), ranks_table=ranks_table)

    n_ranks = int(db.rows(sql(RANK_COUNT_SQL), w.params + [1])[0][0])
    if not n_ranks:
        return out
    size = max(1, math.ceil(n_ranks / MAX_DENSE_RANKS))
    ranks = [r for (r,) in db.rows(sql(RANK_LIST_SQL), w.params + [size])]
    cells = db.dicts(sql(CELLS_MATRIX_SQL), w.params + [size])
    transports = dict(db.rows(sql(TRANSPORTS_SQL), w.params + [size]))
    slow = db.dicts(sql(SLOW_LINKS_SQL), w.params + [size, SLOW_LINK_MIN_MB, SLOW_LINK_MIN_MB, MAX_SLOW_LINKS])
    n = math.ceil(len(ranks) / size)
    labels = [str(ranks[k * size]) if size == 1 else f"{ranks[k * size]}–{ranks[min(len(ranks), (k + 1) * size) - 1]}"
              for k in range(n)]
    out.update({"ranks": ranks, "bin_size": size, "labels": labels,
                "cells": {c: [r[c] for r in cells] for c in CELL_COLUMNS},
                "links": sum(transports.values()), "slow_links": slow, "transports": transports})
    return out
