"""``/api/runs/{id}/operators/…``: device kernels grouped by type / name / name + shapes / core, their instances
(each linked to its timeline slice), and host torch ops. Tables are sorted, filtered and paged here; every table
has a ``.csv`` twin returning the same filter as text/csv.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import (
    DEFAULT_LIMIT,
    FilterQ,
    LimitQ,
    OffsetQ,
    OrderQ,
    RankQ,
    SortQ,
    StepQ,
    csv_response,
    page,
    pick_rank,
)
from ascendscope.server.queries import links, sources
from ascendscope.server.queries import operators as oq

router = APIRouter(prefix="/api/runs/{run_id}/operators", tags=["operators"])

GroupByQ = Annotated[Literal["type", "name", "name_shapes", "core"], Query(description="how kernels are grouped")]
GroupByOrAutoQ = Annotated[Literal["type", "name", "name_shapes", "core"] | None,
                           Query(description="how kernels are grouped; absent: by type, or by name when no kernel "
                                             "has a type (the answer's group_by says which)")]
KindQ = Annotated[Literal["all", "computing", "communication"],
                  Query(description="computing kernels, communication (HCCL) kernels, or all")]
TorchGroupQ = Annotated[Literal["name", "name_shapes", "none"], Query(description="torch op grouping")]
GroupKeyQ = Annotated[str | None, Query(max_length=20_000, description="a group row's group_key (JSON list)")]


def _rank(db, rank: int | None, field: str = "kernels") -> tuple[int | None, list[dict]]:
    ranks = oq.ranks(db)
    return pick_rank(rank, [r["rank"] for r in ranks if r[field]]), ranks


@router.get("")
def operators_overview(db: RunDbDep, rank: RankQ = None, group_by: GroupByOrAutoQ = None, kind: KindQ = "all",
                       step: StepQ = None, top_n: Annotated[int, Query(ge=1, le=100)] = 15) -> dict:
    """Kernel totals of a rank, its accelerator-core split, the top-N groups and types (for the charts); for the
    kernels and the torch ops, when the rank has none, the file or table that would have fed them
    (``empty_sources``); ``from_trace`` when the rank's kernels came from its trace (no kernel table)."""
    rank, ranks = _rank(db, rank)
    out = {"ranks": ranks, "rank": rank, "has_trace": rank in links.trace_ranks(db),
           "empty_sources": sources.explain(db, "operator", rank)}
    if rank is None:
        return out | {"kernel_count": 0, "total_ns": 0, "cores": [], "types": {"rows": [], "other_ns": 0},
                      "top": {"rows": [], "other_ns": 0, "keys": []}, "steps": []}
    return out | oq.overview(db, rank, group_by, kind, step, top_n)


@router.get("/groups")
def operator_groups(db: RunDbDep, rank: RankQ = None, group_by: GroupByQ = "type", kind: KindQ = "all",
                    step: StepQ = None, core: Annotated[str | None, Query(max_length=64)] = None,
                    q: FilterQ = None, sort: SortQ = None,
                    order: OrderQ = None, offset: OffsetQ = 0, limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """One page of kernel groups: count, total, avg, min, max, wait and share of device time.
    Sort by ``total``, ``count``, ``avg``, ``min``, ``max``, ``wait`` or a key column."""
    rank, _ = _rank(db, rank)
    if rank is None:
        return {"rows": [], "total": 0, "offset": offset, "limit": limit, "truncated": False}
    return oq.groups(db, rank, group_by, kind, step, core, q, sort, order, page(offset, limit))


@router.get("/groups.csv")
def operator_groups_csv(db: RunDbDep, rank: RankQ = None, group_by: GroupByQ = "type", kind: KindQ = "all",
                        step: StepQ = None, core: Annotated[str | None, Query(max_length=64)] = None,
                        q: FilterQ = None, sort: SortQ = None,
                        order: OrderQ = None):
    """The kernel groups of the current filter as CSV."""
    rank, _ = _rank(db, rank)
    result = oq.groups(db, -1 if rank is None else rank, group_by, kind, step, core, q, sort, order, csv=True)
    return csv_response(result, f"{db.run.id}_rank{rank}_operators_by_{group_by}.csv")


@router.get("/instances")
def operator_instances(db: RunDbDep, rank: RankQ = None, group_by: GroupByQ = "type", group_key: GroupKeyQ = None,
                       kind: KindQ = "all", step: StepQ = None, sort: SortQ = None, order: OrderQ = None,
                       offset: OffsetQ = 0, limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """The kernels of one group with their shapes, types and formats; ``slice_id`` / ``timeline_url`` point at
    the kernel's slice when the rank has a trace. Sort by ``start``, ``duration``, ``wait``, ``name``,
    ``block_dim``."""
    rank, _ = _rank(db, rank)
    if rank is None:
        return {"rows": [], "total": 0, "offset": offset, "limit": limit, "truncated": False, "has_trace": False}
    return oq.instances(db, db.run.id, rank, group_by, group_key, kind, step, sort, order, page(offset, limit))


@router.get("/instances.csv")
def operator_instances_csv(db: RunDbDep, rank: RankQ = None, group_by: GroupByQ = "type",
                           group_key: GroupKeyQ = None, kind: KindQ = "all", step: StepQ = None,
                           sort: SortQ = None, order: OrderQ = None):
    """The kernels of one group as CSV."""
    rank, _ = _rank(db, rank)
    result = oq.instances(db, db.run.id, -1 if rank is None else rank, group_by, group_key, kind, step,
                          sort, order, csv=True)
    return csv_response(result, f"{db.run.id}_rank{rank}_kernels.csv")


@router.get("/torch")
def torch_operators(db: RunDbDep, rank: RankQ = None, group_by: TorchGroupQ = "name", q: FilterQ = None,
                    sort: SortQ = None, order: OrderQ = None, offset: OffsetQ = 0,
                    limit: LimitQ = DEFAULT_LIMIT) -> dict:
    """Host torch ops (operator_details.csv) with host/device self/total times, summed per name (or name +
    shapes), or the raw rows (``group_by=none``). Sort by ``host_self``, ``host_total``, ``device_self``,
    ``device_total``, ``device_self_aicore``, ``device_total_aicore``, ``count``, ``name``."""
    rank, _ = _rank(db, rank, "operators")
    if rank is None:
        return {"rows": [], "total": 0, "offset": offset, "limit": limit, "truncated": False}
    return oq.torch_ops(db, rank, group_by, q, sort, order, page(offset, limit))


@router.get("/torch.csv")
def torch_operators_csv(db: RunDbDep, rank: RankQ = None, group_by: TorchGroupQ = "name", q: FilterQ = None,
                        sort: SortQ = None, order: OrderQ = None):
    """The torch ops of the current filter as CSV."""
    rank, _ = _rank(db, rank, "operators")
    result = oq.torch_ops(db, -1 if rank is None else rank, group_by, q, sort, order, csv=True)
    return csv_response(result, f"{db.run.id}_rank{rank}_torch_ops.csv")

