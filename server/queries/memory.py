"""Memory view: ``memory_record`` curves, ``npu_module_mem`` per module, and the ``operator_memory`` allocations.

Curves can hold millions of points, so above ``max_points`` they are down-sampled on the server, M4-style: the
time range is cut into buckets and, per component and bucket, only the real rows holding the first, the last, and
the min and max of each measure are kept (so peaks and steps survive exactly). Among tied rows (equal values)
any one may be kept: the drawn step line is the same. (Deterministic tie-breaking by a struct key was measured
3× slower on 2 M rows.) The one exception is the peak: a series' ``peak`` is its maximum and the *earliest* time it
is reached (memory often plateaus at its peak), and that row is always kept. The naive equivalent is the plain
``SELECT … FROM memory_record WHERE rank = ? ORDER BY timestamp_ns``; a test checks the two agree on every kept row
and on the extremes. Times in curves are ``t_ns`` relative to the ``origin_ns`` the caller passes (the run's).

The curves come in three Group By choices, like MindStudio Insight's: ``overall`` (memory_record's allocator totals
per component), ``stream`` (per stream, the blocks of operator_memory allocated and not yet released: the totals of
memory_record are the whole allocator's whatever the stream) and ``component`` (what each component and CANN module
reserves). Each is a *source* query of the same row shape, down-sampled by the same M4 SQL. The overview says which
choices have data for a rank, and when one has none, which file or table would have fed it (``empty_sources``).
"""

from __future__ import annotations

from ascendscope.server.queries import (
    MAX_CSV_ROWS,
    Page,
    QueryError,
    Where,
    col_or_null,
    csv_text,
    links,
    ns_str,
    order_by,
    paged,
    sources,
    table_columns,
)

DEFAULT_MAX_POINTS = 4_000
MAX_MAX_POINTS = 50_000
POINTS_PER_BUCKET = 4  # first / last / min / max: the usual count; coinciding rows make it smaller
MAX_MODULE_SERIES = 24
MEASURES = ("allocated", "reserved", "active")
MEASURE_LABELS = {"allocated": "Allocated", "reserved": "Reserved", "active": "Active"}
CURVE_METHOD = "m4: first, last, min and max per bucket and component, and each series' earliest peak"
COMPONENT_ORDER = ("PTA+GE", "MindSpore+GE", "PTA", "MindSpore", "GE", "APP", "WORKSPACE")

RANKS_SQL = """
SELECT rank, sum(records) AS records, sum(allocations) AS allocations, sum(modules) AS modules FROM (
  SELECT rank, count(*) AS records, 0 AS allocations, 0 AS modules FROM memory_record GROUP BY rank
  UNION ALL SELECT rank, 0, count(*), 0 FROM operator_memory GROUP BY rank
  UNION ALL SELECT rank, 0, 0, count(*) FROM npu_module_mem GROUP BY rank
) GROUP BY rank ORDER BY rank
"""
# peak times are the earliest at the maximum, like the curves' peaks
COMPONENTS_SQL = """
WITH r AS (
  SELECT component, timestamp_ns AS ts, total_allocated_mb AS a, total_reserved_mb AS rs, {active} AS act
  FROM memory_record WHERE rank = ?
), top AS (SELECT component, max(a) AS ma, max(rs) AS mr FROM r GROUP BY component)
SELECT component, count(*) AS points, min(ts) AS start_ns, max(ts) AS end_ns,
       any_value(ma) AS peak_allocated_mb, min(ts) FILTER (WHERE a = ma) AS peak_allocated_ns,
       any_value(mr) AS peak_reserved_mb, min(ts) FILTER (WHERE rs = mr) AS peak_reserved_ns,
       max(act) AS peak_active_mb
FROM r JOIN top USING (component) GROUP BY component
"""
MEMORY_WARNINGS_SQL = """
SELECT file, message FROM warnings
WHERE rank = ? AND (file LIKE '%memory_record%' OR file LIKE '%operator_memory%' OR file LIKE '%npu_module_mem%')
ORDER BY file LIMIT 20
"""
PEAK_ALLOCATION_SQL = """
SELECT arg_max(src_row, allocation_total_allocated_mb), max(allocation_total_allocated_mb),
       arg_max(allocation_time_ns, allocation_total_allocated_mb), arg_max(name, allocation_total_allocated_mb)
FROM operator_memory WHERE rank = ?
"""

# The M4 pick over the rows ``(component, src_row, ts, allocated, reserved, active)`` of a group's {source}; its
# parameters are the source's, then lo, hi (the window), lo, buckets, span. A bucket is ((ts - lo) * buckets) // span,
# in HUGEINT so that long runs cannot overflow.
M4_SQL = """
WITH r AS (
  SELECT * FROM ({source}) WHERE ts BETWEEN ? AND ?
), b AS (
  SELECT *, CAST(((ts - ?)::HUGEINT * ?) // ? AS BIGINT) AS bucket FROM r
), pick AS (
  SELECT component, bucket,
         [arg_min(src_row, ts), arg_max(src_row, ts), arg_min(src_row, allocated), arg_max(src_row, allocated),
          arg_min(src_row, reserved), arg_max(src_row, reserved), arg_min(src_row, active),
          arg_max(src_row, active)] AS keep
  FROM b GROUP BY ALL
), top AS (
  SELECT component, max(allocated) AS ma, max(reserved) AS mr, max(active) AS mact FROM r GROUP BY component
), peaks AS (
  SELECT component, [arg_min(src_row, ts) FILTER (WHERE allocated = ma),
                     arg_min(src_row, ts) FILTER (WHERE reserved = mr),
                     arg_min(src_row, ts) FILTER (WHERE active = mact)] AS keep
  FROM r JOIN top USING (component) GROUP BY component
), kept AS (
  SELECT DISTINCT component, unnest(keep) AS src_row
  FROM (SELECT component, keep FROM pick UNION ALL SELECT component, keep FROM peaks)
)
SELECT r.component, r.ts, r.allocated, r.reserved, r.active
FROM r JOIN kept USING (component, src_row)
ORDER BY r.component, r.ts, r.src_row
"""
ALL_SQL = """
SELECT component, ts, allocated, reserved, active FROM ({source}) WHERE ts BETWEEN ? AND ?
ORDER BY component, ts, src_row
"""
SOURCE_COUNT_SQL = "SELECT count(*), min(ts), max(ts), count(DISTINCT component) FROM ({source})"
SOURCE_RANGE_COUNT_SQL = "SELECT count(*) FROM ({source}) WHERE ts BETWEEN ? AND ?"

# Group sources. Overall: the allocator totals as memory_record has them, per component.
OVERALL_SOURCE = """
SELECT component, src_row, timestamp_ns AS ts, total_allocated_mb AS allocated, total_reserved_mb AS reserved,
       {active} AS active
FROM memory_record WHERE rank = ?"""
# Stream: memory_record's totals are the whole allocator's, whatever stream an event was on, so a stream's own
# memory comes from operator_memory: per stream, the size of the blocks allocated and not yet released (allocated)
# and not yet returned to the caching allocator (active), stepping at each allocation and release. Blocks
# allocated before profiling started are not in the file. Rows without a stream (GE's) form their own group, with
# no active measure (FORMATS.md 4.5: GE has no active/stream). One row per (stream, time): equal times net out.
STREAM_SOURCE = """
SELECT component, row_number() OVER w AS src_row, ts, sum(d_alloc) OVER w / 1024 AS allocated,
       NULL::DOUBLE AS reserved, sum(d_active) OVER w / 1024 AS active
FROM (
  SELECT component, ts, sum(d_alloc) AS d_alloc, sum(d_active) AS d_active FROM (
    SELECT coalesce({stream}, '') AS component, allocation_time_ns AS ts, size_kb AS d_alloc,
           CASE WHEN {stream} IS NOT NULL AND {has_active} THEN size_kb END AS d_active
    FROM operator_memory WHERE rank = ? AND allocation_time_ns IS NOT NULL
    UNION ALL
    SELECT coalesce({stream}, ''), release_time_ns, -size_kb, NULL
    FROM operator_memory WHERE rank = ? AND allocation_time_ns IS NOT NULL AND release_time_ns IS NOT NULL
    UNION ALL
    SELECT {stream}, {active_release}, NULL, -size_kb
    FROM operator_memory
    WHERE rank = ? AND allocation_time_ns IS NOT NULL AND {stream} IS NOT NULL AND {active_release} IS NOT NULL
  ) GROUP BY component, ts
)
WINDOW w AS (PARTITION BY component ORDER BY ts ROWS UNBOUNDED PRECEDING)"""
# Component: what each component holds from the device (reserved): memory_record's components but PTA+GE or
# MindSpore+GE (their sum, shown in Overall) and the CANN modules of npu_module_mem that reserve anything (the
# largest ones).
COMPONENT_SOURCE = """
SELECT 'memory_record:' || coalesce(component, '') AS component, src_row, timestamp_ns AS ts,
       NULL::DOUBLE AS allocated, total_reserved_mb AS reserved, NULL::DOUBLE AS active
FROM memory_record WHERE rank = ? AND coalesce(component, '') NOT IN ('PTA+GE', 'MindSpore+GE')
UNION ALL
SELECT 'npu_module_mem:' || component, src_row, timestamp_ns, NULL::DOUBLE, total_reserved_mb, NULL::DOUBLE
FROM npu_module_mem WHERE rank = ? AND component IN (
  SELECT component FROM npu_module_mem WHERE rank = ? GROUP BY component HAVING max(total_reserved_mb) > 0
  ORDER BY max(total_reserved_mb) DESC, component LIMIT {max_modules})"""
CURVE_SQL = M4_SQL.replace("{source}", OVERALL_SOURCE)
CURVE_ALL_SQL = ALL_SQL.replace("{source}", OVERALL_SOURCE)
GROUPS = ("overall", "stream", "component")
STREAMS_SQL = """
SELECT {stream} AS stream_ptr, count(*) AS allocations FROM operator_memory WHERE rank = ?
GROUP BY ALL ORDER BY stream_ptr NULLS LAST LIMIT ?
"""
MAX_STREAMS = 64

MODULE_SERIES_SQL = """
SELECT component, max(total_reserved_mb) AS peak_mb, count(*) AS points
FROM npu_module_mem WHERE rank = ? GROUP BY component
HAVING max(total_reserved_mb) > 0 ORDER BY peak_mb DESC, component
"""
MODULE_CURVE_SQL = """
WITH r AS (
  SELECT component, src_row, timestamp_ns AS ts, total_reserved_mb AS reserved
  FROM npu_module_mem WHERE rank = ? AND component IN (SELECT unnest(?::VARCHAR[]))
), b AS (
  SELECT *, CAST(((ts - ?)::HUGEINT * ?) // ? AS BIGINT) AS bucket FROM r
), pick AS (
  SELECT component, bucket,
         [arg_min(src_row, ts), arg_max(src_row, ts), arg_min(src_row, reserved), arg_max(src_row, reserved)] AS keep
  FROM b GROUP BY ALL
), peaks AS (
  SELECT component, [arg_min(src_row, ts) FILTER (WHERE reserved = mr)] AS keep
  FROM r JOIN (SELECT component, max(reserved) AS mr FROM r GROUP BY component) USING (component) GROUP BY component
), kept AS (
  SELECT DISTINCT component, unnest(keep) AS src_row
  FROM (SELECT component, keep FROM pick UNION ALL SELECT component, keep FROM peaks)
)
SELECT r.component, r.ts, r.reserved FROM r JOIN kept USING (component, src_row)
ORDER BY r.component, r.ts, r.src_row
"""
MODULE_RANGE_SQL = "SELECT count(*), min(timestamp_ns), max(timestamp_ns) FROM npu_module_mem WHERE rank = ?"

ALLOCATION_COLUMNS = (
    ("src_row", "INTEGER"), ("name", "VARCHAR"), ("size_kb", "DOUBLE"), ("allocation_time_ns", "BIGINT"),
    ("release_time_ns", "BIGINT"), ("active_release_time_ns", "BIGINT"), ("duration_ns", "BIGINT"),
    ("active_duration_ns", "BIGINT"), ("allocation_total_allocated_mb", "DOUBLE"),
    ("allocation_total_reserved_mb", "DOUBLE"), ("allocation_total_active_mb", "DOUBLE"),
    ("release_total_allocated_mb", "DOUBLE"), ("release_total_reserved_mb", "DOUBLE"),
    ("release_total_active_mb", "DOUBLE"), ("stream_ptr", "VARCHAR"), ("device_type", "VARCHAR"),
)
ALLOCATION_TIMES = ("allocation_time_ns", "release_time_ns", "active_release_time_ns")
ALLOCATION_SORTS = {
    "name": "name", "size": "size_kb", "allocation_time": "allocation_time_ns", "release_time": "release_time_ns",
    "active_release_time": "active_release_time_ns", "duration": "duration_ns",
    "active_duration": "active_duration_ns", "allocation_total_allocated": "allocation_total_allocated_mb",
    "allocation_total_reserved": "allocation_total_reserved_mb",
    "release_total_allocated": "release_total_allocated_mb",
    "src_row": "src_row",
}


def ranks(db) -> list[dict]:
    return [{"rank": int(r), "records": int(a), "allocations": int(b), "modules": int(c)}
            for r, a, b, c in db.rows(RANKS_SQL)]


def _active(db) -> str:
    return "total_active_mb" if "total_active_mb" in table_columns(db, "memory_record") else "NULL::DOUBLE"


def overview(db, rank: int) -> dict:
    """Components with their point counts and peaks, the peak allocation, and the loader's warnings."""
    comps = db.dicts(COMPONENTS_SQL.format(active=_active(db)), [rank])
    comps.sort(key=lambda c: (COMPONENT_ORDER.index(c["component"]) if c["component"] in COMPONENT_ORDER
                              else len(COMPONENT_ORDER), str(c["component"])))
    for c in comps:
        for k in ("start_ns", "end_ns", "peak_allocated_ns", "peak_reserved_ns"):
            c[k] = ns_str(c[k])
    src_row, peak_mb, peak_ns, peak_name = db.rows(PEAK_ALLOCATION_SQL, [rank])[0]
    peak = None if src_row is None else {"src_row": int(src_row), "allocation_total_allocated_mb": peak_mb,
                                         "allocation_time_ns": ns_str(peak_ns), "name": peak_name}
    warnings = [{"file": f, "message": m} for f, m in db.rows(MEMORY_WARNINGS_SQL, [rank])]
    why = sources.explain(db, "memory", rank)
    return {"rank": rank, "components": comps, "peak_allocation": peak, "warnings": warnings,
            "has_trace": rank in links.trace_ranks(db), "empty_sources": why, "groups": groups(db, rank, comps, why)}


def groups(db, rank: int, comps: list[dict], why: dict) -> dict:
    """Which Group By choices have data for the rank, and why not (naming the file or table) when one has none."""
    def reason(section: str) -> str | None:
        listed = why[section]["ranks"]
        return listed[0]["message"] if listed else None

    streams: list[dict] = []
    stream_reason = reason("allocations")
    if stream_reason is None:
        if "stream_ptr" in table_columns(db, "operator_memory"):
            streams = db.dicts(STREAMS_SQL.format(stream="stream_ptr"), [rank, MAX_STREAMS + 1])
        if not any(s["stream_ptr"] is not None for s in streams):
            stream_reason = f"rank {rank}'s operator allocations have no Stream Ptr values"
    modules_reason = reason("modules")
    return {
        "overall": {"available": bool(comps), "reason": reason("records")},
        "stream": {"available": stream_reason is None, "reason": stream_reason,
                   "streams": streams[:MAX_STREAMS], "streams_truncated": len(streams) > MAX_STREAMS},
        "component": {"available": bool(comps) or modules_reason is None,
                      "reason": None if comps or modules_reason is None
                      else f"{reason('records')}; {modules_reason}"},
    }


def _buckets(max_points: int) -> int:
    return max(1, int(max_points) // POINTS_PER_BUCKET)


def _source(db, group: str) -> tuple[str, int]:
    """The SQL of a group's rows and how many times it binds the rank."""
    if group == "overall":
        return OVERALL_SOURCE.format(active=_active(db)), 1
    if group == "stream":
        cols = table_columns(db, "operator_memory")
        has_active = "active_release_time_ns" in cols
        return STREAM_SOURCE.format(stream="stream_ptr" if "stream_ptr" in cols else "NULL::VARCHAR",
                                    has_active="TRUE" if has_active else "FALSE",
                                    active_release="active_release_time_ns" if has_active else "NULL::BIGINT"), 3
    if group == "component":
        return COMPONENT_SOURCE.format(max_modules=MAX_MODULE_SERIES), 3
    raise QueryError("bad_group", f"group must be one of: {', '.join(GROUPS)}")


def curves(db, rank: int, origin_ns: int, start_ns: int | None = None, end_ns: int | None = None,
           max_points: int = DEFAULT_MAX_POINTS, group: str = "overall") -> dict:
    """The series of a Group By over time, down-sampled above ``max_points`` rows: ``overall`` allocated /
    reserved / active per memory_record component; ``stream`` allocated / active per stream from the operator
    allocations; ``component`` reserved per component and per CANN module."""
    max_points = max(16, min(int(max_points), MAX_MAX_POINTS))
    source, binds = _source(db, group)
    total, lo_all, hi_all, n_comp = db.rows(SOURCE_COUNT_SQL.format(source=source), [rank] * binds)[0]
    empty = {"rank": rank, "group": group, "origin_ns": ns_str(origin_ns), "series": [], "source_points": 0,
             "points": 0, "downsampled": False}
    if not total:
        return empty
    lo = int(start_ns) if start_ns is not None else int(lo_all)
    hi = int(end_ns) if end_ns is not None else int(hi_all)
    if hi < lo:
        raise QueryError("bad_range", "end_ns is before start_ns")
    in_range = int(db.rows(SOURCE_RANGE_COUNT_SQL.format(source=source), [rank] * binds + [lo, hi])[0][0])
    downsampled = in_range > max_points
    if downsampled:
        # the budget is shared by the components: each gets max_points / components points (about)
        buckets = _buckets(max_points // (int(n_comp) or 1))
        rows = db.rows(M4_SQL.replace("{source}", source), [rank] * binds + [lo, hi, lo, buckets, hi - lo + 1])
    else:
        rows = db.rows(ALL_SQL.replace("{source}", source), [rank] * binds + [lo, hi])
    by_comp: dict[str, dict[str, list]] = {}
    for comp, ts, a, r, act in rows:
        s = by_comp.setdefault(comp, {"t_ns": [], "allocated": [], "reserved": [], "active": []})
        s["t_ns"].append(int(ts) - origin_ns)
        s["allocated"].append(a)
        s["reserved"].append(r)
        s["active"].append(act)
    series = []
    for key in sorted(by_comp, key=lambda k: _series_order(group, k, by_comp[k])):
        s = by_comp[key]
        for m in MEASURES:
            if any(v is not None for v in s[m]):
                series.append({**_series_label(group, key, m), "measure": m, "t_ns": s["t_ns"], "mb": s[m],
                               "peak": _peak(s["t_ns"], s[m])})
    return empty | {"start_ns": ns_str(lo), "end_ns": ns_str(hi), "series": series, "source_points": in_range,
                    "points": len(rows), "downsampled": downsampled,
                    "method": CURVE_METHOD if downsampled else None}


def _series_order(group: str, key: str, s: dict) -> tuple:
    if group == "stream":
        return (key == "", key)  # the rows without a stream last
    if group == "component":
        source, comp = key.split(":", 1)
        if source == "memory_record":
            return (0, _component_rank(comp), 0.0, comp)
        return (1, 0, -max((v for v in s["reserved"] if v is not None), default=0.0), comp)  # largest modules first
    return (_component_rank(key), 0.0, key)


def _component_rank(comp: str) -> int:
    return COMPONENT_ORDER.index(comp) if comp in COMPONENT_ORDER else len(COMPONENT_ORDER)


def _series_label(group: str, key: str, measure: str) -> dict:
    """``source`` (the table), ``component`` (its component, module or stream; null for rows without a stream)
    and the legend ``name``."""
    label = MEASURE_LABELS[measure]
    if group == "stream":
        stream = key or None
        return {"source": "operator_memory", "component": stream,
                "name": f"Stream {stream} {label}" if stream else f"No stream {label}"}
    if group == "component":
        source, comp = key.split(":", 1)
        suffix = " (module)" if source == "npu_module_mem" else ""
        return {"source": source, "component": comp, "name": f"{comp}{suffix} {label}"}
    return {"source": "memory_record", "component": key, "name": f"{key} {label}"}


def _peak(t_ns: list[int], mb: list) -> dict | None:
    """The maximum and the earliest time it is reached. Exact after down-sampling too: the SQL keeps that row, and
    a kept row holding the same value cannot be earlier."""
    best = None
    for t, v in zip(t_ns, mb):
        if v is not None and (best is None or v > best["mb"]):
            best = {"mb": v, "t_ns": t}
    return best


def modules(db, rank: int, origin_ns: int, max_points: int = DEFAULT_MAX_POINTS) -> dict:
    """Reserved memory per CANN module (``npu_module_mem``), modules that never reserve anything left out."""
    max_points = max(16, min(int(max_points), MAX_MAX_POINTS))
    comps = db.dicts(MODULE_SERIES_SQL, [rank])
    shown = comps[:MAX_MODULE_SERIES]
    total, lo, hi = db.rows(MODULE_RANGE_SQL, [rank])[0]
    series = []
    if shown:
        names = [c["component"] for c in shown]
        per = max(16, max_points // len(names))
        rows = db.rows(MODULE_CURVE_SQL, [rank, names, int(lo), _buckets(per), int(hi) - int(lo) + 1])
        by = {n: {"t_ns": [], "mb": []} for n in names}
        for comp, ts, mb in rows:
            by[comp]["t_ns"].append(int(ts) - origin_ns)
            by[comp]["mb"].append(mb)
        series = [{"component": c["component"], "peak_mb": c["peak_mb"], "source_points": int(c["points"]),
                   "peak": _peak(by[c["component"]]["t_ns"], by[c["component"]]["mb"]), **by[c["component"]]}
                  for c in shown]
    points = sum(len(s["t_ns"]) for s in series)
    source = sum(int(c["points"]) for c in shown)
    return {"rank": rank, "origin_ns": ns_str(origin_ns), "series": series, "modules": len(comps),
            "truncated": len(comps) > len(shown), "source_points": source, "points": points,
            "downsampled": points < source,
            # where the rank's rows came from, in its format (npu_module_mem.csv, or the db export's NPU_MODULE_MEM)
            "source": sources.source_names(db, "npu_module_mem").get(rank) if comps else None}


def _allocation_where(rank: int, q: str | None, start_ns: int | None, end_ns: int | None,
                      at_ns: int | None) -> Where:
    w = Where().add("rank = ?", rank)
    if q:
        w.add("strpos(lower(coalesce(name, '')), lower(?)) > 0", q)
    if start_ns is not None or end_ns is not None:
        lo = -(2 ** 63) if start_ns is None else int(start_ns)
        hi = 2 ** 63 - 1 if end_ns is None else int(end_ns)
        w.add("(allocation_time_ns BETWEEN ? AND ? OR release_time_ns BETWEEN ? AND ?)", lo, hi, lo, hi)
    if at_ns is not None:
        w.add("allocation_time_ns <= ? AND (release_time_ns IS NULL OR release_time_ns > ?)", int(at_ns), int(at_ns))
    return w


def allocations(db, run_id: str, rank: int, q: str | None = None, sort: str | None = None,
                order: str | None = None, page: Page | None = None, start_ns: int | None = None,
                end_ns: int | None = None, at_ns: int | None = None, csv: bool = False):
    """``operator_memory`` rows: filter by name, by a window (allocated or released in it) or by an instant
    (live then); the row at which the total allocated memory peaked carries ``is_peak``."""
    page = page or Page()
    columns = table_columns(db, "operator_memory")
    where = _allocation_where(rank, q, start_ns, end_ns, at_ns)
    select = ", ".join(col_or_null(columns, c, t) for c, t in ALLOCATION_COLUMNS)
    sql = (f"SELECT {select} FROM operator_memory WHERE {where.sql()} "
           f"ORDER BY {order_by(sort, order, ALLOCATION_SORTS, 'allocation_time')}, src_row LIMIT ? OFFSET ?")
    if csv:
        return csv_text([c for c, _ in ALLOCATION_COLUMNS], db.rows(sql, where.params + [MAX_CSV_ROWS + 1, 0]))
    n = int(db.rows(f"SELECT count(*) FROM operator_memory WHERE {where.sql()}", where.params)[0][0])
    rows = db.dicts(sql, where.params + [page.limit, page.offset])
    peak_row = db.rows(PEAK_ALLOCATION_SQL, [rank])[0][0]
    traced = rank in links.trace_ranks(db)
    live_kb = None
    if at_ns is not None:
        live_kb = db.rows(f"SELECT coalesce(sum(size_kb), 0) FROM operator_memory WHERE {where.sql()}",
                          where.params)[0][0]
    for r in rows:
        r["is_peak"] = peak_row is not None and r["src_row"] == peak_row
        r["timeline_url"] = links.window_url(run_id, r["allocation_time_ns"],
                                             r["release_time_ns"] or r["allocation_time_ns"]) if traced else None
        for k in ALLOCATION_TIMES:
            r[k] = ns_str(r[k])
    return paged(rows, page, n) | {"has_trace": traced, "peak_src_row": peak_row, "live_kb": live_kb,
                                   "at_ns": ns_str(at_ns)}
