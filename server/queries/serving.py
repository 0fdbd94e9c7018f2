"""Serving view: the requests, batches and KV cache of an LLM service (msServiceProfiler's output).

Contract: reads only the run-level ``serving_*`` tables (``ingest/serving.py``; in a sharded run's
``cluster.duckdb``); a run without them (or ingested before they existed) answers ``has_serving: false`` and
empty lists. A time range ``[start_ns, end_ns]`` (absolute epoch ns, both optional) filters every answer: requests
and batches that overlap it, KV-cache samples inside it; the latency percentiles are over the requests that
*arrived* in it. Percentiles are DuckDB's ``quantile_disc``: the nearest rank, the ⌈q·n⌉-th smallest value (a
real request's).
Absolute times leave as decimal strings (``ns_str``); offsets from ``origin_ns`` (the first arrival or batch) as
integer ns, which plotting takes directly. Lists are capped and say ``truncated``.

Why a request was slow (``reason``): ``preempted`` when it was prefilled again after it had decoded (its KV cache
was dropped and recomputed); otherwise the one of queue wait, prefill and decode that exceeds its median over the
requests by the most: ``queued``, ``long_prefill`` or ``long_decode``.
"""

from __future__ import annotations

from ascendscope.server.queries import ns_str, serving_more

MAX_REQUESTS = 5_000
MAX_BATCHES = 5_000
MAX_KV_POINTS = 20_000
MAX_RIDS_PER_BATCH = 64
SLOWEST = 20
CURVE_BUCKETS = 60
QUANTILES = (0.5, 0.9, 0.99)
METRICS = ("ttft_ns", "tpot_ns", "e2e_ns", "queue_ns")

HAVE_SQL = "SELECT table_name FROM information_schema.tables WHERE table_name = 'serving_requests'"
COUNTS_SQL = """
SELECT (SELECT count(*) FROM serving_requests), (SELECT count(DISTINCT (source, batch_id)) FROM serving_batches),
       (SELECT count(*) FROM serving_kvcache)
"""
EXTENT_SQL = """
SELECT min(t0), max(t1) FROM (
  SELECT min(arrival_ns) AS t0, max(coalesce(end_ns, arrival_ns)) AS t1 FROM serving_requests
  UNION ALL SELECT min(start_ns), max(coalesce(end_ns, start_ns)) FROM serving_batches
  UNION ALL SELECT min(ts_ns), max(ts_ns) FROM serving_kvcache)
"""
# a request overlaps [?, ?] (NULL: unbounded)
OVERLAP = ("(CAST(? AS BIGINT) IS NULL OR coalesce(end_ns, arrival_ns) >= ?) "
           "AND (CAST(? AS BIGINT) IS NULL OR arrival_ns <= ?)")
ARRIVED = "(CAST(? AS BIGINT) IS NULL OR arrival_ns >= ?) AND (CAST(? AS BIGINT) IS NULL OR arrival_ns <= ?)"
REQUESTS_SQL = f"""
SELECT source, rid, arrival_ns, end_ns, input_tokens, output_tokens, queue_ns, ttft_ns, prefill_ns, decode_ns,
       e2e_ns, tpot_ns, preempted, ttft_source
FROM serving_requests WHERE {OVERLAP} ORDER BY arrival_ns NULLS LAST, rid LIMIT ?
"""
COUNT_OVERLAP_SQL = f"SELECT count(*) FROM serving_requests WHERE {OVERLAP}"
PERCENTILES_SQL = f"""
SELECT count(*), {", ".join(f"quantile_disc({m}, {list(QUANTILES)})" for m in METRICS)},
       sum(output_tokens), sum(input_tokens), min(arrival_ns), max(end_ns),
       {", ".join(f"quantile_disc({m}, 0.5)" for m in ("queue_ns", "prefill_ns", "decode_ns"))},
       count(*) FILTER (WHERE preempted)
FROM serving_requests WHERE {ARRIVED}
"""
SLOWEST_SQL = f"""
SELECT rid, source, arrival_ns, e2e_ns, queue_ns, ttft_ns, prefill_ns, decode_ns, tpot_ns, output_tokens, preempted
FROM serving_requests WHERE {ARRIVED} AND e2e_ns IS NOT NULL ORDER BY e2e_ns DESC, rid LIMIT ?
"""
BATCH_OVERLAP = ("(CAST(? AS BIGINT) IS NULL OR coalesce(end_ns, start_ns) >= ?) "
                 "AND (CAST(? AS BIGINT) IS NULL OR start_ns <= ?)")
BATCHES_SQL = f"""
SELECT source, batch_id, min(start_ns) AS start_ns, max(coalesce(end_ns, start_ns)) AS end_ns,
       sum(dur_ns) FILTER (WHERE phase = 'exec') AS exec_ns, max(batch_size) AS batch_size,
       max(prefill_size) AS prefill_size, max(decode_size) AS decode_size, any_value(batch_type) AS batch_type,
       max(total_tokens) AS total_tokens
FROM serving_batches WHERE {BATCH_OVERLAP}
GROUP BY source, batch_id ORDER BY start_ns, source, batch_id LIMIT ?
"""
BATCH_RIDS_SQL = """
SELECT source, batch_id, list(rid ORDER BY rid) FROM serving_batch_requests
WHERE list_contains(?, batch_id) GROUP BY source, batch_id
"""
KV_SQL = """
SELECT source, ts_ns, free_blocks, used_blocks, total_blocks, usage_rate, name, rid FROM serving_kvcache
WHERE (CAST(? AS BIGINT) IS NULL OR ts_ns >= ?) AND (CAST(? AS BIGINT) IS NULL OR ts_ns <= ?)
ORDER BY ts_ns, source, src_row LIMIT ?
"""
KV_STATS_SQL = """
SELECT min(free_blocks), max(free_blocks), max(total_blocks), max(usage_rate), count(*) FROM serving_kvcache
"""
# per bucket of arrival: the latency percentiles; per bucket of end: finished requests and their output tokens
CURVE_SQL = f"""
SELECT (arrival_ns - ?) // ? AS b, count(*),
       {", ".join(f"quantile_disc({m}, {list(QUANTILES)})" for m in ("ttft_ns", "tpot_ns", "e2e_ns"))}
FROM serving_requests WHERE {ARRIVED} GROUP BY b ORDER BY b
"""
DONE_SQL = """
SELECT (end_ns - ?) // ? AS b, count(*), sum(output_tokens) FROM serving_requests
WHERE end_ns IS NOT NULL AND end_ns >= ? AND end_ns <= ? GROUP BY b ORDER BY b
"""


# the whole tables for the Python API (ascendscope.Run.requests / .batches): integer epoch ns
REQUEST_COLUMNS = ("source", "rid", "arrival_ns", "end_ns", "input_tokens", "output_tokens", "queue_ns", "ttft_ns",
                   "prefill_ns", "decode_ns", "e2e_ns", "tpot_ns", "cache_hit_rate", "ttft_source", "preempted")
BATCH_COLUMNS = ("source", "batch_id", "start_ns", "end_ns", "exec_ns", "batch_size", "prefill_size", "decode_size",
                 "batch_type", "total_tokens", "rids")
REQUEST_TABLE_SQL = f"""
SELECT {", ".join(REQUEST_COLUMNS)} FROM serving_requests WHERE {OVERLAP} ORDER BY arrival_ns NULLS LAST, source, rid
"""
BATCH_TABLE_SQL = f"""
WITH b AS ({BATCHES_SQL.replace("LIMIT ?", "")}),
r AS (SELECT source, batch_id, list(rid ORDER BY rid) AS rids FROM serving_batch_requests GROUP BY ALL)
SELECT {", ".join(f"b.{c}" if c != "rids" else "r.rids" for c in BATCH_COLUMNS)}
FROM b LEFT JOIN r USING (source, batch_id) ORDER BY b.start_ns, b.source, b.batch_id
"""


def one(db, sql: str, params: list | tuple = ()) -> tuple:
    """The first row (aggregates: always one); the plain runner of the Python API has no ``one``."""
    return db.rows(sql, params)[0]


def _range(start_ns: int | None, end_ns: int | None) -> list:
    return [start_ns, start_ns, end_ns, end_ns]


def has_serving(db) -> bool:
    """The tables exist (a run ingested before them has none) and hold a row (every run has them, empty)."""
    return bool(db.rows(HAVE_SQL)) and any(int(n) for n in one(db, COUNTS_SQL))


def _origin(db) -> tuple[int | None, int | None]:
    lo, hi = one(db, EXTENT_SQL)
    return (None if lo is None else int(lo)), (None if hi is None else int(hi))


def _empty() -> dict:
    return {"has_serving": False, "origin_ns": None}


def _rel(v, origin: int) -> int | None:
    return None if v is None else int(v) - origin


def _pcts(values) -> dict:
    values = list(values) if values is not None else [None] * len(QUANTILES)
    return {f"p{int(q * 100)}": (None if v is None else int(v)) for q, v in zip(QUANTILES, values)}


def reason(row: dict, medians: dict) -> str:
    """Why ``row`` (a request) was slow: see the module's contract."""
    if row.get("preempted"):
        return "preempted"
    best, excess = "long_decode", None
    for key, name in (("queue_ns", "queued"), ("prefill_ns", "long_prefill"), ("decode_ns", "long_decode")):
        v = row.get(key)
        if v is None:
            continue
        e = int(v) - int(medians.get(key) or 0)
        if excess is None or e > excess:
            best, excess = name, e
    return best


def summary(db, start_ns: int | None = None, end_ns: int | None = None) -> dict:
    """Counts, TTFT / TPOT / e2e / queue percentiles, throughput, KV-cache extremes, the slowest requests with
    their reason, and latency / throughput curves over time."""
    if not has_serving(db):
        return _empty()
    origin, last = _origin(db)
    n_req, n_batch, n_kv = one(db, COUNTS_SQL)
    row = one(db, PERCENTILES_SQL, _range(start_ns, end_ns))
    count = int(row[0])
    pct = {m: _pcts(v if count else None) for m, v in zip(METRICS, row[1:5])}
    out_tokens, in_tokens, first, final = row[5], row[6], row[7], row[8]
    medians = {"queue_ns": row[9], "prefill_ns": row[10], "decode_ns": row[11]}
    lo = start_ns if start_ns is not None else first
    hi = end_ns if end_ns is not None else final
    window = (int(hi) - int(lo)) if lo is not None and hi is not None and hi > lo else None
    slow = []
    for r in db.dicts(SLOWEST_SQL, [*_range(start_ns, end_ns), SLOWEST]):
        r["reason"] = reason(r, medians)
        r["arrival_ns"] = ns_str(r["arrival_ns"])
        slow.append(r)
    serving_more.annotate(db, slow)  # queue length and swaps while it ran, KV transfer (PD): the reason's evidence
    kv = one(db, KV_STATS_SQL)
    return {
        "has_serving": True, "origin_ns": ns_str(origin), "last_ns": ns_str(last),
        "range": {"start_ns": ns_str(start_ns), "end_ns": ns_str(end_ns)},
        "counts": {"requests": int(n_req), "batches": int(n_batch), "kvcache": int(n_kv), "in_range": count,
                   "preempted": int(row[12] or 0)},
        "percentiles": pct, "medians": {k: (None if v is None else int(v)) for k, v in medians.items()},
        "throughput": {"window_ns": window, "requests_per_s": _per_s(count, window),
                       "output_tokens_per_s": _per_s(out_tokens, window), "input_tokens": _int(in_tokens),
                       "output_tokens": _int(out_tokens)},
        "kvcache": {"min_free_blocks": _int(kv[0]), "max_free_blocks": _int(kv[1]), "total_blocks": _int(kv[2]),
                    "max_usage_rate": kv[3], "samples": int(kv[4])},
        "slowest": slow,
        "curves": curves(db, origin, lo, hi, start_ns, end_ns),
    }


def _int(v) -> int | None:
    return None if v is None else int(v)


def _per_s(n, window_ns) -> float | None:
    return None if n is None or not window_ns else float(n) * 1e9 / window_ns


def curves(db, origin: int, lo, hi, start_ns, end_ns) -> dict:
    """Per time bucket (offsets from ``origin``): TTFT / TPOT / e2e percentiles of the requests arriving in it,
    and the requests finished and output tokens per second."""
    if lo is None or hi is None:
        return {"bucket_ns": None, "t_ns": []}
    bucket = max(1, -(-(int(hi) - int(lo)) // CURVE_BUCKETS))
    lat = db.rows(CURVE_SQL, [int(lo), bucket, *_range(start_ns, end_ns)])
    done = {int(b): (int(n), int(t or 0)) for b, n, t in db.rows(DONE_SQL, [int(lo), bucket, int(lo), int(hi)])}
    # every bucket of the window, so the rates read 0 where nothing finished (not a line across the gap)
    keys = sorted(set(range(-(-(int(hi) - int(lo)) // bucket) + 1)) | {int(r[0]) for r in lat if r[0] is not None}
                  | set(done))
    by = {int(r[0]): r for r in lat if r[0] is not None}
    out: dict = {"bucket_ns": bucket, "t_ns": [int(lo) - origin + k * bucket for k in keys]}
    for i, m in enumerate(("ttft", "tpot", "e2e")):
        for j, q in enumerate(QUANTILES):
            out[f"{m}_p{int(q * 100)}"] = [_int(by[k][2 + i][j]) if k in by and by[k][2 + i] else None for k in keys]
    out["finished_per_s"] = [done.get(k, (0, 0))[0] * 1e9 / bucket for k in keys]
    out["output_tokens_per_s"] = [done.get(k, (0, 0))[1] * 1e9 / bucket for k in keys]
    return out


def requests(db, start_ns: int | None = None, end_ns: int | None = None, limit: int = MAX_REQUESTS) -> dict:
    """The requests overlapping the range, columnar: offsets from ``origin_ns`` and each phase's span."""
    if not has_serving(db):
        return {**_empty(), "rows": {}, "total": 0, "truncated": False}
    origin, _ = _origin(db)
    limit = max(1, min(int(limit), MAX_REQUESTS))
    rows = db.dicts(REQUESTS_SQL, [*_range(start_ns, end_ns), limit])
    total = int(one(db, COUNT_OVERLAP_SQL, _range(start_ns, end_ns))[0])
    cols: dict[str, list] = {k: [] for k in ("source", "rid", "arrival_ns", "arrival_off_ns", "end_off_ns",
                                             "input_tokens", "output_tokens", "queue_ns", "ttft_ns", "prefill_ns",
                                             "decode_ns", "e2e_ns", "tpot_ns", "preempted", "ttft_source")}
    for r in rows:
        for k in cols:
            if k == "arrival_ns":
                cols[k].append(ns_str(r[k]))
            elif k == "arrival_off_ns":
                cols[k].append(_rel(r["arrival_ns"], origin))
            elif k == "end_off_ns":
                cols[k].append(_rel(r["end_ns"], origin))
            else:
                cols[k].append(r[k])
    return {"has_serving": True, "origin_ns": ns_str(origin), "rows": cols, "total": total,
            "truncated": total > len(rows)}


def batches(db, start_ns: int | None = None, end_ns: int | None = None, limit: int = MAX_BATCHES) -> dict:
    """The batches overlapping the range (a batch: its forming and its model execution rows together), with the
    request ids they held (at most :data:`MAX_RIDS_PER_BATCH` each)."""
    if not has_serving(db):
        return {**_empty(), "rows": {}, "total": None, "truncated": False}
    origin, _ = _origin(db)
    limit = max(1, min(int(limit), MAX_BATCHES))
    rows = db.dicts(BATCHES_SQL, [*_range(start_ns, end_ns), limit + 1])
    truncated = len(rows) > limit
    rows = rows[:limit]
    rids = {}
    if rows:
        for source, bid, names in db.rows(BATCH_RIDS_SQL, [sorted({int(r["batch_id"]) for r in rows})]):
            rids[(source, int(bid))] = list(names)
    cols: dict[str, list] = {k: [] for k in ("source", "batch_id", "start_ns", "start_off_ns", "end_off_ns",
                                             "exec_ns", "batch_size", "prefill_size", "decode_size", "batch_type",
                                             "total_tokens", "rids", "rids_truncated")}
    for r in rows:
        names = rids.get((r["source"], int(r["batch_id"])), [])
        values = {**r, "start_ns": ns_str(r["start_ns"]), "start_off_ns": _rel(r["start_ns"], origin),
                  "end_off_ns": _rel(r["end_ns"], origin), "rids": names[:MAX_RIDS_PER_BATCH],
                  "rids_truncated": len(names) > MAX_RIDS_PER_BATCH}
        for k in cols:
            cols[k].append(values.get(k))
    return {"has_serving": True, "origin_ns": ns_str(origin), "rows": cols, "truncated": truncated}


def more(db, part: str, start_ns: int | None = None, end_ns: int | None = None) -> dict:
    """One of ``serving_more``'s answers (``forward``, ``queues``, ``pd``, ``coordinator``), offsets from this
    view's origin."""
    if not has_serving(db):
        return {**_empty(), "rows": {}, "truncated": False}
    origin, _ = _origin(db)
    return {"has_serving": True, "origin_ns": ns_str(origin),
            **getattr(serving_more, part)(db, origin, start_ns, end_ns)}


def kvcache(db, start_ns: int | None = None, end_ns: int | None = None, limit: int = MAX_KV_POINTS) -> dict:
    """The KV-cache samples in the range: blocks free (``device_kvcache_left``) and used, and the usage rate."""
    if not has_serving(db):
        return {**_empty(), "rows": {}, "truncated": False}
    origin, _ = _origin(db)
    limit = max(1, min(int(limit), MAX_KV_POINTS))
    rows = db.rows(KV_SQL, [*_range(start_ns, end_ns), limit + 1])
    truncated = len(rows) > limit
    rows = rows[:limit]
    names = ("source", "ts_off_ns", "free_blocks", "used_blocks", "total_blocks", "usage_rate", "name", "rid")
    cols: dict[str, list] = {k: [] for k in names}
    for r in rows:
        for k, v in zip(names, (r[0], _rel(r[1], origin), *r[2:])):
            cols[k].append(v)
    return {"has_serving": True, "origin_ns": ns_str(origin), "rows": cols, "truncated": truncated}


def table_rows(db, which: str, start_ns: int | None = None, end_ns: int | None = None) -> tuple[tuple, list]:
    """(columns, row dicts) of every request (``which="requests"``) or batch (``"batches"``) overlapping the range,
    times as integer epoch ns; no rows for a run without serving tables."""
    columns = REQUEST_COLUMNS if which == "requests" else BATCH_COLUMNS
    if not db.rows(HAVE_SQL):
        return columns, []
    return columns, db.dicts(REQUEST_TABLE_SQL if which == "requests" else BATCH_TABLE_SQL, _range(start_ns, end_ns))
