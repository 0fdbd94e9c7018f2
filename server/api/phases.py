"""``/api/runs/{id}/phases``: the mstx ranges of every rank as phases, and what they add up to
(``server/queries/phases.py``). Both read ``cluster_phases`` (a sharded run's ``cluster.duckdb``): no shard is
attached, so a run of many ranks answers without loading them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import Int64, fast_json
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import OffsetQ
from ascendscope.server.queries import Page
from ascendscope.server.queries import phases as ph

router = APIRouter(prefix="/api/runs/{run_id}/phases", tags=["phases"])

DEFAULT_ROWS = 5_000
RoleQ = Annotated[str | None, Query(max_length=64, description="only this role (actor, rollout, ref, …)")]
PhaseQ = Annotated[str | None, Query(max_length=512, description="only this phase name")]
SourceQ = Annotated[str | None, Query(pattern="^(host|device)$", description="host or device ranges only")]
RowsQ = Annotated[int, Query(ge=1, le=ph.MAX_ROWS, description=f"rows (at most {ph.MAX_ROWS})")]


@router.get("")
@fast_json
def phases(db: RunDbDep, role: RoleQ = None, rank: Annotated[Int64 | None, Query()] = None,
           iteration: Annotated[Int64 | None, Query()] = None, phase: PhaseQ = None, source: SourceQ = None,
           preferred: Annotated[bool, Query(description="each rank's device ranges when it has any, else its host "
                                                        "ranges (what the summary counts)")] = False,
           offset: OffsetQ = 0, limit: RowsQ = DEFAULT_ROWS) -> dict:
    """The phases (role, rank, iteration, phase, message verbatim, start_ns, end_ns, source), by start time, each
    with a link to its rank's timeline at the range."""
    filters = {"role": role, "rank": rank, "iteration": iteration, "phase": phase, "source": source,
               "preferred": preferred}
    return ph.rows(db, db.run.id, filters, Page.of(offset, limit, cap=ph.MAX_ROWS))


@router.get("/summary")
@fast_json
def phases_summary(db: RunDbDep) -> dict:
    """Per iteration: wall time and the chain of phases that decides it; per iteration × role busy and idle time;
    per rank its idle gaps; the iteration × phase table; per pipeline stage its bubble and bubble ratio beside
    the schedule's theoretical one. A run without mstx ranges says how to add them (``how_to``)."""
    return ph.summary(db)
