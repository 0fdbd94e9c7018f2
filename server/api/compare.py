"""``/api/compare``: two runs (or two ranks, or two steps of one run) side by side — the step breakdown, kernel
groups, host torch ops and communication per op type with B − A deltas — and ``/api/compare/timeline``: both
sides' device lanes on one time axis that starts at each side's step start.

A side is ``a``/``b`` (run ids; the same run twice compares ranks or steps), ``rank_a``/``rank_b`` (default: the
run's first rank) and ``step_a``/``step_b`` (a step number, ``all`` for the whole rank, or nothing: the rank's first
step). Both runs must be ready; each is opened read-only like any run (:func:`server.api.open_run_db`), and a
database found damaged marks that run failed (409 ``run_damaged``).

Timeline times are ns relative to each side's ``align_ns`` (an absolute epoch-ns string); ``start_ns``/``end_ns``
of the request are such relative times, shared by both sides. Lanes are answered exactly or from the level of
detail, with the timeline's own row caps (``server.queries.timeline``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, Depends, Query, Request

from ascendscope.server.api.answers import ApiError, FastJSONResponse, Int64, fast_json, ns_str
from ascendscope.server.api.deps import (
    RunDb,
    SettingsDep,
    StoreDep,
    file_id,
    get_databases,
    open_run_db,
    request_budget,
    run_damaged,
)
from ascendscope.server.api.viewparams import RankQ
from ascendscope.server.db import DamagedDatabase
from ascendscope.server.queries import compare as cmp
from ascendscope.server.queries import links
from ascendscope.server.queries import timeline as tq
from ascendscope.server.runs import RunNotFound, RunStore

router = APIRouter(prefix="/api/compare", tags=["compare"])

RunAQ = Annotated[str, Query(min_length=1, max_length=200, description="run id of side A")]
RunBQ = Annotated[str, Query(min_length=1, max_length=200, description="run id of side B")]
StepSelQ = Annotated[str | None, Query(max_length=20, pattern=r"^(all|-?\d{1,19})$",
                                       description="a step number, 'all' (the whole rank), or absent (the rank's "
                                                   "first step)")]
SortQ = Annotated[Literal["total", "delta", "name"],
                  Query(description="largest on either side first, largest |B − A| first, or by name")]
AlignQ = Annotated[Literal["host", "device"],
                   Query(description="a step starts at its ProfilerStep (host) or at its first device task")]
RelNsQ = Annotated[Int64 | None, Query(description="ns relative to each side's align_ns")]


class SideDb(RunDb):
    """A side's database: a damaged file found by one of its queries names its own run (two are open)."""

    def _query(self, sql: str, params, fetch: str):
        try:
            return super()._query(sql, params, fetch)
        except DamagedDatabase as exc:
            exc.run = self.run
            raise


@dataclass
class Pair:
    a: SideDb
    b: SideDb


def _ready(store: RunStore, run_id: str, label: str):
    try:
        run = store.get(run_id)
    except RunNotFound:
        raise ApiError(404, "run_not_found", f"no run with id {run_id!r} (side {label})") from None
    if run.status != "ready":
        raise ApiError(409, "run_not_ready", f"run {run.id!r} (side {label}) is {run.status}", run_status=run.status)
    return run


def get_pair(a: RunAQ, b: RunBQ, store: StoreDep, settings: SettingsDep, request: Request) -> Iterator[Pair]:
    runs = (_ready(store, a, "A"), _ready(store, b, "B"))
    opened: list[SideDb] = []
    try:
        for run in runs:
            version = file_id(store.db_path(run.id))
            info, cur = open_run_db(run, store, get_databases(request))
            opened.append(SideDb(run=run, cur=cur, info=info, settings=settings, pool=request.app.state.query_pool,
                                 file_id=version, **request_budget(request)))
        yield Pair(*opened)
    except DamagedDatabase as exc:
        run = getattr(exc, "run", None)
        if run is None:
            raise
        get_databases(request).forget(run.id)
        raise run_damaged(store, run, str(exc)) from exc
    finally:
        for db in opened:
            db.cur.close()


PairDep = Annotated[Pair, Depends(get_pair)]


def _sides(pair: Pair, rank_a, rank_b, step_a, step_b) -> tuple[cmp.Side, cmp.Side]:
    return (cmp.side(pair.a, pair.a.info.ranks, rank_a, step_a, "A"),
            cmp.side(pair.b, pair.b.info.ranks, rank_b, step_b, "B"))


def _side_info(s: cmp.Side, db: SideDb) -> dict:
    return {"run_id": db.run.id, "run_name": db.run.name, "rank": s.rank, "step": s.step, "ranks": s.ranks,
            "steps": s.steps, "has_trace": s.rank in links.trace_ranks(db)}


@router.get("")
def compare(pair: PairDep, rank_a: RankQ = None, rank_b: RankQ = None, step_a: StepSelQ = None,
            step_b: StepSelQ = None, group_by: Annotated[Literal["name", "type"], Query(
                description="kernels per name (+ type + core) or per type (+ core)")] = "name",
            kind: Annotated[Literal["all", "computing", "communication"], Query()] = "all",
            sort: SortQ = "total") -> dict:
    """Both sides' step breakdown (the Summary view's row of that rank and step), kernel groups (the Operator
    view's), host torch ops per name and communication per HCCL op type (with the rank's Communication total),
    aligned by key with ``delta`` = B − A and ``delta_pct`` = (B − A) / A; rows on one side only have ``only``.
    Each table holds at most 500 rows (``truncated``)."""
    a, b = _sides(pair, rank_a, rank_b, step_a, step_b)
    return {
        "a": _side_info(a, pair.a), "b": _side_info(b, pair.b),
        "breakdown": cmp.breakdown(a, b),
        "kernels": cmp.kernels(a, b, group_by, kind, sort),
        "torch_ops": cmp.torch_ops(a, b, sort),
        "communication": cmp.communication(a, b, sort),
    }


@router.get("/timeline")
@fast_json
def compare_timeline(pair: PairDep, rank_a: RankQ = None, rank_b: RankQ = None, step_a: StepSelQ = None,
                     step_b: StepSelQ = None, align: AlignQ = "host", start_ns: RelNsQ = None, end_ns: RelNsQ = None,
                     width_px: Annotated[int, Query(ge=1, le=20_000, description="pixels the window is drawn on")]
                     = 1000) -> FastJSONResponse:
    """Each side's device lanes (Overlap Analysis, hardware streams, the communication op lane; at most 32) in
    the window [start_ns, end_ns) relative to its step's start (default: the longer side's step), in columns with
    names interned in ``names``; dense lanes come from the level of detail (``lod``, ``slice_count``), each lane
    capped (``truncated``)."""
    a, b = _sides(pair, rank_a, rank_b, step_a, step_b)
    anchors = [cmp.anchor(s, db.info.track_rows, align) for s, db in ((a, pair.a), (b, pair.b))]
    spans = [(x["start_ns"] - x["align_ns"], x["end_ns"] - x["align_ns"]) for x in anchors if x["align_ns"] is not None]
    lo = start_ns if start_ns is not None else min((s for s, _ in spans), default=0)
    hi = end_ns if end_ns is not None else max((e for _, e in spans), default=lo + 1)
    if hi <= lo:
        if start_ns is not None and end_ns is not None:
            raise ApiError(400, "invalid_range", f"end_ns ({end_ns}) must be greater than start_ns ({start_ns})")
        hi = lo + 1
    sides, parts = [], []
    for s, db, at in ((a, pair.a, anchors[0]), (b, pair.b, anchors[1])):
        side, names = _side_lanes(s, db, at, lo, hi, width_px)
        sides.append(side)
        parts.extend(names)
    names = tq.intern_names([p for p, _ in parts], [lane for _, lane in parts])
    return {"start_ns": lo, "end_ns": hi, "width_px": width_px, "align": align, "names": names,
            "a": sides[0], "b": sides[1]}


def _side_lanes(s: cmp.Side, db: SideDb, at: dict, lo: int, hi: int, width_px: int) -> tuple[dict, list]:
    """A side's answer (lanes in columns, times relative to its align_ns) and its lanes' name parts to intern."""
    align = at["align_ns"]
    rel = {k: (None if v is None else v - align) for k, v in at["marks"].items()} if align is not None else {}
    out = {**_side_info(s, db), "align_on": at["align_on"], "align_ns": ns_str(align),
           "step_start_ns": None if align is None else at["start_ns"] - align,
           "step_end_ns": None if align is None else at["end_ns"] - align, "marks": rel, "lanes": [],
           "lanes_truncated": False}
    if align is None:
        return out, []
    rows, out["lanes_truncated"] = cmp.timeline_lanes(db.info.track_rows, s.rank)
    if not rows:
        return out, []
    start, end = _clamp(align + lo), _clamp(align + hi)
    if end <= start:
        return out, []
    tracks = {r["track_id"]: db.info.tracks[r["track_id"]] for r in rows}
    # the timeline's own cache entries: a window both views show is computed once
    answers = tq.viewport_answers(db, tracks, start, end, width_px)
    shift = db.info.origin_ns - align  # the answers' times are relative to the run's origin
    parts = []
    for r in rows:
        flags, cols, names = answers[r["track_id"]]
        lane = {"track_id": r["track_id"], "kind": r["kind"], "label": r["label"], "process_name": r["process_name"],
                "thread_name": r["thread_name"], "max_depth": r["max_depth"], "lod": flags["lod"],
                "bucket_ns": flags.get("bucket_ns"), "truncated": flags["truncated"],
                "ts_ns": np.asarray(cols["ts_ns"], dtype=np.int64) + shift,
                "dur_ns": cols["dur_ns"], "depth": cols["depth"], "slice_id": cols["slice_id"],
                "count": len(cols["slice_id"])}
        if "slice_count" in cols:
            lane["slice_count"] = cols["slice_count"]
        out["lanes"].append(lane)
        parts.append((names, lane))
    return out, parts


def _clamp(v: int) -> int:
    return max(cmp.INT64_MIN, min(cmp.INT64_MAX, v))
