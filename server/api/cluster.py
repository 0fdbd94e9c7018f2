"""``/api/runs/{id}/cluster/…``: the cluster views — ranks, slow ranks, a ranks × steps heatmap of one metric and
the rank × rank communication matrix — answered from the run's cluster tables alone (``server/queries/cluster.py``),
so that a run of 1,000 ranks answers without reading any rank's own tables.

``source=cluster_analysis`` reads msprof-analyze's ``cluster_step_trace_time.csv`` instead of the ranks' own step
breakdown (when the run had a ``cluster_analysis_output`` folder).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import fast_json
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.queries import cluster as cq

router = APIRouter(prefix="/api/runs/{run_id}/cluster", tags=["cluster"])

SourceQ = Annotated[Literal["ranks", "cluster_analysis"],
                    Query(description="ranks: each rank's step breakdown; cluster_analysis: "
                                      "cluster_analysis_output/cluster_step_trace_time.csv")]
MetricQ = Annotated[Literal["step", "computing", "exposed_comm", "free"],
                    Query(description="step time (computing + exposed communication + free), computing, exposed "
                                      "communication (not overlapped) or free")]
StepKeyQ = Annotated[str | None, Query(max_length=64, description="step key, e.g. step50")]
GroupQ = Annotated[str | None, Query(max_length=64, description="HCCL group id")]
OpTypeQ = Annotated[str | None, Query(max_length=128, description="op type, e.g. hcom_allReduce")]


@router.get("/overview")
@fast_json
def cluster_overview(db: RunDbDep, source: SourceQ = "ranks") -> dict:
    """Ranks (columnar), steps, per-rank means per step, slow ranks (median + k·MAD, with the metric that makes
    them slow), ranks waiting in communication, and the ``cluster_analysis_output`` files found."""
    return cq.overview(db, source)


@router.get("/heatmap")
@fast_json
def cluster_heatmap(db: RunDbDep, metric: MetricQ = "step", source: SourceQ = "ranks") -> dict:
    """Ranks × steps of one metric in ns (``z[i][j]``: rank ``ranks[i]``, step ``steps[j]``), per-rank mean and
    total, per-step median."""
    return cq.heatmap(db, metric, source)


@router.get("/matrix")
@fast_json
def cluster_matrix(db: RunDbDep, step: StepKeyQ = None, group: GroupQ = None, op_type: OpTypeQ = None) -> dict:
    """The src × dst communication matrix (bandwidth, time, size; binned into blocks of ranks beyond 256 ranks),
    the slowest links, and the steps / groups / op types to filter on (``options``)."""
    out = cq.matrix(db, step, group, op_type)
    out["options"] = cq.matrix_options(db)
    return out
