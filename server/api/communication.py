"""``/api/runs/{id}/communication/…``: filters and findings, per-rank totals, the op table (linked to the
timeline when the rank has a trace; CSV twin), bandwidth per transport with packet sizes, the rank × rank
matrix, and an op thumbnail per rank.

``step`` is the source's step key (``step50``), ``group`` an HCCL group id, ``op`` one op name.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import Int64
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import (
    DEFAULT_LIMIT,
    FilterQ,
    LimitQ,
    OffsetQ,
    OrderQ,
    SortQ,
    csv_response,
    origin_ns,
    page,
)
from ascendscope.server.queries import communication as cq
from ascendscope.server.queries import sources

router = APIRouter(prefix="/api/runs/{run_id}/communication", tags=["communication"])

ORIGIN_SQL = "SELECT min(start_ns) FROM comm_ops"
StepKeyQ = Annotated[str | None, Query(max_length=64, description="step key, e.g. step50")]
GroupQ = Annotated[str | None, Query(max_length=64, description="HCCL group id")]
OpQ = Annotated[str | None, Query(max_length=256, description="one op name")]
CommRankQ = Annotated[Int64 | None, Query(description="one rank; default: all ranks")]
CommTypeQ = Annotated[Literal["collective", "p2p"] | None, Query(description="collective or p2p")]


@router.get("")
def communication_overview(db: RunDbDep, step: StepKeyQ = None, group: GroupQ = None, op: OpQ = None) -> dict:
    """Steps, groups, op names and matrix keys to filter on; per-rank totals, slow ranks and slow links; for the
    ranks without ops or matrix links, the file or table that would have fed them (``empty_sources``); the ranks
    whose ops came from the trace's communication lanes, with their elapse only (``from_trace_ranks``), and the
    file or table they lacked (``from_trace_lacks``: communication.json, or analysis.db's CommAnalyzerTime)."""
    out = cq.overview(db, step, group)
    out["empty_sources"] = sources.explain(db, "communication")
    out["from_trace_ranks"] = sources.from_trace(db, "comm_ops")  # elapse only: no communication.json
    out["from_trace_lacks"] = sources.lacked_by(db, "comm_ops", out["from_trace_ranks"])
    out["totals"] = cq.rank_totals(db, step, group, op)
    out["slow_links"] = cq.slow_links(db, step, group)
    return out


@router.get("/ranks")
def communication_ranks(db: RunDbDep, step: StepKeyQ = None, group: GroupQ = None, op: OpQ = None) -> dict:
    """Per rank: Elapse, Transit, Wait, Synchronization, Idle, both ratios, bandwidth per transport; slow ranks."""
    return cq.rank_totals(db, step, group, op)


@router.get("/ops")
def communication_ops(db: RunDbDep, rank: CommRankQ = None, step: StepKeyQ = None, group: GroupQ = None,
                      comm_type: CommTypeQ = None, q: FilterQ = None, sort: SortQ = None, order: OrderQ = None,
                      offset: OffsetQ = 0, limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """One page of ops with their times and ratios; ``slice_id`` / ``timeline_url`` are null without a trace.
    Sort by ``start``, ``elapse``, ``transit``, ``wait``, ``synchronization``, ``idle``, ``wait_ratio``,
    ``synchronization_ratio``, ``name``, ``rank``."""
    return cq.ops(db, db.run.id, rank, step, group, comm_type, q, sort, order, page(offset, limit))


@router.get("/ops.csv")
def communication_ops_csv(db: RunDbDep, rank: CommRankQ = None, step: StepKeyQ = None, group: GroupQ = None,
                          comm_type: CommTypeQ = None, q: FilterQ = None, sort: SortQ = None, order: OrderQ = None):
    """The ops of the current filter as CSV."""
    result = cq.ops(db, db.run.id, rank, step, group, comm_type, q, sort, order, csv=True)
    return csv_response(result, f"{db.run.id}_communication_ops.csv")


@router.get("/bandwidth")
def communication_bandwidth(db: RunDbDep, rank: CommRankQ = None, step: StepKeyQ = None, group: GroupQ = None,
                            op: OpQ = None) -> dict:
    """Per transport (HCCS, PCIE, RDMA, SDMA, SIO): size, time, bandwidth; and the packet-size distribution."""
    return cq.bandwidth(db, rank, step, group, op)


@router.get("/matrix")
def communication_matrix(db: RunDbDep, step: StepKeyQ = None, group: GroupQ = None,
                         op_type: Annotated[str | None, Query(max_length=256)] = None,
                         slot: Annotated[Literal["top1", "middle", "bottom1", "bottom2", "bottom3", "total"] | None,
                                         Query()] = None,
                         comm_type: CommTypeQ = None) -> dict:
    """Rank × rank cells (bandwidth, transit size, transit time, transport) for one matrix key: an op type and
    slot, or one op (older per-op files); links of several keys are summed."""
    return cq.matrix(db, step, group, op_type, slot, comm_type)


@router.get("/gantt")
def communication_gantt(db: RunDbDep, step: StepKeyQ = None, group: GroupQ = None) -> dict:
    """Ops per rank on one time axis (``t_ns`` relative to ``origin_ns``) for the op thumbnail."""
    return cq.gantt(db, origin_ns(db, ORIGIN_SQL), step, group)
