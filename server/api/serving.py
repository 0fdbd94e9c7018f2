"""``/api/runs/{id}/serving/…``: an LLM service's requests, batches and KV cache (msServiceProfiler's output),
answered from the run-level ``serving_*`` tables (``server/queries/serving.py``). ``start_ns`` / ``end_ns``
(absolute epoch ns) filter every answer to a time range; a run without serving data answers
``has_serving: false``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import fast_json
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import AbsNsQ
from ascendscope.server.queries import serving as sv

router = APIRouter(prefix="/api/runs/{run_id}/serving", tags=["serving"])

RequestLimitQ = Annotated[int, Query(ge=1, le=sv.MAX_REQUESTS, description="at most this many requests")]
BatchLimitQ = Annotated[int, Query(ge=1, le=sv.MAX_BATCHES, description="at most this many batches")]
KvLimitQ = Annotated[int, Query(ge=1, le=sv.MAX_KV_POINTS, description="at most this many samples")]


@router.get("/summary")
@fast_json
def serving_summary(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None) -> dict:
    """Counts; TTFT, TPOT, end-to-end and queue-wait percentiles (p50/p90/p99, ns) of the requests arriving in the
    range; throughput; KV-cache extremes; the slowest requests with why (queued, long prefill, long decode,
    preempted); latency and throughput curves over time."""
    return sv.summary(db, start_ns, end_ns)


@router.get("/requests")
@fast_json
def serving_requests(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None,
                     limit: RequestLimitQ = sv.MAX_REQUESTS) -> dict:
    """The requests overlapping the range (columnar): arrival, queue wait, prefill, decode, TTFT, TPOT, e2e."""
    return sv.requests(db, start_ns, end_ns, limit)


@router.get("/batches")
@fast_json
def serving_batches(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None,
                    limit: BatchLimitQ = sv.MAX_BATCHES) -> dict:
    """The batches overlapping the range (columnar): size, prefill / decode mix, model execution time and the
    request ids each held."""
    return sv.batches(db, start_ns, end_ns, limit)


@router.get("/kvcache")
@fast_json
def serving_kvcache(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None,
                    limit: KvLimitQ = sv.MAX_KV_POINTS) -> dict:
    """The KV-cache samples in the range: blocks left, blocks used, usage rate."""
    return sv.kvcache(db, start_ns, end_ns, limit)


@router.get("/forward")
@fast_json
def serving_forward(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None) -> dict:
    """Each card's model forward passes in the range (``forward.csv``) and per card: passes, busy time, bubbles."""
    return sv.more(db, "forward", start_ns, end_ns)


@router.get("/queues")
@fast_json
def serving_queues(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None) -> dict:
    """Waiting, running and swapped queue sizes over time (``request_status``)."""
    return sv.more(db, "queues", start_ns, end_ns)


@router.get("/pd")
@fast_json
def serving_pd(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None) -> dict:
    """PD disaggregation per request: prefill on its prefill instance, hand-over, KV-cache transfer, decode."""
    return sv.more(db, "pd", start_ns, end_ns)


@router.get("/coordinator")
@fast_json
def serving_coordinator(db: RunDbDep, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None) -> dict:
    """Requests routed to each prefill / decode instance per window (``coordinator.csv``)."""
    return sv.more(db, "coordinator", start_ns, end_ns)
