"""``/api/runs/{id}/systemview/…``: the timeline's System View — per rank, Overall Metrics (the Overlap Analysis
tree) and per-name summaries of the Python, CANN, Ascend Hardware and communication lanes, over the whole run or
``[start_ns, end_ns)`` (absolute epoch ns), and the slices behind any row (see ``server.queries.systemview``).
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
    page,
    pick_rank,
)
from ascendscope.server.queries import systemview as sv

router = APIRouter(prefix="/api/runs/{run_id}/systemview", tags=["systemview"])

PageP = Literal["overall", "python", "cann", "hardware", "communication"]
GroupByQ = Annotated[str | None, Query(max_length=32, description="hardware: name or task_type; else the default")]
KeyQ = Annotated[str, Query(min_length=1, max_length=20_000, description="a row's key, as its page gave it")]


def _rank(db, rank: int | None, page_name: str) -> tuple[int | None, list[dict]]:
    ranks = sv.ranks(db)
    return pick_rank(rank, [r["rank"] for r in ranks if page_name in r["pages"]]), ranks


@router.get("")
def systemview_ranks(db: RunDbDep) -> dict:
    """Ranks with slices, each with the pages it has data for."""
    return {"pages": list(sv.PAGES), "ranks": sv.ranks(db)}


@router.get("/{page_name}")
def systemview_page(db: RunDbDep, page_name: PageP, rank: RankQ = None, start_ns: AbsNsQ = None,
                    end_ns: AbsNsQ = None, group_by: GroupByQ = None, q: FilterQ = None, sort: SortQ = None,
                    order: OrderQ = None, offset: OffsetQ = 0, limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """``overall``: the Overall Metrics tree (ratios of E2E). Other pages: one page of rows (count, total, avg,
    min, max; ``self_ns`` on python and cann), filtered by ``q``, sorted by ``total`` (default), ``count``,
    ``avg``, ``min``, ``max``, ``self`` or ``name``, with ``totals`` over all rows."""
    rank, _ = _rank(db, rank, page_name)
    scope = sv.Scope(start_ns, end_ns)
    if rank is None:
        return {"rank": None, "page": page_name, "scope": scope.json(), "rows": [], "total": 0, "truncated": False}
    if page_name == "overall":
        return {"page": page_name} | sv.overall(db, rank, scope)
    return sv.grouped(db, page_name, rank, scope, group_by, q, sort, order, page(offset, limit))


@router.get("/{page_name}/slices")
def systemview_slices(db: RunDbDep, page_name: PageP, key: KeyQ, rank: RankQ = None, start_ns: AbsNsQ = None,
                      end_ns: AbsNsQ = None, group_by: GroupByQ = None, sort: SortQ = None, order: OrderQ = None,
                      offset: OffsetQ = 0, limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """The slices of one row in the scope (``time_ns``: the part inside it), sorted by ``duration`` (default),
    ``start`` or ``time``; ``ts_ns`` relative to ``origin_ns``."""
    rank, _ = _rank(db, rank, page_name)
    scope = sv.Scope(start_ns, end_ns)
    if rank is None:
        return {"rank": None, "page": page_name, "key": key, "rows": [], "total": 0, "truncated": False}
    return sv.slices(db, page_name, rank, scope, key, group_by, sort, order, page(offset, limit))
