"""``/api/runs/{id}/critical_path``: the critical path of one rank's step with each element's share of the step,
and the what-if: the step re-evaluated with kernels, kernel types or communication sped up
(``server/queries/critical_path.py``; the model and its assumptions: ``server/queries/critical_model.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import Int64, fast_json
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import StepQ
from ascendscope.server.queries import critical_path as cp

router = APIRouter(prefix="/api/runs/{run_id}/critical_path", tags=["critical path"])

NamesQ = Annotated[list[str] | None, Query(max_length=cp.MAX_PICKS, description="kernel names to speed up")]
TypesQ = Annotated[list[str] | None, Query(max_length=cp.MAX_PICKS,
                                           description="kernel types to speed up (kernel_details Type, else Task "
                                                       "Type)")]


@router.get("")
@fast_json
def critical_path(db: RunDbDep, rank: Annotated[Int64, Query(description="the rank")], step: StepQ = None,
                  kernel: NamesQ = None, kernel_type: TypesQ = None, communication: bool = False,
                  factor: Annotated[float | None, Query(gt=0, le=cp.MAX_FACTOR,
                                                        description="speed-up factor (2: twice as fast)")] = None,
                  infer: Annotated[bool, Query(description="infer a collective's order with the kernels launched "
                                                           "before and after it where no wait task shows it")] = True
                  ) -> dict:
    """The step's critical path (segments with shares, per category, the top elements) and, with ``kernel``,
    ``kernel_type`` or ``communication`` and a ``factor``, the estimated step time beside the measured one, the
    re-evaluated path and the model's assumptions; ``inferred_edges`` lists the order inferred from the launches
    (``infer=false``: none)."""
    pick = {"kernels": kernel or [], "types": kernel_type or [], "communication": communication}
    return cp.critical_path(db, rank, step, pick, factor, infer)
