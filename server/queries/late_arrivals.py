"""Late arrivals: who made each collective wait, what the late rank was doing, and the totals per rank.

Contract: every function takes a runner (``server.queries``) and reads ``cluster_collectives`` (one row per
collective instance per rank, built at ingest by ``ingest/collectives.py``), so a sharded run answers from its
``cluster.duckdb`` alone; only :func:`instance` with ``kernels=True`` reads the late rank's own slices (one
shard). A run ingested before the table existed answers ``available: false``.

Matching rule. An *instance* is (``group_id``, ``op_name``, ``seq``): the same op name in the same communication
group, the ``seq``-th time each rank ran it. A rank's *arrival* is the start of its op (the device starts the op
when its stream reaches it; then it waits in the op for the peers). The *last* rank is the one whose arrival is
latest (ties: the lowest rank); every other rank ``r`` waits ``last − arrival(r)`` for it, and the sum of those
waits is the wait the last rank *caused*. It is attributed only when the last rank's *lead* over the second latest
is at least :data:`MIN_LEAD_NS` (the µs precision of communication.json starts); closer arrivals are
``simultaneous`` and their waits are suffered by each rank but caused by none.

When ranks do not agree: an instance is matched among the ranks that have it; ``ranks`` < ``group_size`` (the
ranks seen in the group) marks it ``partial`` — a rank whose profile lacks the op (it ended earlier, or the
op names differ) is missing from it, and may be the one the others waited for. A group seen on one rank only
(a group of one, or peers without profiles) has no instances here.

Cause. The late rank is compared with the *reference* rank: the one whose arrival is the median (the lower one)
of the instance. Its lateness over the reference, ``arrival(late) − arrival(ref)``, splits exactly into
``late_start`` (its window started later: the previous collective of the group, or the step, began later), and the
difference of each part of the window (``computing``, ``other_comm``, ``launch_bound``, ``free``,
``preparing``; see ``ingest/collectives.py``). The cause is the part with the largest positive difference.

The kernel that made it late: the late rank's window and the reference rank's are compared kernel by kernel
(``window_kernels``: time in the window per kernel name), and the kernel with the largest excess (late − reference)
is named; when no name is in both windows (the ranks name their kernels differently), by kernel type instead. The
kernel with the most time in the late rank's window stays beside it as ``top_kernel``: a kernel every rank runs as
long is the biggest without having caused anything.
"""

from __future__ import annotations

import json

from ascendscope.ingest.collectives import IS_COMPUTE_SQL
from ascendscope.server.queries import NotFound, Page, QueryError, ns_str, paged

MIN_LEAD_NS = 2_000
MAX_CHAIN_INSTANCES = 300
MAX_CHAIN_RANKS = 256
MAX_ARRIVALS = 5_000
MAX_TOTAL_ROWS = 5_000
MAX_WINDOW_ITEMS = 20
PARTS = ("computing", "other_comm", "launch_bound", "free", "preparing")
CAUSE_WORDS = {
    "late_start": "started the window later (the previous collective of the group, or the step, began later)",
    "computing": "computed longer",
    "other_comm": "spent longer in other collectives",
    "launch_bound": "waited longer for kernel launches (host in CANN API calls)",
    "free": "sat idle longer with nothing queued (host busy elsewhere)",
    "preparing": "took longer before its first computation or collective",
}
SORTS = {"wait_caused": "wait_caused_ns", "lead": "lead_ns", "start": "first_ns", "ranks": "ranks",
         "max_wait": "max_wait_ns"}

OF_SLICE_SQL = """
SELECT rank, group_id, op_name, seq, start_ns FROM cluster_collectives WHERE slice_id = ? LIMIT 1
"""
TABLE_SQL = """
SELECT count(*) FROM information_schema.tables WHERE table_name = 'cluster_collectives'
"""
# one row per rank and instance, with the instance's facts beside it
# one row per rank and instance, with the instance's facts beside it; {keys} (a fragment of KEYS) picks the
# instances: every rank of an instance that has a row matching it
RANKED_CTE = """
WITH sizes AS (
  SELECT group_id, count(DISTINCT rank) AS group_size FROM cluster_collectives GROUP BY group_id
), keys AS (
  SELECT DISTINCT group_id, op_name, seq FROM cluster_collectives WHERE {keys}
), c AS (
  SELECT x.*, z.group_size FROM cluster_collectives x JOIN keys USING (group_id, op_name, seq)
  JOIN sizes z USING (group_id)
), r AS (
  SELECT *, count(*) OVER w AS ranks, max(start_ns) OVER w AS last_ns, min(start_ns) OVER w AS first_ns,
         min(step) OVER w AS inst_step,
         row_number() OVER (PARTITION BY group_id, op_name, seq ORDER BY start_ns DESC, rank) AS late_order,
         row_number() OVER (PARTITION BY group_id, op_name, seq ORDER BY start_ns, rank) AS arrival_order
  FROM c WINDOW w AS (PARTITION BY group_id, op_name, seq)
)"""
KEYS = {"all": "TRUE", "step": "step IS NOT DISTINCT FROM ?", "one": "group_id = ? AND op_name = ? AND seq = ?",
        "window": "start_ns < ? AND end_ns > ?"}
INSTANCES_CTE = RANKED_CTE + """, inst AS (
  SELECT group_id, op_name, seq, any_value(op_type) AS op_type, any_value(inst_step) AS step,
         any_value(ranks) AS ranks, any_value(group_size) AS group_size,
         any_value(first_ns) AS first_ns, any_value(last_ns) AS last_ns, max(end_ns) AS end_ns,
         max(rank) FILTER (WHERE late_order = 1) AS late_rank,
         coalesce(max(start_ns) FILTER (WHERE late_order = 2), any_value(first_ns)) AS second_ns,
         max(rank) FILTER (WHERE arrival_order = (ranks + 1) // 2) AS ref_rank,
         sum(last_ns - start_ns) AS wait_ns, max(last_ns - start_ns) AS max_wait_ns
  FROM r WHERE ranks > 1 GROUP BY group_id, op_name, seq
), att AS (
  SELECT *, last_ns - second_ns AS lead_ns, last_ns - second_ns >= ? AS attributed,
         CASE WHEN last_ns - second_ns >= ? THEN wait_ns ELSE 0 END AS wait_caused_ns
  FROM inst
)"""
STEPS_SQL = INSTANCES_CTE.format(keys=KEYS["all"]) + """
SELECT step, count(*) AS instances, sum(wait_ns) AS wait_ns, sum(wait_caused_ns) AS wait_caused_ns,
       count(*) FILTER (WHERE attributed) AS attributed, count(*) FILTER (WHERE ranks < group_size) AS partial
FROM att GROUP BY step ORDER BY step NULLS FIRST
"""
# an instance with its late and reference ranks' rows
DETAIL_SELECT = """
SELECT a.group_id, a.op_name, a.seq, a.op_type, a.step, a.ranks, a.group_size, a.first_ns, a.last_ns, a.end_ns,
       a.second_ns, a.lead_ns, a.attributed, a.wait_ns, a.wait_caused_ns, a.max_wait_ns, a.late_rank, a.ref_rank,
       l.slice_id AS late_slice_id, l.track_id AS late_track_id, l.source AS late_source,
       l.window_start_ns AS late_window_start_ns, f.window_start_ns AS ref_window_start_ns,
       l.computing_ns AS late_computing_ns, f.computing_ns AS ref_computing_ns,
       l.other_comm_ns AS late_other_comm_ns, f.other_comm_ns AS ref_other_comm_ns,
       l.launch_bound_ns AS late_launch_bound_ns, f.launch_bound_ns AS ref_launch_bound_ns,
       l.free_ns AS late_free_ns, f.free_ns AS ref_free_ns,
       l.preparing_ns AS late_preparing_ns, f.preparing_ns AS ref_preparing_ns,
       f.start_ns AS ref_start_ns, l.top_kernel, l.top_kernel_ns, l.window_kernels AS late_window_kernels,
       f.window_kernels AS ref_window_kernels, f.window_kernel_names AS ref_window_kernel_names
FROM att a
LEFT JOIN cluster_collectives l ON l.group_id = a.group_id AND l.op_name = a.op_name AND l.seq = a.seq
                               AND l.rank = a.late_rank
LEFT JOIN cluster_collectives f ON f.group_id = a.group_id AND f.op_name = a.op_name AND f.seq = a.seq
                               AND f.rank = a.ref_rank"""
TABLE_ROWS_SQL = INSTANCES_CTE.format(keys=KEYS["step"]) + DETAIL_SELECT + """
WHERE a.step IS NOT DISTINCT FROM ? ORDER BY {order}, a.first_ns, a.group_id, a.op_name LIMIT ? OFFSET ?"""
TABLE_COUNT_SQL = INSTANCES_CTE.format(keys=KEYS["step"]) + "SELECT count(*) FROM att WHERE step IS NOT DISTINCT FROM ?"
ONE_SQL = (INSTANCES_CTE.format(keys=KEYS["one"]) + DETAIL_SELECT
           + " WHERE a.group_id = ? AND a.op_name = ? AND a.seq = ?")
ARRIVALS_SQL = """
SELECT rank, start_ns, end_ns, slice_id, track_id, window_start_ns,
       max(start_ns) OVER () - start_ns AS wait_ns
FROM cluster_collectives WHERE group_id = ? AND op_name = ? AND seq = ?
ORDER BY start_ns DESC, rank LIMIT ?
"""
TOTALS_SQL = INSTANCES_CTE.format(keys=KEYS["all"]) + """, caused AS (
  SELECT late_rank AS rank, sum(wait_caused_ns) AS wait_caused_ns, count(*) AS times_last
  FROM att WHERE attributed GROUP BY late_rank
), suffered AS (
  SELECT rank, sum(last_ns - start_ns) AS wait_suffered_ns, count(*) AS instances
  FROM r WHERE ranks > 1 GROUP BY rank
)
SELECT s.rank, s.instances, s.wait_suffered_ns, coalesce(c.wait_caused_ns, 0) AS wait_caused_ns,
       coalesce(c.times_last, 0) AS times_last
FROM suffered s LEFT JOIN caused c USING (rank)
ORDER BY coalesce(c.wait_caused_ns, 0) DESC, s.wait_suffered_ns DESC, s.rank LIMIT ?
"""
TOTALS_STEP_SQL = INSTANCES_CTE.format(keys=KEYS["step"]) + """, caused AS (
  SELECT late_rank AS rank, sum(wait_caused_ns) AS wait_caused_ns, count(*) AS times_last
  FROM att WHERE attributed AND step IS NOT DISTINCT FROM ? GROUP BY late_rank
), suffered AS (
  SELECT rank, sum(last_ns - start_ns) AS wait_suffered_ns, count(*) AS instances
  FROM r WHERE ranks > 1 AND inst_step IS NOT DISTINCT FROM ? GROUP BY rank
)
SELECT s.rank, s.instances, s.wait_suffered_ns, coalesce(c.wait_caused_ns, 0) AS wait_caused_ns,
       coalesce(c.times_last, 0) AS times_last
FROM suffered s LEFT JOIN caused c USING (rank)
ORDER BY coalesce(c.wait_caused_ns, 0) DESC, s.wait_suffered_ns DESC, s.rank LIMIT ?
"""
# the instances whose span meets a time window, with the ranks of `ranks` that took part
CHAINS_SQL = RANKED_CTE.format(keys=KEYS["window"]) + """, inst AS (
  SELECT group_id, op_name, seq, any_value(last_ns) AS last_ns, any_value(first_ns) AS first_ns,
         max(end_ns) AS end_ns, max(rank) FILTER (WHERE late_order = 1) AS late_rank,
         coalesce(max(start_ns) FILTER (WHERE late_order = 2), any_value(first_ns)) AS second_ns,
         any_value(ranks) AS ranks
  FROM r WHERE ranks > 1 GROUP BY group_id, op_name, seq
  ORDER BY sum(last_ns - start_ns) DESC LIMIT ?
)
SELECT i.group_id, i.op_name, i.seq, i.last_ns, i.second_ns, i.late_rank, i.ranks, c.rank, c.slice_id, c.track_id,
       c.start_ns, c.end_ns
FROM inst i JOIN cluster_collectives c USING (group_id, op_name, seq)
WHERE list_contains(?::INTEGER[], c.rank) OR c.rank = i.late_rank
ORDER BY i.first_ns, i.group_id, i.op_name, i.seq, c.rank
"""
# the late rank's own slices inside its window: kernels (compute lanes) and host API calls, clipped
WINDOW_ITEMS_SQL = f"""
SELECT CASE WHEN t.kind = 'cann' THEN 'host' WHEN ({IS_COMPUTE_SQL}) THEN 'kernel' ELSE 'device' END AS kind,
       s.name, count(*) AS count,
       sum(least(s.ts_ns + s.dur_ns, ?) - greatest(s.ts_ns, ?)) AS ns, arg_max(s.slice_id, s.dur_ns) AS slice_id
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = ? AND s.ts_ns < ? AND s.ts_ns + s.dur_ns > ? AND s.dur_ns > 0
  AND ((t.kind = 'hardware' AND s.depth = 0) OR (t.kind = 'cann' AND s.depth = 0))
GROUP BY ALL ORDER BY ns DESC LIMIT ?
"""


def available(db) -> bool:
    return bool(db.rows(TABLE_SQL)[0][0])


def _unavailable() -> dict:
    return {"available": False,
            "message": "this run was ingested before the late-arrival table (cluster_collectives) existed: ingest "
                       "its source again (open or upload it anew, or ascendscope ingest) to analyse late arrivals"}


def _i(v) -> int | None:
    return None if v is None else int(v)


def _by(kernels: list, key: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in kernels:
        if k[key]:
            out[k[key]] = out.get(k[key], 0) + int(k[2])
    return out


def excess_kernel(late_json: str | None, ref_json: str | None, ref_names: int | None) -> dict | None:
    """The late rank's kernel with the largest excess over the reference rank's window (``window_kernels`` of
    each), by name, else (no name in both) by type; None when no kernel of the late rank took longer. A name the
    reference's list left out (it keeps the longest names only) counts as its shortest listed time, so the excess
    is then at least the one given (``bound``)."""
    late = json.loads(late_json) if late_json else []
    ref = json.loads(ref_json) if ref_json else []
    if not late:
        return None
    complete = ref_names is None or len(ref) >= int(ref_names)
    floor = 0 if complete or not ref else min(int(k[2]) for k in ref)
    key = 0 if not ref or {k[0] for k in late} & {k[0] for k in ref} else 1
    mine, theirs = _by(late, key), _by(ref, key)
    excess = {n: ns - theirs.get(n, floor) for n, ns in mine.items()}
    best = max(excess, key=lambda n: (excess[n], mine[n]), default=None)
    if best is None or excess[best] <= 0:
        return None
    return {"name": best, "by": "name" if key == 0 else "type", "excess_ns": excess[best], "late_ns": mine[best],
            "ref_ns": theirs.get(best), "bound": best not in theirs and not complete}


def cause(row: dict) -> dict:
    """The late rank's lateness over the reference rank, split into the late start and the parts of the window;
    the cause is the part with the largest positive difference."""
    lateness = _i(row["last_ns"]) - _i(row["ref_start_ns"]) if row.get("ref_start_ns") is not None else None
    deltas = {}
    if row.get("late_window_start_ns") is not None and row.get("ref_window_start_ns") is not None:
        deltas["late_start"] = int(row["late_window_start_ns"]) - int(row["ref_window_start_ns"])
    for p in PARTS:
        a, b = row.get(f"late_{p}_ns"), row.get(f"ref_{p}_ns")
        if a is not None and b is not None:
            deltas[p] = int(a) - int(b)
    positive = {k: v for k, v in deltas.items() if v > 0}
    top = max(positive, key=positive.get) if positive else None
    window = ({p: _i(row.get(f"late_{p}_ns")) for p in PARTS}
              if row.get("late_computing_ns") is not None else None)
    # each part's share of the lateness: the deltas add up to it exactly, so the shares add up to 1 (a part the
    # late rank spent less time in than the reference has a negative share)
    shares = {k: v / lateness for k, v in deltas.items()} if lateness else {}
    window_ns = (_i(row["last_ns"]) - _i(row["late_window_start_ns"])
                 if row.get("late_window_start_ns") is not None else None)
    k = (excess_kernel(row.get("late_window_kernels"), row.get("ref_window_kernels"),
                       row.get("ref_window_kernel_names")) if row.get("ref_start_ns") is not None else None)
    return {"part": top, "delta_ns": positive.get(top), "words": CAUSE_WORDS.get(top), "lateness_ns": lateness,
            "deltas": deltas, "shares": shares, "late_window": window, "window_ns": window_ns,
            # the kernel that made it late (largest excess over the reference), then the one with the most time
            "excess_kernel": k and k["name"], "excess_kernel_ns": k and k["excess_ns"],
            "excess_kernel_by": k and k["by"], "excess_kernel_late_ns": k and k["late_ns"],
            "excess_kernel_ref_ns": k and k["ref_ns"], "excess_kernel_bound": bool(k and k["bound"]),
            "top_kernel": row.get("top_kernel"), "top_kernel_ns": _i(row.get("top_kernel_ns"))}


def _instance_json(row: dict) -> dict:
    return {
        "group_id": row["group_id"], "op_name": row["op_name"], "seq": int(row["seq"]), "op_type": row["op_type"],
        "step": _i(row["step"]), "ranks": int(row["ranks"]), "group_size": int(row["group_size"]),
        "partial": int(row["ranks"]) < int(row["group_size"]),
        "first_ns": ns_str(row["first_ns"]), "last_ns": ns_str(row["last_ns"]), "end_ns": ns_str(row["end_ns"]),
        "lead_ns": _i(row["lead_ns"]), "attributed": bool(row["attributed"]),
        "late_rank": _i(row["late_rank"]) if row["attributed"] else None, "last_rank": _i(row["late_rank"]),
        "ref_rank": _i(row["ref_rank"]),
        "wait_ns": _i(row["wait_ns"]), "wait_caused_ns": _i(row["wait_caused_ns"]),
        "max_wait_ns": _i(row["max_wait_ns"]),
        "late_slice_id": _i(row["late_slice_id"]), "late_track_id": _i(row["late_track_id"]),
        "late_source": row["late_source"],
        "window_start_ns": ns_str(row["late_window_start_ns"]),
        "cause": cause(row),
    }


def steps(db) -> dict:
    """The steps with collectives: instances, their total wait and the part attributed to a late rank."""
    if not available(db):
        return _unavailable()
    rows = db.dicts(STEPS_SQL, [MIN_LEAD_NS, MIN_LEAD_NS])
    return {"available": True, "min_lead_ns": MIN_LEAD_NS,
            "steps": [{"step": _i(r["step"]), "instances": int(r["instances"]), "wait_ns": _i(r["wait_ns"]),
                       "wait_caused_ns": _i(r["wait_caused_ns"]), "attributed": int(r["attributed"]),
                       "partial": int(r["partial"])} for r in rows]}


def table(db, step: int | None, page: Page, sort: str | None = None, order: str | None = None) -> dict:
    """One step's instances (the longest caused wait first): the last rank, its lead, the waits and the cause."""
    if not available(db):
        return _unavailable()
    key = sort or "wait_caused"
    if key not in SORTS:
        raise QueryError("bad_sort", f"cannot sort by {key!r}; choose one of: {', '.join(sorted(SORTS))}")
    direction = {"asc": "ASC", "desc": "DESC"}.get((order or "desc").lower())
    if direction is None:
        raise QueryError("bad_order", "order must be 'asc' or 'desc'")
    params = [step, MIN_LEAD_NS, MIN_LEAD_NS, step]
    total = int(db.rows(TABLE_COUNT_SQL, params)[0][0])
    sql = TABLE_ROWS_SQL.format(order=f"a.{SORTS[key]} {direction} NULLS LAST")
    rows = db.dicts(sql, params + [page.limit, page.offset])
    out = paged([_instance_json(r) for r in rows], page, total)
    out.update({"available": True, "step": step, "sort": key, "order": direction.lower(),
                "min_lead_ns": MIN_LEAD_NS})
    return out


CSV_COLUMNS = ("step", "group_id", "op_name", "seq", "ranks", "group_size", "last_rank", "attributed", "lead_ns",
               "wait_caused_ns", "max_wait_ns", "first_ns", "last_ns", "cause", "cause_delta_ns", "excess_kernel",
               "excess_kernel_ns", "top_kernel", "top_kernel_ns")


def table_csv_rows(db, step: int | None, max_rows: int) -> list[list]:
    """The step's instances as CSV rows (:data:`CSV_COLUMNS`), the longest caused wait first."""
    out = table(db, step, Page(0, max_rows))
    if not out.get("available"):
        return []
    return [[r["step"], r["group_id"], r["op_name"], r["seq"], r["ranks"], r["group_size"], r["last_rank"],
             r["attributed"], r["lead_ns"], r["wait_caused_ns"], r["max_wait_ns"], r["first_ns"], r["last_ns"],
             r["cause"]["part"], r["cause"]["delta_ns"], r["cause"]["excess_kernel"], r["cause"]["excess_kernel_ns"],
             r["cause"]["top_kernel"], r["cause"]["top_kernel_ns"]]
            for r in out["rows"]]


def instance(db, group_id: str, op_name: str, seq: int, *, kernels: bool = False) -> dict:
    """One instance: every rank's arrival and wait (latest first, at most :data:`MAX_ARRIVALS`), the cause and,
    with ``kernels``, the late rank's kernels and host calls inside its window (read from its own slices)."""
    if not available(db):
        return _unavailable()
    rows = db.dicts(ONE_SQL, [group_id, op_name, seq, MIN_LEAD_NS, MIN_LEAD_NS, group_id, op_name, seq])
    if not rows:
        raise NotFound("instance_not_found", f"no collective {op_name!r} #{seq} in group {group_id!r} on two ranks")
    out = {"available": True, **_instance_json(rows[0])}
    arrivals = db.dicts(ARRIVALS_SQL, [group_id, op_name, seq, MAX_ARRIVALS + 1])
    out["arrivals"] = {
        "rank": [int(a["rank"]) for a in arrivals[:MAX_ARRIVALS]],
        "start_ns": [ns_str(a["start_ns"]) for a in arrivals[:MAX_ARRIVALS]],
        "end_ns": [ns_str(a["end_ns"]) for a in arrivals[:MAX_ARRIVALS]],
        "wait_ns": [_i(a["wait_ns"]) for a in arrivals[:MAX_ARRIVALS]],
        "slice_id": [_i(a["slice_id"]) for a in arrivals[:MAX_ARRIVALS]],
        "track_id": [_i(a["track_id"]) for a in arrivals[:MAX_ARRIVALS]],
    }
    out["arrivals_truncated"] = len(arrivals) > MAX_ARRIVALS
    out["window_items"] = None
    rank, start = out["last_rank"], rows[0]["late_window_start_ns"]
    if kernels and rank is not None and start is not None and rows[0]["late_source"] == "trace":
        end = int(rows[0]["last_ns"])
        items = db.dicts(WINDOW_ITEMS_SQL, [end, int(start), rank, end, int(start), MAX_WINDOW_ITEMS])
        window_ns = end - int(start)
        out["window_items"] = [{"kind": r["kind"], "name": r["name"], "count": int(r["count"]), "ns": _i(r["ns"]),
                                "share": _i(r["ns"]) / window_ns if window_ns > 0 else None,
                                "slice_id": _i(r["slice_id"])}
                               for r in items]
    return out


def of_slice(db, slice_id: int) -> dict:
    """The instance a collective op (a slice of a communication lane) belongs to, as :func:`instance` answers it
    without the per-rank arrivals, and that op's rank and wait; ``instance`` None when the slice is no collective
    of two ranks or more (the timeline's Slice Detail asks for every collective op clicked)."""
    if not available(db):
        return _unavailable()
    row = db.dicts(OF_SLICE_SQL, [slice_id])
    if not row:
        return {"available": True, "instance": None}
    r = row[0]
    try:
        inst = instance(db, r["group_id"], r["op_name"], int(r["seq"]))
    except NotFound:
        return {"available": True, "instance": None}
    inst.pop("arrivals", None)
    inst.pop("window_items", None)
    return {"available": True, "rank": int(r["rank"]), "wait_ns": int(inst["last_ns"]) - int(r["start_ns"]),
            "instance": inst}


def totals(db, step: int | None = None, limit: int = MAX_TOTAL_ROWS) -> dict:
    """Per rank: the wait it caused (as the last rank) and the wait it suffered, most caused first (columnar)."""
    if not available(db):
        return _unavailable()
    limit = max(1, min(int(limit), MAX_TOTAL_ROWS))
    if step is None:
        rows = db.dicts(TOTALS_SQL, [MIN_LEAD_NS, MIN_LEAD_NS, limit + 1])
    else:
        rows = db.dicts(TOTALS_STEP_SQL, [step, MIN_LEAD_NS, MIN_LEAD_NS, step, step, limit + 1])
    keep = rows[:limit]
    return {"available": True, "step": step, "truncated": len(rows) > limit,
            **{k: [_i(r[k]) for r in keep] for k in ("rank", "instances", "wait_caused_ns", "wait_suffered_ns",
                                                       "times_last")}}


def chains(db, start_ns: int, end_ns: int, ranks: list[int]) -> dict:
    """The wait chains to draw on the timeline between ``start_ns`` and ``end_ns`` (absolute ns): per instance
    (the most waited first, at most :data:`MAX_CHAIN_INSTANCES`), the last rank's op and the ops of ``ranks``
    with their wait."""
    if not available(db):
        return _unavailable()
    if end_ns <= start_ns:
        raise QueryError("bad_window", "end_ns must be after start_ns")
    ranks = sorted(set(int(r) for r in ranks))[:MAX_CHAIN_RANKS]
    rows = db.rows(CHAINS_SQL, [end_ns, start_ns, MAX_CHAIN_INSTANCES, ranks])
    out: dict[tuple, dict] = {}
    for gid, op, seq, last, second, late, n, rank, slice_id, track_id, start, end in rows:
        inst = out.setdefault((gid, op, seq), {
            "group_id": gid, "op_name": op, "seq": int(seq), "ranks": int(n), "last_ns": ns_str(last),
            "lead_ns": int(last) - int(second), "attributed": int(last) - int(second) >= MIN_LEAD_NS,
            "late_rank": int(late), "late": None, "waiters": []})
        op_row = {"rank": int(rank), "slice_id": _i(slice_id), "track_id": _i(track_id), "start_ns": ns_str(start),
                  "end_ns": ns_str(end), "wait_ns": int(last) - int(start)}
        if int(rank) == int(late):
            inst["late"] = op_row
        if int(rank) in ranks and int(rank) != int(late):
            inst["waiters"].append(op_row)
    return {"available": True, "instances": list(out.values()), "min_lead_ns": MIN_LEAD_NS,
            "truncated": len(out) >= MAX_CHAIN_INSTANCES}
