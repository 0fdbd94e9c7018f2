"""Serving view, the engine and PD-disaggregation side: forward passes per card, queue sizes, each request's
path through a prefill and a decode instance, and the coordinator's routing (``ingest/readers/serving_more.py``).

Contract as ``server/queries/serving.py``: run-level ``serving_*`` tables (a run ingested before they existed has
none: empty answers), a time range ``[start_ns, end_ns]`` in absolute epoch ns filters every answer (rows that
overlap it), times leave as offsets from the caller's ``origin_ns`` (integer ns), lists are capped and say
``truncated``.

PD per request (``pd``): ``send_ns`` = sent successfully − sending began (handing the request to the decode
instance), ``kv_transfer_ns`` = Σ ``pd_split_kvcache`` durations of the rid (pulling its KV cache),
``prefill_ns`` = prefill result − arrival (on the prefill instance), ``decode_ns`` = end − prefill result.
"""

from __future__ import annotations

MAX_FORWARDS = 20_000
MAX_STATUS = 20_000
MAX_PD = 5_000
MAX_COORDINATOR = 5_000

TABLES_SQL = "SELECT table_name FROM information_schema.tables WHERE starts_with(table_name, 'serving_')"
RANGE = "(CAST(? AS BIGINT) IS NULL OR {end} >= ?) AND (CAST(? AS BIGINT) IS NULL OR {start} <= ?)"
FORWARD_SQL = f"""
SELECT coalesce(hostname, '') AS hostname, coalesce(prof_id, '') AS prof_id, coalesce(dp_rank, '') AS dp_rank,
       start_ns - ? AS start_off_ns, coalesce(end_ns, start_ns) - ? AS end_off_ns, dur_ns, bubble_ns, batch_size,
       batch_type, forward_iter
FROM serving_forward WHERE {RANGE.format(end="coalesce(end_ns, start_ns)", start="start_ns")}
ORDER BY start_ns, hostname, prof_id LIMIT ?
"""
FORWARD_LANES_SQL = f"""
SELECT coalesce(hostname, '') AS hostname, coalesce(prof_id, '') AS prof_id, coalesce(dp_rank, '') AS dp_rank,
       count(*) AS forwards, sum(dur_ns) AS busy_ns, sum(bubble_ns) AS bubble_ns, max(bubble_ns) AS max_bubble_ns
FROM serving_forward WHERE {RANGE.format(end="coalesce(end_ns, start_ns)", start="start_ns")}
GROUP BY ALL ORDER BY hostname, prof_id, dp_rank
"""
STATUS_SQL = f"""
SELECT ts_ns - ? AS ts_off_ns, queue, sum(size) AS size FROM serving_request_status
WHERE {RANGE.format(end="ts_ns", start="ts_ns")} GROUP BY ts_ns, queue ORDER BY ts_ns, queue LIMIT ?
"""
PD_SQL = f"""
WITH kv AS (SELECT rid, sum(dur_ns) AS kv_transfer_ns, max(seq_len) AS seq_len FROM serving_pd_kvcache GROUP BY rid)
SELECT p.rid, p.http_req_ns - ? AS arrival_off_ns, p.send_succ_ns - p.send_ns AS send_ns,
       p.prefill_res_ns - p.http_req_ns AS prefill_ns, kv.kv_transfer_ns, p.end_ns - p.prefill_res_ns AS decode_ns,
       p.end_ns - p.http_req_ns AS e2e_ns, kv.seq_len
FROM serving_pd_requests p LEFT JOIN kv USING (rid)
WHERE {RANGE.format(end="coalesce(p.end_ns, p.http_req_ns)", start="p.http_req_ns")}
ORDER BY p.http_req_ns, p.rid LIMIT ?
"""
COORDINATOR_SQL = f"""
SELECT ts_ns - ? AS ts_off_ns, address, node_type, add_count, end_count, running_count FROM serving_coordinator
WHERE {RANGE.format(end="ts_ns", start="ts_ns")} ORDER BY ts_ns, address, node_type LIMIT ?
"""
# per slow request: the longest waiting queue while it waited, the most swapped-out requests while it ran, and its
# KV-cache transfer (PD disaggregation)
ANNOTATE_SQL = """
WITH r AS (SELECT unnest(?) AS rid)
SELECT r.rid,
       (SELECT max(s.size) FROM serving_request_status s, serving_requests q WHERE q.rid = r.rid
          AND s.queue = 'waiting' AND s.ts_ns BETWEEN q.arrival_ns AND q.arrival_ns + coalesce(q.queue_ns, 0)),
       (SELECT max(s.size) FROM serving_request_status s, serving_requests q WHERE q.rid = r.rid
          AND s.queue = 'swapped' AND s.ts_ns BETWEEN q.arrival_ns AND coalesce(q.end_ns, q.arrival_ns)),
       (SELECT sum(k.dur_ns) FROM serving_pd_kvcache k WHERE k.rid = r.rid)
FROM r
"""


def _tables(db) -> set[str]:
    return {r[0] for r in db.rows(TABLES_SQL)}


def _range(start_ns, end_ns) -> list:
    return [start_ns, start_ns, end_ns, end_ns]


def _columnar(rows: list[dict], names: tuple[str, ...]) -> dict[str, list]:
    return {k: [r.get(k) for r in rows] for k in names}


def _capped(db, sql: str, params: list, limit: int) -> tuple[list[dict], bool]:
    rows = db.dicts(sql, [*params, limit + 1])
    return rows[:limit], len(rows) > limit


def forward(db, origin: int, start_ns=None, end_ns=None) -> dict:
    """Each card's forward passes (offsets from ``origin``) and per card: passes, busy time, bubbles."""
    if "serving_forward" not in _tables(db):
        return {"rows": {}, "lanes": [], "truncated": False}
    rows, truncated = _capped(db, FORWARD_SQL, [origin, origin, *_range(start_ns, end_ns)], MAX_FORWARDS)
    lanes = db.dicts(FORWARD_LANES_SQL, _range(start_ns, end_ns))
    names = ("hostname", "prof_id", "dp_rank", "start_off_ns", "end_off_ns", "dur_ns", "bubble_ns", "batch_size",
             "batch_type", "forward_iter")
    return {"rows": _columnar(rows, names), "lanes": lanes, "truncated": truncated}


def queues(db, origin: int, start_ns=None, end_ns=None) -> dict:
    """Queue sizes over time (``request_status``): waiting, running, swapped (summed over processes)."""
    if "serving_request_status" not in _tables(db):
        return {"rows": {}, "truncated": False}
    rows, truncated = _capped(db, STATUS_SQL, [origin, *_range(start_ns, end_ns)], MAX_STATUS)
    return {"rows": _columnar(rows, ("ts_off_ns", "queue", "size")), "truncated": truncated}


def pd(db, origin: int, start_ns=None, end_ns=None) -> dict:
    """Each request's prefill-instance and decode-instance spans and its KV-cache transfer (see the contract)."""
    if "serving_pd_requests" not in _tables(db):
        return {"rows": {}, "truncated": False}
    rows, truncated = _capped(db, PD_SQL, [origin, *_range(start_ns, end_ns)], MAX_PD)
    names = ("rid", "arrival_off_ns", "send_ns", "prefill_ns", "kv_transfer_ns", "decode_ns", "e2e_ns", "seq_len")
    return {"rows": _columnar(rows, names), "truncated": truncated}


def coordinator(db, origin: int, start_ns=None, end_ns=None) -> dict:
    """Requests routed to each prefill / decode instance per window (``coordinator.csv``)."""
    if "serving_coordinator" not in _tables(db):
        return {"rows": {}, "truncated": False}
    rows, truncated = _capped(db, COORDINATOR_SQL, [origin, *_range(start_ns, end_ns)], MAX_COORDINATOR)
    names = ("ts_off_ns", "address", "node_type", "add_count", "end_count", "running_count")
    return {"rows": _columnar(rows, names), "truncated": truncated}


def annotate(db, slow: list[dict]) -> None:
    """Add to each slow request ``waiting_max`` (the longest waiting queue while it waited), ``swapped_max`` (the
    most requests swapped out while it ran) and ``kv_transfer_ns`` (None where the files are absent)."""
    need = {"serving_request_status", "serving_pd_kvcache"}
    if not slow or not need <= _tables(db):
        for r in slow:
            r.update(waiting_max=None, swapped_max=None, kv_transfer_ns=None)
        return
    got = {rid: (w, s, k) for rid, w, s, k in db.rows(ANNOTATE_SQL, [[r["rid"] for r in slow]])}
    for r in slow:
        w, s, k = got.get(r["rid"], (None, None, None))
        r.update(waiting_max=None if w is None else int(w), swapped_max=None if s is None else int(s),
                 kv_transfer_ns=None if k is None else int(k))
