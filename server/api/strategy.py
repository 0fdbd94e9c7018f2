"""``/api/runs/{id}/strategy/…``: the parallel strategy — the rank grid coloured by a step metric, which dimension
is slow (spreads and verdicts), communication per group kind and the MoE expert load — answered from the run's
whole-run and cluster tables (``server/queries/strategy*.py``, ``server/queries/experts.py``), so a run of 1,000
ranks answers without reading any rank's own tables.

``order`` (e.g. ``tp-cp-ep-dp-pp``, fastest-varying first) and the sizes (``tp``, ``pp``, ``dp``, ``cp``, ``ep``) lay
out the ranks the profiler_metadata.json files do not place; ``from_step`` / ``to_step`` choose the steps.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import fast_json
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.queries import experts as eq
from ascendscope.server.queries import strategy as sq
from ascendscope.server.queries import strategy_comm as cq
from ascendscope.server.queries import strategy_verdicts as vq

router = APIRouter(prefix="/api/runs/{run_id}/strategy", tags=["strategy"])

MetricQ = Annotated[Literal["step", "computing", "exposed_comm", "free", "wait_caused"],
                    Query(description="step time, computing, exposed communication, free, or the wait the rank "
                                      "caused as the last rank of collectives (mean per step)")]
FromQ = Annotated[int | None, Query(ge=-(2 ** 62), le=2 ** 62, description="first step of the range")]
ToQ = Annotated[int | None, Query(ge=-(2 ** 62), le=2 ** 62, description="last step of the range")]
OrderQ = Annotated[str | None, Query(max_length=32, pattern=r"^[a-z\-,]+$",
                                     description="rank order, fastest-varying first (default tp-cp-ep-dp-pp)")]
SizeQ = Annotated[int | None, Query(ge=1, le=32768)]
SourceQ = Annotated[Literal["dumps", "deployment", "kernels"] | None,
                    Query(description="expert dumps, deployment files, or GroupedMatmul kernels")]
PhaseQ = Annotated[str | None, Query(max_length=16, description="prefill or decode (dumps)")]


@router.get("/grid")
@fast_json
def strategy_grid(db: RunDbDep, metric: MetricQ = "step", from_step: FromQ = None, to_step: ToQ = None,
                  order: OrderQ = None, tp: SizeQ = None, pp: SizeQ = None, dp: SizeQ = None, cp: SizeQ = None,
                  ep: SizeQ = None) -> dict:
    """Every rank of the world with its (dp, pp, tp, cp, ep), where they come from (metadata, peers, inferred)
    and the metric's mean per step (columnar); the sizes and the rank order."""
    return sq.grid(db, metric, from_step, to_step, order, sq.parse_sizes(tp, pp, dp, cp, ep))


@router.get("/verdicts")
@fast_json
def strategy_verdicts(db: RunDbDep, metric: MetricQ = "step", from_step: FromQ = None, to_step: ToQ = None,
                      order: OrderQ = None, tp: SizeQ = None, pp: SizeQ = None, dp: SizeQ = None,
                      cp: SizeQ = None, ep: SizeQ = None) -> dict:
    """The metric's spread within and between the groups of each dimension, and which dimension is slow, in
    words, with the ranks to open on the timeline."""
    return vq.verdicts(db, metric, from_step, to_step, order, sq.parse_sizes(tp, pp, dp, cp, ep))


@router.get("/communication")
@fast_json
def strategy_communication(db: RunDbDep, from_step: FromQ = None, to_step: ToQ = None) -> dict:
    """Communication time and bandwidth per group kind (tp, pp, dp, cp, ep, …) and the heaviest groups."""
    return cq.by_kind(db, from_step, to_step)


@router.get("/experts")
@fast_json
def strategy_experts(db: RunDbDep, source: SourceQ = None, phase: PhaseQ = None, from_step: FromQ = None,
                     to_step: ToQ = None) -> dict:
    """MoE expert load: layer × expert (and × rank) heat map, the imbalance per layer, the hottest experts."""
    return eq.load(db, source, phase, from_step, to_step)
