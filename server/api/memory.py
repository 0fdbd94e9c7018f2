"""``/api/runs/{id}/memory/…``: memory curves per Group By (overall / stream / component; down-sampled on the server
above ``max_points``), reserved memory per CANN module, and the operator allocations (filter by name, window or
instant; CSV twin). The overview says, for a section without rows, which file or table would have fed it.

Curve times are ``t_ns`` relative to ``origin_ns`` (a decimal string): the run's time zero, or for a run without a
trace the earliest memory record. Query times (``start_ns``, ``end_ns``, ``at_ns``) are absolute epoch ns.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import (
    DEFAULT_LIMIT,
    AbsNsQ,
    FilterQ,
    LimitQ,
    OffsetQ,
    OrderQ,
    RankQ,
    SortQ,
    csv_response,
    origin_ns,
    page,
    pick_rank,
)
from ascendscope.server.queries import memory as mq
from ascendscope.server.queries import sources

router = APIRouter(prefix="/api/runs/{run_id}/memory", tags=["memory"])

ORIGIN_SQL = "SELECT min(timestamp_ns) FROM memory_record"
MaxPointsQ = Annotated[int, Query(ge=16, le=mq.MAX_MAX_POINTS, description="down-sample above this many points")]
GroupQ = Annotated[Literal["overall", "stream", "component"],
                   Query(description="overall (allocator totals), stream (operator allocations per stream) or "
                                     "component (reserved per component and CANN module)")]


def _rank(db, rank: int | None, field: str = "records") -> tuple[int | None, list[dict]]:
    ranks = mq.ranks(db)
    return pick_rank(rank, [r["rank"] for r in ranks if r[field]]), ranks


@router.get("")
def memory_overview(db: RunDbDep, rank: RankQ = None) -> dict:
    """Ranks with memory data; for one rank its components, peaks, the peak allocation and load warnings, which
    Group By choices it has data for (``groups``), and for each section without rows the file or table that would
    have fed it (``empty_sources``)."""
    rank, ranks = _rank(db, rank)
    if rank is None:
        rank, _ = _rank(db, None, "allocations")
    out = {"ranks": ranks, "rank": rank, "origin_ns": str(origin_ns(db, ORIGIN_SQL))}
    if rank is None:
        why = sources.explain(db, "memory")
        unavailable = {"available": False, "reason": "no rank of this run has memory data"}
        return out | {"components": [], "peak_allocation": None, "warnings": [], "has_trace": False,
                      "empty_sources": why, "groups": {g: unavailable for g in mq.GROUPS}}
    return out | mq.overview(db, rank)


@router.get("/curves")
def memory_curves(db: RunDbDep, rank: RankQ = None, start_ns: AbsNsQ = None, end_ns: AbsNsQ = None,
                  max_points: MaxPointsQ = mq.DEFAULT_MAX_POINTS, group: GroupQ = "overall") -> dict:
    """The series of one Group By over time, each with its legend ``name``: ``overall`` Total Allocated /
    Reserved / Active per memory_record component; ``stream`` per stream the operator allocations (operator_memory)
    not yet released (allocated) or returned to the allocator (active); ``component`` reserved per memory_record
    component and CANN module. ``downsampled`` says when rows were thinned (first, last, min and max per bucket
    are kept), ``source_points`` how many there were. Each series' ``peak`` (its maximum and the earliest time it
    is reached) is exact either way. A client asks for about four points per pixel of its chart."""
    rank, _ = _rank(db, rank)
    if rank is None and group != "overall":
        rank, _ = _rank(db, None, "allocations" if group == "stream" else "modules")
    origin = origin_ns(db, ORIGIN_SQL)
    if rank is None:
        return {"rank": None, "group": group, "origin_ns": str(origin), "series": [], "source_points": 0,
                "points": 0, "downsampled": False}
    return mq.curves(db, rank, origin, start_ns, end_ns, max_points, group)


@router.get("/modules")
def memory_modules(db: RunDbDep, rank: RankQ = None, max_points: MaxPointsQ = mq.DEFAULT_MAX_POINTS) -> dict:
    """Reserved memory per CANN module (npu_module_mem.csv, or the db export's NPU_MODULE_MEM: ``source`` names the
    rank's); modules that never reserve memory are left out."""
    rank, _ = _rank(db, rank, "modules")
    origin = origin_ns(db, ORIGIN_SQL)
    if rank is None:
        return {"rank": None, "origin_ns": str(origin), "series": [], "modules": 0, "truncated": False,
                "source_points": 0, "points": 0, "downsampled": False, "source": None}
    return mq.modules(db, rank, origin, max_points)


@router.get("/allocations")
def memory_allocations(db: RunDbDep, rank: RankQ = None, q: FilterQ = None, start_ns: AbsNsQ = None,
                       end_ns: AbsNsQ = None, at_ns: AbsNsQ = None, sort: SortQ = None, order: OrderQ = None,
                       offset: OffsetQ = 0, limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """Operator allocations (operator_memory.csv). ``start_ns``/``end_ns``: allocated or released in that window;
    ``at_ns``: live at that instant (``live_kb`` sums them). The peak row has ``is_peak``. Sort by ``name``,
    ``size``, ``allocation_time``, ``release_time``, ``active_release_time``, ``duration``, ``active_duration``,
    ``allocation_total_allocated``, ``allocation_total_reserved``, ``release_total_allocated``."""
    rank, _ = _rank(db, rank, "allocations")
    if rank is None:
        return {"rows": [], "total": 0, "offset": offset, "limit": limit, "truncated": False, "has_trace": False}
    return mq.allocations(db, db.run.id, rank, q, sort, order, page(offset, limit), start_ns, end_ns, at_ns)


@router.get("/allocations.csv")
def memory_allocations_csv(db: RunDbDep, rank: RankQ = None, q: FilterQ = None, start_ns: AbsNsQ = None,
                           end_ns: AbsNsQ = None, at_ns: AbsNsQ = None, sort: SortQ = None, order: OrderQ = None):
    """The allocations of the current filter as CSV."""
    rank, _ = _rank(db, rank, "allocations")
    result = mq.allocations(db, db.run.id, -1 if rank is None else rank, q, sort, order, None, start_ns,
                            end_ns, at_ns, csv=True)
    return csv_response(result, f"{db.run.id}_rank{rank}_operator_memory.csv")
