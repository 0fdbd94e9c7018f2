"""System View: per-rank statistics of the timeline's slices, over the whole run or a time range.

Pages (:data:`PAGES`):

* ``overall`` — Overall Metrics, a tree from the Overlap Analysis lane: Computing (split by accelerator core, then
  kernel type, from the Ascend Hardware compute tasks), Communication (Not Overlapped, and Overlapped =
  Communication − Not Overlapped), Free, and E2E (first start to last end of the lane's slices).
* ``python`` / ``cann`` — per slice name of the rank's Python / CANN lanes: count, total, avg, min, max, self.
* ``hardware`` — per task name (or per ``Task Type``) of the Ascend Hardware lanes.
* ``communication`` — per op type of the communication op lanes (not the planes): ``hcom_allReduce__586_0_1``
  counts as ``hcom_allReduce_``.

Scope: a slice counts when it overlaps ``[start, end)`` (an instant when it lies inside), and only its time inside
counts (``clip``), so the rows of a range add up to the range. Without a range nothing is clipped. Self time is a
slice's time minus the part of it its children (``parent_id``) cover, never below 0 (improperly nested sources
have children that overlap each other).

Every row can list its slices (:func:`slices`, paged). SQL is made of the named constants below and of
fragments picked from whitelists; values travel as bound ``$name`` parameters (the runner takes a dict). Lists are
capped and say ``truncated``. Absolute times leave as decimal strings; ``ts_ns`` in slice lists is relative to
the run origin, like the timeline API's.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

from ascendscope.server.queries import Page, QueryError, ns_str, order_by, ratio

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
PAGES = ("overall", "python", "cann", "hardware", "communication")
OVERLAP_NAMES = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")
# as ingest/overlap.py: the Ascend Hardware task types the profiler counts as computing
COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE")
MAX_KERNEL_TYPES = 200  # kernel-type rows listed under one accelerator core
PAGE_KINDS = {"python": "python", "cann": "cann", "hardware": "hardware", "communication": "communication"}
GROUPS = {  # page -> group_by -> SQL expression of the row key over `s` (slices) and `t` (tracks)
    "python": {"name": "s.name"},
    "cann": {"name": "s.name"},
    "hardware": {"name": "s.name", "task_type": "coalesce(s.args->>'Task Type', '')"},
    "communication": {"op_type": r"regexp_replace(s.name, '(_\d+)+$', '')"},
}
SELF_PAGES = ("python", "cann")  # where nesting means calls; device lanes nest only where tasks overlap
SORTS = {"name": "key", "count": "count", "total": "total_ns", "avg": "avg_ns", "min": "min_ns", "max": "max_ns",
         "self": "self_ns"}
SLICE_SORTS = {"start": "s.ts_ns", "duration": "s.dur_ns", "time": "d"}

# the slices of one rank's lanes of one kind in the scope, with their clipped bounds [b, e) and time d
SCOPED = """
  SELECT s.slice_id, s.parent_id, s.track_id, s.name, s.ts_ns, s.dur_ns, s.args, t.thread_name,
         greatest(s.ts_ns, $start) AS b, least(s.ts_ns + s.dur_ns, $end) AS e,
         least(s.ts_ns + s.dur_ns, $end) - greatest(s.ts_ns, $start) AS d
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  WHERE s.rank = $rank AND t.kind = $kind AND {lane}
    AND s.ts_ns >= $lo AND s.ts_ns < $end AND (s.ts_ns + s.dur_ns > $start OR s.ts_ns >= $start)"""
LANES = {  # extra lane condition per kind: communication ops live on the group lanes, link tasks on the planes
    "communication": "NOT starts_with(coalesce(t.thread_name, ''), 'Plane')",
}

OVERLAP_SQL = "WITH s AS (" + SCOPED + """)
SELECT name, count(*) AS count, sum(d) AS total_ns, min(d) AS min_ns, max(d) AS max_ns, min(b) AS first_ns,
       max(e) AS last_ns
FROM s WHERE list_contains($names, name) GROUP BY name
"""
# Ascend Hardware compute tasks by accelerator core and kernel type. A task with a kernel row at its start
# (kernel_details' row, the first one, as the slice detail does) is a compute task unless that row is a
# communication operator (HCCL): the row names its Accelerator Core and Type, whatever the trace's Task Type says
# (some CANN versions write "Other" there). A row of "N/A" (Level0) names nothing: the db export's Accelerator Core
# arg, else the Task Type, and the task's name stand in. A task without a kernel row counts when its Task Type is
# a compute type or it names its Accelerator Core (the db export's compute tasks).
KERNEL_JOIN = """LEFT JOIN (
  SELECT start_ns, arg_min(accelerator_core, src_row) AS core, arg_min(type, src_row) AS type
  FROM kernels WHERE rank = $rank GROUP BY start_ns
) k ON k.start_ns = s.ts_ns"""
CORE_SQL = ("coalesce(nullif(k.core, 'N/A'), nullif(s.args->>'Accelerator Core', 'N/A'), s.args->>'Task Type', "
            "'')")
TYPE_SQL = "coalesce(nullif(k.type, 'N/A'), s.name)"
IS_COMPUTE_SQL = """CASE WHEN k.start_ns IS NOT NULL THEN coalesce(k.core, '') NOT IN ('HCCL', 'COMMUNICATION')
     ELSE s.args->>'Accelerator Core' IS NOT NULL OR list_contains($task_types, s.args->>'Task Type') END"""
KERNEL_SPLIT_SQL = "WITH s AS (" + SCOPED + f""")
SELECT {CORE_SQL} AS core, {TYPE_SQL} AS type, count(*) AS count,
       sum(s.d) AS total_ns, min(s.d) AS min_ns, max(s.d) AS max_ns
FROM s """ + KERNEL_JOIN + f"""
WHERE {IS_COMPUTE_SQL}
GROUP BY ALL
"""
# the rank's kernel rows (the Operator view's count) and those of them that are communication operators
KERNEL_COUNTS_SQL = """
SELECT count(*), count(*) FILTER (WHERE coalesce(accelerator_core, '') IN ('HCCL', 'COMMUNICATION'))
FROM kernels WHERE rank = $rank
"""
# per row key: count, time, self time, and over all rows (window sums) the totals
GROUPED_SQL = "WITH s AS (" + SCOPED + """),
kids AS (
  SELECT c.parent_id, sum(least(c.e, p.e) - greatest(c.b, p.b)) AS covered
  FROM s c JOIN s p ON p.slice_id = c.parent_id
  WHERE c.e > p.b AND c.b < p.e
  GROUP BY c.parent_id
),
g AS (
  SELECT {key} AS key, count(*) AS count, sum(s.d) AS total_ns, avg(s.d) AS avg_ns, min(s.d) AS min_ns,
         max(s.d) AS max_ns, sum(greatest(s.d - coalesce(kids.covered, 0), 0)) AS self_ns,
         array_to_string(list_sort(list_distinct(list(coalesce(s.args->>'Task Type', ''))))[1:3], ', ')
           AS task_types
  FROM s LEFT JOIN kids ON kids.parent_id = s.slice_id
  GROUP BY 1
)
SELECT key, count, CAST(total_ns AS BIGINT) AS total_ns, avg_ns, min_ns, max_ns, CAST(self_ns AS BIGINT) AS self_ns,
       task_types, count(*) OVER () AS rows, CAST(sum(count) OVER () AS BIGINT) AS all_count,
       CAST(sum(total_ns) OVER () AS BIGINT) AS all_total_ns, CAST(sum(self_ns) OVER () AS BIGINT) AS all_self_ns
FROM g WHERE $q = '' OR contains(lower(key), $q)
ORDER BY {order}, key
LIMIT $limit OFFSET $offset
"""
SLICES_SQL = "WITH s AS (" + SCOPED + """)
SELECT s.slice_id, s.track_id, s.thread_name AS lane, s.name, s.ts_ns - $origin AS ts_ns, s.dur_ns, s.d AS time_ns,
       count(*) OVER () AS rows
FROM s {join}
WHERE {where}
ORDER BY {order}, s.slice_id
LIMIT $limit OFFSET $offset
"""
RANK_KINDS_SQL = "SELECT DISTINCT rank, kind FROM tracks WHERE kind <> 'counter' AND slice_count > 0 ORDER BY rank"


@dataclass(frozen=True)
class Scope:
    """The time range ([start, end) absolute ns) a page covers; None for the whole run."""

    start: int | None = None
    end: int | None = None

    @property
    def bounded(self) -> bool:
        return self.start is not None or self.end is not None

    def params(self, db, rank: int, kind: str) -> dict:
        start = INT64_MIN if self.start is None else self.start
        end = INT64_MAX if self.end is None else self.end
        if end <= start:
            raise QueryError("invalid_range", f"end_ns ({end}) must be greater than start_ns ({start})")
        # adds nothing logically; lets the zone maps of the ts-ordered slices table prune (as the timeline does)
        longest = max((t.max_dur_ns for t in db.info.tracks.values() if t.rank == rank and t.kind == kind),
                      default=0)
        return {"rank": rank, "kind": kind, "start": start, "end": end, "lo": max(INT64_MIN, start - longest)}

    def json(self) -> dict | None:
        return {"start_ns": ns_str(self.start), "end_ns": ns_str(self.end)} if self.bounded else None


def ranks(db) -> list[dict]:
    """Ranks with slices, and for each which pages have data."""
    kinds: dict[int, set] = {}
    for rank, kind in db.rows(RANK_KINDS_SQL, {}):
        kinds.setdefault(int(rank), set()).add(kind)
    return [{"rank": r, "pages": [p for p in PAGES if (PAGE_KINDS.get(p, "overlap") in k)]}
            for r, k in sorted(kinds.items())]


def overall(db, rank: int, scope: Scope) -> dict:
    """The Overall Metrics tree: rows {key, name, total_ns, ratio, count, avg_ns, min_ns, max_ns, children,
    has_slices}; ratios are of E2E."""
    params = scope.params(db, rank, "overlap")
    lane = {k: dict(zip(("count", "total_ns", "min_ns", "max_ns", "first_ns", "last_ns"), v))
            for k, *v in db.rows(OVERLAP_SQL.format(lane="TRUE"), params | {"names": list(OVERLAP_NAMES)})}
    firsts = [v["first_ns"] for v in lane.values()]
    e2e = int(max(v["last_ns"] for v in lane.values()) - min(firsts)) if firsts else 0

    def row(key, name, stats=None, total=None, children=(), slices=True):
        stats = stats or {}
        total = int(stats.get("total_ns") or 0) if total is None else total
        count = stats.get("count")
        return {"key": key, "name": name, "total_ns": total, "ratio": ratio(total, e2e), "count": count,
                "avg_ns": total / count if count else None, "min_ns": stats.get("min_ns"),
                "max_ns": stats.get("max_ns"), "children": list(children), "has_slices": slices and bool(count)}

    hw = scope.params(db, rank, "hardware")
    cores: dict[str, list] = {}
    for core, ktype, count, total, lo, hi in db.rows(KERNEL_SPLIT_SQL.format(lane="TRUE"),
                                                      hw | {"task_types": list(COMPUTE_TASK_TYPES)}):
        cores.setdefault(core or "", []).append(
            row(_key("kernel", core or "", ktype or ""), ktype or "",
                {"count": count, "total_ns": int(total), "min_ns": lo, "max_ns": hi}))
    core_rows = []
    for core, kids in cores.items():
        kids.sort(key=lambda r: (-r["total_ns"], r["name"]))
        stats = {"count": sum(k["count"] for k in kids), "total_ns": sum(k["total_ns"] for k in kids),
                 "min_ns": min(k["min_ns"] for k in kids), "max_ns": max(k["max_ns"] for k in kids)}
        node = row(_key("core", core), core or "(no core)", stats, children=kids[:MAX_KERNEL_TYPES])
        node["truncated"] = len(kids) > MAX_KERNEL_TYPES
        core_rows.append(node)
    core_rows.sort(key=lambda r: (-r["total_ns"], r["name"]))

    comm = lane.get("Communication", {})
    exposed = lane.get("Communication(Not Overlapped)", {})
    overlapped = int(comm.get("total_ns") or 0) - int(exposed.get("total_ns") or 0)
    rows = [
        row(_key("overlap", "Computing"), "Computing Time", lane.get("Computing"), children=core_rows),
        row(_key("overlap", "Communication"), "Communication Time", comm, children=[
            row(_key("overlap", "Communication(Not Overlapped)"), "Not Overlapped", exposed),
            row("overlapped", "Overlapped", total=overlapped, slices=False),
        ]),
        row(_key("overlap", "Free"), "Free Time", lane.get("Free")),
        row("e2e", "E2E Time", total=e2e, slices=False),
    ]
    tasks = sum(int(r["count"] or 0) for r in core_rows)
    return {"rank": rank, "scope": scope.json(), "e2e_ns": e2e, "rows": rows, "has_data": bool(lane),
            "notes": _count_notes(db, rank, tasks, scope.bounded) if lane else []}


def _count_notes(db, rank: int, tasks: int, bounded: bool) -> list[str]:
    """Why the Computing split's task count differs from the Operator view's kernel count, when it does (over the
    whole run: a range holds only part of the kernels)."""
    kernels, comm = (int(v or 0) for v in db.rows(KERNEL_COUNTS_SQL, {"rank": rank})[0])
    notes = []
    if comm:
        notes.append(f"The Operator view's {kernels:,} kernels include {comm:,} communication operator"
                     f"{'s' if comm != 1 else ''} (HCCL), counted here under Communication.")
    if kernels and not bounded and tasks != kernels - comm:
        notes.append(f"{kernels - comm:,} computing kernels, {tasks:,} compute tasks on the timeline: "
                     f"{abs(kernels - comm - tasks):,} "
                     + ("kernel rows have no task starting with them on the Ascend Hardware lanes."
                        if kernels - comm > tasks else "tasks have no kernel row (their Task Type says compute)."))
    return notes


def grouped(db, page: str, rank: int, scope: Scope, group_by: str | None, q: str | None, sort: str | None,
            order: str | None, pg: Page) -> dict:
    """One page of rows of a per-name page, with the totals over all its rows."""
    group_by = _group_by(page, group_by)
    key = GROUPS[page][group_by]
    params = scope.params(db, rank, PAGE_KINDS[page]) | {"q": (q or "").lower()}
    sql = GROUPED_SQL.format(lane=LANES.get(PAGE_KINDS[page], "TRUE"), key=key,
                             order=order_by(sort, order, SORTS, "total"))
    rows = db.dicts(sql, params | {"limit": pg.limit, "offset": pg.offset})
    # a page past the end carries no window sums: the first row has them
    head = rows[0] if rows else next(iter(db.dicts(sql, params | {"limit": 1, "offset": 0})), None)
    total = int(head["rows"]) if head else 0
    totals = {"count": int(head["all_count"]) if head else 0, "total_ns": int(head["all_total_ns"]) if head else 0}
    if page in SELF_PAGES:
        totals["self_ns"] = int(head["all_self_ns"]) if head else 0
    out_rows = []
    for r in rows:
        item = {"key": r["key"], "name": r["key"], "count": int(r["count"]), "total_ns": int(r["total_ns"]),
                "avg_ns": r["avg_ns"], "min_ns": int(r["min_ns"]), "max_ns": int(r["max_ns"])}
        if page in SELF_PAGES:
            item["self_ns"] = int(r["self_ns"])
        if page == "hardware" and group_by == "name":
            item["task_types"] = r["task_types"]
        out_rows.append(item)
    return {"rank": rank, "page": page, "group_by": group_by, "scope": scope.json(), "rows": out_rows,
            "total": total, "offset": pg.offset, "limit": pg.limit, "truncated": pg.offset + len(rows) < total,
            "totals": totals, "self": page in SELF_PAGES}


def slices(db, page: str, rank: int, scope: Scope, key: str, group_by: str | None, sort: str | None,
           order: str | None, pg: Page) -> dict:
    """The slices of one row (``key`` as a page row gave it), one page at a time, longest first by default."""
    origin = db.info.origin_ns
    join = ""
    if page == "overall":
        kind, where, extra = _overall_filter(key)
    else:
        kind = PAGE_KINDS[page]
        where, extra = f"{GROUPS[page][_group_by(page, group_by)]} = $key", {"key": key}
    if "k.core" in where:
        join = KERNEL_JOIN
    params = scope.params(db, rank, kind) | extra
    sql = SLICES_SQL.format(lane=LANES.get(kind, "TRUE"), join=join, where=where,
                            order=order_by(sort, order, SLICE_SORTS, "duration"))
    cols = db.dicts(sql, params | {"origin": origin, "limit": pg.limit, "offset": pg.offset})
    total = int(cols[0]["rows"]) if cols else 0
    items = [{k: r[k] for k in ("slice_id", "track_id", "lane", "name", "ts_ns", "dur_ns", "time_ns")} for r in cols]
    return {"rank": rank, "page": page, "key": key, "scope": scope.json(), "origin_ns": ns_str(origin),
            "rows": items, "total": total, "offset": pg.offset, "limit": pg.limit,
            "truncated": pg.offset + len(items) < total}


def _overall_filter(key: str) -> tuple[str, str, dict]:
    """(lane kind, WHERE fragment, parameters) of an Overall Metrics row key."""
    kind, *parts = key.split(":")
    parts = [unquote(p) for p in parts]
    if kind == "overlap" and len(parts) == 1 and parts[0] in OVERLAP_NAMES:
        return "overlap", "s.name = $key", {"key": parts[0]}
    tasks = {"task_types": list(COMPUTE_TASK_TYPES)}
    if kind == "core" and len(parts) == 1:
        return "hardware", f"({IS_COMPUTE_SQL}) AND {CORE_SQL} = $core", tasks | {"core": parts[0]}
    if kind == "kernel" and len(parts) == 2:
        return ("hardware", f"({IS_COMPUTE_SQL}) AND {CORE_SQL} = $core AND {TYPE_SQL} = $type",
                tasks | {"core": parts[0], "type": parts[1]})
    raise QueryError("bad_key", f"no Overall Metrics row has the key {key[:100]!r}")


def _key(kind: str, *parts: str) -> str:
    return ":".join([kind, *(quote(p, safe="") for p in parts)])


def _group_by(page: str, group_by: str | None) -> str:
    choices = GROUPS[page]
    group_by = group_by or next(iter(choices))
    if group_by not in choices:
        raise QueryError("bad_group_by", f"page {page!r} groups by {', '.join(choices)}, not {group_by!r}")
    return group_by
