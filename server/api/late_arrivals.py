"""``/api/runs/{id}/late_arrivals/…``: who made each collective wait (``server/queries/late_arrivals.py``).

Every endpoint reads the run's ``cluster_collectives`` table (in a sharded run's ``cluster.duckdb``), except
``instance?kernels=true``, which also lists the late rank's kernels and host calls from its own slices: pass that
rank as ``rank`` so that a big sharded run loads its shard.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import RANK_MAX, ApiError, Int64, fast_json
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import (
    DEFAULT_LIMIT,
    LimitQ,
    OffsetQ,
    OrderQ,
    SortQ,
    StepQ,
    csv_response,
    page,
)
from ascendscope.server.queries import MAX_CSV_ROWS, csv_text
from ascendscope.server.queries import late_arrivals as la

router = APIRouter(prefix="/api/runs/{run_id}/late_arrivals", tags=["late arrivals"])

GroupQ = Annotated[str, Query(max_length=256, description="the instance's communication group id")]
OpQ = Annotated[str, Query(max_length=256, description="the op name, e.g. hcom_allReduce__586_0_1")]
SeqQ = Annotated[int, Query(ge=0, le=2 ** 31 - 1, description="the occurrence of the op name in the group")]
WaitersQ = Annotated[str | None, Query(max_length=4000, description="comma-separated ranks whose waiting ops to "
                                                                   "return (the ranks shown)")]


@router.get("/steps")
@fast_json
def late_steps(db: RunDbDep) -> dict:
    """The steps that ran collectives: instances, total wait, the part caused by a late rank."""
    return la.steps(db)


@router.get("/table")
@fast_json
def late_table(db: RunDbDep, step: StepQ = None, sort: SortQ = None, order: OrderQ = None, offset: OffsetQ = 0,
               limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """One step's collective instances: the last rank, its lead over the next, the wait it caused and why
    (sort: ``wait_caused``, ``lead``, ``max_wait``, ``ranks``, ``start``)."""
    return la.table(db, step, page(offset, limit), sort, order)


@router.get("/table.csv")
def late_table_csv(db: RunDbDep, step: StepQ = None):
    """The step's instances as CSV (at most 100,000; ``X-Truncated`` says when there were more)."""
    rows = la.table_csv_rows(db, step, MAX_CSV_ROWS + 1)
    return csv_response(csv_text(la.CSV_COLUMNS, rows), f"{db.run.id}_late_arrivals.csv")


@router.get("/instance")
@fast_json
def late_instance(db: RunDbDep, group_id: GroupQ, op_name: OpQ, seq: SeqQ = 0, kernels: bool = False,
                  rank: Annotated[Int64 | None, Query(description="the instance's last rank (loads its shard "
                                                                   "for kernels=true)")] = None) -> dict:
    """One instance: every rank's arrival and wait, the cause, and (``kernels``) what the late rank ran in its
    window."""
    out = la.instance(db, group_id, op_name, seq, kernels=kernels)
    if rank is not None and out.get("available") and out["last_rank"] != rank:
        raise ApiError(400, "not_last_rank", f"rank {rank} is not this instance's last rank ({out['last_rank']})")
    return out


@router.get("/of_slice")
@fast_json
def late_of_slice(db: RunDbDep, slice_id: Annotated[Int64, Query(description="a collective op's slice id")]) -> dict:
    """The instance the collective op ``slice_id`` belongs to (its last rank, lead, wait caused and cause), and
    that op's own wait; ``instance`` null for a slice that is no collective of two ranks or more."""
    return la.of_slice(db, slice_id)


@router.get("/totals")
@fast_json
def late_totals(db: RunDbDep, step: StepQ = None,
                limit: Annotated[int, Query(ge=1, le=la.MAX_TOTAL_ROWS)] = la.MAX_TOTAL_ROWS) -> dict:
    """Per rank (columnar, most caused first): wait caused as the last rank, wait suffered, times last."""
    return la.totals(db, step, limit)


@router.get("/chains")
@fast_json
def late_chains(db: RunDbDep, start_ns: Int64, end_ns: Int64, waiters: WaitersQ = None) -> dict:
    """The wait chains to draw on the timeline in ``[start_ns, end_ns]`` (absolute ns): per instance, the last
    rank's op and the ops of ``waiters`` with their wait."""
    given = [r.strip() for r in (waiters or "").split(",") if r.strip()]
    if not all(r.isascii() and r.isdigit() and int(r) <= RANK_MAX for r in given):
        raise ApiError(422, "invalid_parameter", f"waiters must be comma-separated rank numbers (0 to {RANK_MAX})",
                       parameter="waiters")
    ranks = [int(r) for r in given]
    return la.chains(db, start_ns, end_ns, ranks)
