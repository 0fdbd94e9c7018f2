"""Communication view: ops (``comm_ops``), bandwidth per transport (``comm_bandwidth``, ``comm_size_distribution``),
the rank × rank matrix (``comm_matrix``), per-rank totals, slow ranks and slow links.

Filters shared by every function: ``step`` (the source key, e.g. ``step50``), ``group`` (HCCL group id) and
``op`` (one op name). Totals are summed from the per-op rows (the source ``Total Op Info`` rows are exactly those
sums), with the ratios recomputed as the profiler does: Wait/(Wait+Transit) and Sync/(Sync+Transit).
Bandwidth of a sum is size/time: MB/ms, numerically GB/s.

Slow rank (as MindStudio Insight lists it): in a collective the rank that arrives last makes the others wait, so
it shows the *least* communication time; ranks more than ``SLOW_RANK_GAP_RATIO`` below the longest are listed.
The rank that waits the most (largest Wait + Synchronization) is reported too. Slow link: per transport, the
link with the lowest bandwidth in the matrix.
"""

from __future__ import annotations

from ascendscope.server.queries import (
    MAX_CSV_ROWS,
    Page,
    QueryError,
    Where,
    csv_text,
    links,
    ns_str,
    order_by,
    paged,
    ratio,
)

SLOW_RANK_GAP_RATIO = 0.10
SLOW_LINK_MIN_MB = 1.0  # links that moved less than this are left out of the slow-link search when others exist
TRANSPORTS = ("HCCS", "PCIE", "RDMA", "SDMA", "SIO")
MATRIX_METRICS = ("bandwidth_gbps", "transit_size_mb", "transit_time_ns", "transport_type")
MAX_GANTT_OPS = 5_000
MAX_OPTIONS = 2_000
MAX_MATRIX_CELLS = 100_000
MAX_SIZE_BUCKETS = 5_000

OP_COLUMNS = ("rank", "step", "step_id", "comm_type", "op_name", "group_id", "start_ns", "elapse_time_ns",
              "transit_time_ns", "wait_time_ns", "synchronization_time_ns", "idle_time_ns", "wait_time_ratio",
              "synchronization_time_ratio")
OP_SORTS = {"start": "start_ns", "elapse": "elapse_time_ns", "transit": "transit_time_ns", "wait": "wait_time_ns",
            "synchronization": "synchronization_time_ns", "idle": "idle_time_ns", "wait_ratio": "wait_time_ratio",
            "synchronization_ratio": "synchronization_time_ratio", "name": "op_name", "rank": "rank"}

STEPS_SQL = """
SELECT step, any_value(step_id) AS step_id, count(*) FILTER (WHERE NOT is_total) AS ops,
       list(DISTINCT rank ORDER BY rank) AS ranks
FROM comm_ops GROUP BY step ORDER BY step_id NULLS FIRST, step
"""
GROUPS_SQL = """
SELECT group_id, list(DISTINCT comm_type ORDER BY comm_type) AS comm_types, list(DISTINCT rank ORDER BY rank) AS ranks,
       count(*) AS ops, sum(elapse_time_ns) AS elapse_ns, list(DISTINCT step ORDER BY step) AS steps
FROM comm_ops WHERE NOT is_total AND group_id IS NOT NULL GROUP BY group_id ORDER BY elapse_ns DESC
"""
OP_NAMES_SQL = """
SELECT op_name, count(*) AS n, list(DISTINCT rank ORDER BY rank) AS ranks, min(start_ns) AS first_ns
FROM comm_ops WHERE {where} AND NOT is_total GROUP BY op_name ORDER BY first_ns NULLS LAST, op_name LIMIT ?
"""
RANK_TOTALS_SQL = """
SELECT rank, count(*) AS ops, sum(elapse_time_ns) AS elapse_time_ns, sum(transit_time_ns) AS transit_time_ns,
       sum(wait_time_ns) AS wait_time_ns, sum(synchronization_time_ns) AS synchronization_time_ns,
       sum(idle_time_ns) AS idle_time_ns
FROM comm_ops WHERE {where} AND NOT is_total GROUP BY rank ORDER BY rank
"""
RANK_BANDWIDTH_SQL = """
SELECT rank, transport, sum(transit_size_mb) AS size_mb, sum(transit_time_ns) AS time_ns
FROM comm_bandwidth WHERE {where} AND NOT is_total GROUP BY ALL
"""
BANDWIDTH_SQL = """
SELECT transport, count(*) AS ops, sum(transit_size_mb) AS transit_size_mb, sum(transit_time_ns) AS transit_time_ns,
       CASE WHEN count(*) = 1 THEN any_value(bandwidth_gbps)
            WHEN sum(transit_time_ns) > 0 THEN sum(transit_size_mb) / (sum(transit_time_ns) / 1e6) END
         AS bandwidth_gbps,
       CASE WHEN count(*) = 1 THEN any_value(large_packet_ratio) END AS large_packet_ratio
FROM comm_bandwidth WHERE {where} AND NOT is_total GROUP BY transport ORDER BY transport
"""
# the transports communication.json always lists (FORMATS.md §5.1), zero when an op did not use them
STANDARD_TRANSPORTS = ("HCCS", "PCIE", "RDMA", "SDMA", "SIO")
SIZE_DISTRIBUTION_SQL = """
SELECT transport, package_size_mb, sum(count) AS count, sum(total_duration_ns) AS total_duration_ns
FROM comm_size_distribution WHERE {where} AND NOT is_total GROUP BY ALL ORDER BY transport, package_size_mb LIMIT ?
"""
MATRIX_OPTIONS_SQL = """
SELECT step, comm_type, op_type, slot, group_id, count(*) AS links
FROM comm_matrix GROUP BY ALL ORDER BY step, comm_type, group_id NULLS FIRST, op_type, slot NULLS FIRST LIMIT ?
"""
# One row per link: several rank files may carry the same link; the file of the source rank wins.
MATRIX_SQL = """
WITH m AS (
  SELECT *, row_number() OVER (PARTITION BY comm_type, matrix_key, step, src_rank, dst_rank
                               ORDER BY (rank = src_rank) DESC, rank) AS pick
  FROM comm_matrix WHERE {where}
)
SELECT src_rank, dst_rank, count(*) AS entries,
       CASE WHEN count(DISTINCT transport_type) = 1 THEN any_value(transport_type) ELSE 'MIXED' END AS transport_type,
       sum(transit_size_mb) AS transit_size_mb, sum(transit_time_ns) AS transit_time_ns,
       CASE WHEN count(*) = 1 THEN any_value(bandwidth_gbps)
            WHEN sum(transit_time_ns) > 0 THEN sum(transit_size_mb) / (sum(transit_time_ns) / 1e6) END
         AS bandwidth_gbps,
       CASE WHEN count(*) = 1 THEN any_value(op_name) END AS op_name
FROM m WHERE pick = 1 GROUP BY src_rank, dst_rank ORDER BY src_rank, dst_rank LIMIT ?
"""
# Slow links: the per-op-type totals (new format) or the per-op rows (old format), summed per link.
LINKS_SQL = """
WITH m AS (
  SELECT *, row_number() OVER (PARTITION BY comm_type, matrix_key, step, src_rank, dst_rank
                               ORDER BY (rank = src_rank) DESC, rank) AS pick
  FROM comm_matrix
  WHERE {where} AND src_rank <> dst_rank AND transport_type <> 'LOCAL'
    AND (slot = 'total' OR (slot IS NULL AND op_type <> 'Total Op Info'))
)
SELECT transport_type, src_rank, dst_rank, sum(transit_size_mb) AS transit_size_mb,
       sum(transit_time_ns) AS transit_time_ns,
       sum(transit_size_mb) / (sum(transit_time_ns) / 1e6) AS bandwidth_gbps
FROM m WHERE pick = 1 GROUP BY ALL HAVING sum(transit_time_ns) > 0 AND sum(transit_size_mb) > 0
"""
GANTT_SQL = """
SELECT rank, op_name, group_id, comm_type, start_ns, elapse_time_ns
FROM comm_ops WHERE {where} AND NOT is_total AND start_ns IS NOT NULL ORDER BY start_ns LIMIT ?
"""


def _where(step: str | None = None, group: str | None = None, op: str | None = None,
           rank: int | None = None, comm_type: str | None = None) -> Where:
    w = Where()
    if step:
        w.add("step = ?", step)
    if group:
        w.add("group_id = ?", group)
    if op:
        w.add("op_name = ?", op)
    if rank is not None:
        w.add("rank = ?", rank)
    if comm_type:
        if comm_type not in ("collective", "p2p"):
            raise QueryError("bad_comm_type", "comm_type must be 'collective' or 'p2p'")
        w.add("comm_type = ?", comm_type)
    return w


def _i(v) -> int | None:
    return None if v is None else int(v)


def overview(db, step: str | None = None, group: str | None = None) -> dict:
    """Steps, groups and op names to filter on, the matrix keys, and which ranks have a trace."""
    steps = db.dicts(STEPS_SQL)
    groups = db.dicts(GROUPS_SQL)
    for g in groups:
        g["elapse_ns"] = _i(g["elapse_ns"])
    w = _where(step, group)
    ops = db.dicts(OP_NAMES_SQL.format(where=w.sql()), w.params + [MAX_OPTIONS + 1])
    for o in ops:
        o["first_ns"] = ns_str(o["first_ns"])
    matrix = db.dicts(MATRIX_OPTIONS_SQL, [MAX_OPTIONS + 1])
    ranks = sorted({r for s in steps for r in s["ranks"]})
    return {"steps": steps, "groups": groups, "ops": ops[:MAX_OPTIONS], "ops_truncated": len(ops) > MAX_OPTIONS,
            "matrix_options": matrix[:MAX_OPTIONS], "matrix_options_truncated": len(matrix) > MAX_OPTIONS,
            "ranks": ranks, "trace_ranks": sorted(links.trace_ranks(db))}


def rank_totals(db, step: str | None = None, group: str | None = None, op: str | None = None) -> dict:
    """Per rank: Elapse, Transit, Wait, Synchronization, Idle, the two ratios and bandwidth per transport;
    then the possible slow ranks and the rank that waits the most."""
    w = _where(step, group, op)
    rows = db.dicts(RANK_TOTALS_SQL.format(where=w.sql()), w.params)
    bw: dict[int, dict] = {}
    for rank, transport, size, time_ns in db.rows(RANK_BANDWIDTH_SQL.format(where=w.sql()), w.params):
        bw.setdefault(int(rank), {})[transport] = {
            "transit_size_mb": size, "transit_time_ns": _i(time_ns),
            "bandwidth_gbps": (size / (time_ns / 1e6)) if time_ns else None}
    for r in rows:
        # a rank whose ops came from the trace (no communication.json) has elapse only: the rest stays None
        elapse_only = r["transit_time_ns"] is None and r["wait_time_ns"] is None
        for k in ("elapse_time_ns", "transit_time_ns", "wait_time_ns", "synchronization_time_ns", "idle_time_ns"):
            r[k] = None if elapse_only and k != "elapse_time_ns" else _i(r[k]) or 0
        r["elapse_only"] = elapse_only
        r["wait_time_ratio"] = None if elapse_only else ratio(r["wait_time_ns"],
                                                              r["wait_time_ns"] + r["transit_time_ns"])
        r["synchronization_time_ratio"] = None if elapse_only else ratio(
            r["synchronization_time_ns"], r["synchronization_time_ns"] + r["transit_time_ns"])
        r["bandwidth"] = bw.get(r["rank"], {})
    slow, most_waiting = [], None
    if len(rows) > 1:
        longest = max(rows, key=lambda r: r["elapse_time_ns"])
        for r in sorted(rows, key=lambda r: r["elapse_time_ns"]):
            gap = longest["elapse_time_ns"] - r["elapse_time_ns"]
            if gap > SLOW_RANK_GAP_RATIO * longest["elapse_time_ns"]:
                slow.append({"rank": r["rank"], "elapse_time_ns": r["elapse_time_ns"], "gap_ns": gap,
                             "longest_rank": longest["rank"], "longest_elapse_time_ns": longest["elapse_time_ns"]})
        waits = [r for r in rows if not r["elapse_only"]]
        if len(waits) > 1:
            mw = max(waits, key=lambda r: r["wait_time_ns"] + r["synchronization_time_ns"])
            most_waiting = {"rank": mw["rank"], "wait_time_ns": mw["wait_time_ns"],
                            "synchronization_time_ns": mw["synchronization_time_ns"]}
    return {"step": step, "group": group, "op": op, "rows": rows, "slow_ranks": slow, "most_waiting": most_waiting,
            "advice": _advice(rows, slow, most_waiting)}


def _advice(rows: list[dict], slow: list[dict], most_waiting: dict | None) -> list[str]:
    out = []
    if slow:
        ranks = ", ".join(str(s["rank"]) for s in slow)
        out.append(f"Possible slow rank(s): {ranks}. Their communication takes more than "
                   f"{SLOW_RANK_GAP_RATIO:.0%} less time than the longest (rank {slow[0]['longest_rank']}), "
                   "so the other ranks wait for them: look at their computation and host dispatch.")
    if most_waiting and (most_waiting["wait_time_ns"] + most_waiting["synchronization_time_ns"]) > 0:
        out.append(f"Rank {most_waiting['rank']} waits the most: Wait {most_waiting['wait_time_ns'] / 1e6:.3f} ms, "
                   f"Synchronization {most_waiting['synchronization_time_ns'] / 1e6:.3f} ms.")
    high = [r for r in rows if (r["synchronization_time_ratio"] or 0) > 0.2]
    if high:
        out.append("Synchronization ratio above 20% on rank(s) " + ", ".join(str(r["rank"]) for r in high)
                   + ": ranks reach the collectives at different times.")
    return out


def ops(db, run_id: str, rank: int | None = None, step: str | None = None, group: str | None = None,
        comm_type: str | None = None, q: str | None = None, sort: str | None = None, order: str | None = None,
        page: Page | None = None, csv: bool = False):
    """One page of communication ops with their times and ratios, each linked to its timeline slice."""
    page = page or Page()
    w = _where(step, group, None, rank, comm_type).add("NOT is_total")
    if q:
        w.add("strpos(lower(coalesce(op_name, '')), lower(?)) > 0", q)
    sql = (f"SELECT {', '.join(OP_COLUMNS)} FROM comm_ops WHERE {w.sql()} "
           f"ORDER BY {order_by(sort, order, OP_SORTS, 'start')}, rank, op_key LIMIT ? OFFSET ?")
    if csv:
        return csv_text(OP_COLUMNS, db.rows(sql, w.params + [MAX_CSV_ROWS + 1, 0]))
    n = int(db.rows(f"SELECT count(*) FROM comm_ops WHERE {w.sql()}", w.params)[0][0])
    rows = db.dicts(sql, w.params + [page.limit, page.offset])
    traced = links.trace_ranks(db)
    by_rank: dict[int, list] = {}
    for r in rows:
        by_rank.setdefault(r["rank"], []).append(r)
    for rk, rs in by_rank.items():
        matches = links.match_slices(db, rk, [(r["start_ns"], r["op_name"]) for r in rs],
                                     links.COMM_OP_TOLERANCE_NS, prefer=("communication", "hardware")) \
            if rk in traced else {}
        for r in rs:
            sid = matches.get((int(r["start_ns"]), r["op_name"])) if r["start_ns"] is not None else None
            r["slice_id"] = sid
            r["has_trace"] = rk in traced
            r["timeline_url"] = links.slice_url(run_id, sid) if sid is not None else (
                links.window_url(run_id, r["start_ns"], r["start_ns"] + (r["elapse_time_ns"] or 0))
                if rk in traced and r["start_ns"] is not None else None)
    for r in rows:
        r["start_ns"] = ns_str(r["start_ns"])
    return paged(rows, page, n) | {"trace_ranks": sorted(traced)}


def bandwidth(db, rank: int | None = None, step: str | None = None, group: str | None = None,
              op: str | None = None) -> dict:
    """Per transport: size, time, bandwidth (and the large-packet ratio of a single op); the packet sizes."""
    w = _where(step, group, op, rank)
    rows = db.dicts(BANDWIDTH_SQL.format(where=w.sql()), w.params)
    for r in rows:
        r["transit_time_ns"] = _i(r["transit_time_ns"])
    if rows:  # communication.json lists every transport, 0 when unused; analysis.db only those that carried data
        have = {r["transport"] for r in rows}
        rows += [{"transport": t, "ops": rows[0]["ops"], "transit_size_mb": 0.0, "transit_time_ns": 0,
                  "bandwidth_gbps": 0.0, "large_packet_ratio": None, "unused": True}
                 for t in STANDARD_TRANSPORTS if t not in have]
        rows.sort(key=lambda r: r["transport"] or "")
    # comm_size_distribution has no op_name / group_id: it keys ops by op_key = "<name>@<group>"
    d = Where()
    if step:
        d.add("step = ?", step)
    if rank is not None:
        d.add("rank = ?", rank)
    if group:
        d.add("ends_with(op_key, ?)", "@" + group)
    if op:
        d.add("split_part(op_key, '@', 1) = ?", op)
    dist = db.dicts(SIZE_DISTRIBUTION_SQL.format(where=d.sql()), d.params + [MAX_SIZE_BUCKETS + 1])
    for r in dist:
        r["count"] = _i(r["count"])
        r["total_duration_ns"] = _i(r["total_duration_ns"])
    return {"rank": rank, "step": step, "group": group, "op": op, "transports": rows,
            "size_distribution": dist[:MAX_SIZE_BUCKETS], "size_distribution_truncated": len(dist) > MAX_SIZE_BUCKETS}


def _matrix_where(step: str | None, group: str | None, op_type: str | None, slot: str | None,
                  comm_type: str | None = None) -> Where:
    w = Where()
    if comm_type:
        w.add("comm_type = ?", comm_type)
    if step:
        w.add("step = ?", step)
    if group:
        w.add("group_id = ?", group)
    if op_type:
        w.add("op_type = ?", op_type)
    if slot:
        w.add("slot = ?", slot)
    return w


def matrix(db, step: str | None = None, group: str | None = None, op_type: str | None = None,
           slot: str | None = None, comm_type: str | None = None) -> dict:
    """The rank × rank cells for one matrix key (op type + slot, or one op in the older per-op format).

    Without a group, or with several keys selected, the links are summed (size, time) and bandwidth = size/time.
    """
    w = _matrix_where(step, group, op_type, slot, comm_type)
    cells = db.dicts(MATRIX_SQL.format(where=w.sql()), w.params + [MAX_MATRIX_CELLS + 1])
    truncated = len(cells) > MAX_MATRIX_CELLS
    cells = cells[:MAX_MATRIX_CELLS]
    for c in cells:
        c["transit_time_ns"] = _i(c["transit_time_ns"])
        c["inner"] = c["src_rank"] == c["dst_rank"]
    ranks = sorted({c["src_rank"] for c in cells} | {c["dst_rank"] for c in cells})
    return {"step": step, "group": group, "op_type": op_type, "slot": slot, "comm_type": comm_type,
            "ranks": ranks, "cells": cells, "truncated": truncated,
            "metrics": list(MATRIX_METRICS)}


def slow_links(db, step: str | None = None, group: str | None = None) -> list[dict]:
    """Per transport (LOCAL excluded), the link with the lowest bandwidth, and how it compares with the median.

    A link's bandwidth is its summed size over its summed time; links that carried under ``SLOW_LINK_MIN_MB`` are
    skipped when the transport has larger ones (a few bytes give meaningless bandwidths)."""
    w = _matrix_where(step, group, None, None)
    rows = db.dicts(LINKS_SQL.format(where=w.sql()), w.params)
    out = []
    for t in sorted({r["transport_type"] for r in rows}):
        rs = [r for r in rows if r["transport_type"] == t]
        big = [r for r in rs if r["transit_size_mb"] >= SLOW_LINK_MIN_MB]
        rs = sorted(big or rs, key=lambda r: r["bandwidth_gbps"])
        median = rs[len(rs) // 2]["bandwidth_gbps"]
        low = rs[0]
        out.append({"transport_type": t, "src_rank": low["src_rank"], "dst_rank": low["dst_rank"],
                    "bandwidth_gbps": low["bandwidth_gbps"], "transit_size_mb": low["transit_size_mb"],
                    "transit_time_ns": _i(low["transit_time_ns"]), "median_gbps": median, "links": len(rs)})
    return out


def gantt(db, origin_ns: int, step: str | None = None, group: str | None = None) -> dict:
    """Ops per rank on a common time axis (``t_ns`` relative to ``origin_ns``) for the op thumbnail."""
    w = _where(step, group)
    rows = db.rows(GANTT_SQL.format(where=w.sql()), w.params + [MAX_GANTT_OPS + 1])
    out = [{"rank": r, "op_name": n, "group_id": g, "comm_type": c, "t_ns": int(s) - origin_ns,
            "elapse_time_ns": _i(e)} for r, n, g, c, s, e in rows[:MAX_GANTT_OPS]]
    return {"origin_ns": ns_str(origin_ns), "ops": out, "truncated": len(rows) > MAX_GANTT_OPS}
