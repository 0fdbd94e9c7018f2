"""Advice for an LLM service (the run-level ``serving_*`` tables): one analyzer, three rules.

* ``queue_dominates_ttft``: the requests spent more than :data:`QUEUE_SHARE` of their time to first token waiting
  in the queue (Σ queue / Σ TTFT), so prefill is not what makes the first token late: admission is.
* ``kvcache_exhausted``: the KV cache's free blocks fell to :data:`KV_LOW_SHARE` of its size or below (the size:
  ``total_blocks`` when the file has it, else the most blocks ever seen free, as msServiceProfiler estimates it).
* ``decode_batches_small``: decode batches averaged fewer than :data:`DECODE_MIN_BATCH` requests while requests
  queued (Σ queue / Σ TTFT above :data:`DECODE_QUEUE_SHARE`): the engine ran few requests at a time although
  more waited.

``findings(db)`` returns them as the Advice view's findings (category ``serving``); each names its numbers and
the requests or moments it rests on (no timeline slice: serving rows are not NPU events).
"""

from __future__ import annotations

from ascendscope.server.queries import ns_str
from ascendscope.server.queries import serving as sv
from ascendscope.server.queries.serving import one

CATEGORY = ("serving", "Serving (LLM inference)",
            "Request queueing, KV cache and batch sizes of a service profiled with msServiceProfiler")
QUEUE_SHARE = 0.5
KV_LOW_SHARE = 0.05
DECODE_MIN_BATCH = 4.0
DECODE_QUEUE_SHARE = 0.2
MAX_INSTANCES = 20

SHARES_SQL = """
SELECT sum(queue_ns), sum(ttft_ns), count(*) FROM serving_requests
WHERE queue_ns IS NOT NULL AND ttft_ns IS NOT NULL AND ttft_ns > 0
"""
TOP_QUEUED_SQL = """
SELECT rid, arrival_ns, queue_ns, ttft_ns FROM serving_requests WHERE queue_ns IS NOT NULL
ORDER BY queue_ns DESC, rid LIMIT ?
"""
KV_SQL = "SELECT min(free_blocks), max(free_blocks), max(total_blocks), count(*) FROM serving_kvcache"
KV_LOW_SQL = """
SELECT ts_ns, free_blocks, rid, name FROM serving_kvcache WHERE free_blocks <= ? ORDER BY free_blocks, ts_ns LIMIT ?
"""
# a batch's size from its rows (forming and execution carry the same); decode batches: no prefill in them
DECODE_SQL = """
SELECT avg(size), count(*) FROM (
  SELECT source, batch_id, max(batch_size) AS size, max(prefill_size) AS p, max(decode_size) AS d,
         lower(any_value(batch_type)) AS t
  FROM serving_batches GROUP BY source, batch_id)
WHERE coalesce(p = 0 AND d > 0, t = 'decode')
"""


def _inst(name: str, ts_ns, dur_ns, **extra) -> dict:
    return {"slice_id": None, "rank": None, "name": name, "ts_ns": ns_str(ts_ns),
            "dur_ns": None if dur_ns is None else int(dur_ns), **extra}


def _finding(key: str, severity: str, title: str, text: str, metrics: dict, instances: list[dict]) -> dict:
    return {"id": f"serving:all:{key}", "category": CATEGORY[0], "severity": severity, "title": title, "text": text,
            "rank": None, "step": None, "metrics": metrics,
            "source": {"tables": ["serving_requests", "serving_batches", "serving_kvcache"],
                       "files": ["request.csv", "batch.csv", "kvcache.csv", "profiler.db"]},
            "instances": instances[:MAX_INSTANCES], "instance_count": len(instances),
            "instances_truncated": False}


def findings(db) -> list[dict]:
    if not sv.has_serving(db):
        return []
    out = []
    queue, ttft, n = one(db, SHARES_SQL)
    share = (int(queue) / int(ttft)) if n and ttft else None
    if share is not None and share > QUEUE_SHARE:
        top = [_inst(rid, a, q, ttft_ns=int(t) if t is not None else None)
               for rid, a, q, t in db.rows(TOP_QUEUED_SQL, [MAX_INSTANCES])]
        out.append(_finding(
            "queue_dominates_ttft", "critical" if share > 0.7 else "warning", "Queueing dominates time to first token",
            f"Over {n} requests, {share:.0%} of the time to first token was spent waiting in the queue, not in "
            "prefill. Admission is the bottleneck: more instances or a larger batch (max batch size, max prefill "
            "tokens), a larger KV cache (more blocks: memory fraction, shorter max sequence), or less load.",
            {"queue_share": share, "queue_ns": int(queue), "ttft_ns": int(ttft), "requests": int(n)}, top))
    low_free, high_free, total, samples = one(db, KV_SQL)
    size = total if total is not None else high_free
    if samples and low_free is not None and size:
        limit = int(size * KV_LOW_SHARE)
        if int(low_free) <= limit:
            moments = [_inst(f"{name or 'KV cache'} ({rid})" if rid else (name or "KV cache"), ts, None,
                             free_blocks=int(free)) for ts, free, rid, name in db.rows(KV_LOW_SQL, [limit,
                                                                                                    MAX_INSTANCES])]
            out.append(_finding(
                "kvcache_exhausted", "critical" if int(low_free) == 0 else "warning", "KV cache nearly exhausted",
                f"The KV cache fell to {int(low_free)} free blocks of {int(size)} "
                f"({'from the file' if total is not None else 'the most seen free'}). New requests wait for blocks "
                "and running ones may be preempted: give the cache more memory, shorten max sequence lengths, or "
                "admit fewer concurrent requests.",
                {"min_free_blocks": int(low_free), "total_blocks": int(size), "threshold_blocks": limit}, moments))
    mean, count = one(db, DECODE_SQL)
    if count and mean is not None and float(mean) < DECODE_MIN_BATCH and share is not None \
            and share > DECODE_QUEUE_SHARE:
        out.append(_finding(
            "decode_batches_small", "warning", "Decode batches are small while requests queue",
            f"The {int(count)} decode batches held {float(mean):.1f} requests on average while {share:.0%} of the "
            "time to first token was queueing. Decode steps cost little more with more requests: raise the "
            "maximum batch size or the KV-cache size so more requests decode together.",
            {"mean_decode_batch": float(mean), "decode_batches": int(count), "queue_share": share}, []))
    return out
