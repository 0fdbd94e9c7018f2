"""``/api/runs/{id}/advice``: expert advice over one rank (and the cross-rank findings) — host-bound steps,
exposed communication, slow rank and slow links, AI_CPU kernels, affinity APIs, fusible kernel runs and dispatch
gaps — each finding with its numbers, where they come from, and instances linked to their timeline slices."""

from __future__ import annotations

from fastapi import APIRouter

from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import RankQ
from ascendscope.server.queries import advice as aq
from ascendscope.server.queries import ns_str

router = APIRouter(prefix="/api/runs/{run_id}/advice", tags=["advice"])


@router.get("")
def run_advice(db: RunDbDep, rank: RankQ = None) -> dict:
    """Findings of ``rank`` (default: the first rank) plus the cross-rank ones (``rank`` null), grouped by
    ``category``; each has ``severity``, ``title``, ``text``, ``metrics``, ``source`` and at most
    200 ``instances`` (``instance_count`` says how many there are). ``origin_ns`` is the run's time zero."""
    out = aq.advice(db, db.run.id, rank)
    out["origin_ns"] = ns_str(db.info.origin_ns)
    return out
