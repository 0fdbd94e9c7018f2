"""``/api/runs/{id}/memory/snapshot/…``: a PyTorch / torch_npu memory snapshot's allocator history
(``server/queries/memsnap.py``, ``memsnap_state.py``; the tables ``ingest.memsnap`` writes).

A device's time axis is ``ns`` when every trace entry has ``time_us`` (ask with ``*_ns``, absolute epoch ns) or
``index`` (ask with ``*_idx``, the entry's index, as memory_viz draws it); an entry index works on either. Answers
give x relative to ``origin_ns`` on a ``ns`` axis, the index on an ``index`` axis. ``rank`` defaults to the first
rank with a snapshot, ``device`` to its device with the most entries.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ascendscope.server.api.answers import Int64
from ascendscope.server.api.deps import RunDbDep
from ascendscope.server.api.viewparams import RankQ
from ascendscope.server.queries import memsnap as ms
from ascendscope.server.queries import memsnap_curve as mc
from ascendscope.server.queries import memsnap_state as mst

router = APIRouter(prefix="/api/runs/{run_id}/memory/snapshot", tags=["memory snapshot"])

DeviceQ = Annotated[int | None, Query(ge=0, le=1 << 20, description="device index in the snapshot")]
NsQ = Annotated[Int64 | None, Query(description="absolute epoch ns (a device whose entries have time_us)")]
IdxQ = Annotated[Int64 | None, Query(description="an entry's index in the device's trace")]
BucketsQ = Annotated[int, Query(ge=16, le=mc.MAX_BUCKETS, description="at most this many buckets (≈ pixels)")]
DrawnQ = Annotated[int, Query(ge=1, le=mc.MAX_DRAWN, description="stack at most this many of the largest blocks")]
GroupsQ = Annotated[int, Query(ge=1, le=mst.MAX_GROUPS, description="at most this many stacks")]
StackIdsQ = Annotated[list[Int64], Query(max_length=200, description="stack ids")]


def _run_origin(db) -> int | None:
    return int(db.info.origin_ns) if db.info.origin_ns else None


def _device(db, rank, device):
    rank, dev = ms.pick(db, rank, device)
    return ms.axis_of(dev, ms.origin_of(db, rank, _run_origin(db))), dev


@router.get("")
def snapshot_overview(db: RunDbDep, rank: RankQ = None, device: DeviceQ = None) -> dict:
    """The run's snapshots; for one rank its devices: figures at the dump (reserved, allocated, active), the
    peak of active memory and what was live at it, the OOMs, the time axis and how its clock is matched."""
    ax, dev = _device(db, rank, device)
    out = ms.overview(db, ax.rank, dev, _run_origin(db))
    peak_idx = dev["peak_idx"] if dev["peak_idx"] is not None else -1
    out["peak"] = {"bytes": dev["peak_active"], "idx": dev["peak_idx"], "x": ms.device_json(dev, ax)["peak_x"],
                   "top": mst.top_live(db, ax, peak_idx)}
    return out


@router.get("/curve")
def snapshot_curve(db: RunDbDep, rank: RankQ = None, device: DeviceQ = None, start_ns: NsQ = None,
                   end_ns: NsQ = None, start_idx: IdxQ = None, end_idx: IdxQ = None,
                   buckets: BucketsQ = mc.DEFAULT_BUCKETS) -> dict:
    """Active (allocated or waiting for a free), allocated and reserved bytes over the window, per bucket: the
    first and last x, min, max and last value of each (exact per bucket; a wide window reads the level of
    detail)."""
    ax, dev = _device(db, rank, device)
    lo, hi = ms.window(ax, ms.x_of(db, ax, start_ns, start_idx, "start"), ms.x_of(db, ax, end_ns, end_idx, "end"))
    return mc.curve(db, ax, dev, lo, hi, buckets)


@router.get("/allocations")
def snapshot_allocations(db: RunDbDep, rank: RankQ = None, device: DeviceQ = None, start_ns: NsQ = None,
                         end_ns: NsQ = None, start_idx: IdxQ = None, end_idx: IdxQ = None,
                         limit: DrawnQ = mc.DEFAULT_DRAWN) -> dict:
    """The largest blocks live in the window, stacked as memory_viz stacks them (older below): each block's
    bottom as steps ``[x, bytes]``, its requested size, life and stack; and their total, as steps."""
    ax, _ = _device(db, rank, device)
    lo, hi = ms.window(ax, ms.x_of(db, ax, start_ns, start_idx, "start"), ms.x_of(db, ax, end_ns, end_idx, "end"))
    return mc.allocations(db, ax, lo, hi, limit)


@router.get("/block")
def snapshot_block(db: RunDbDep, block_id: Int64, rank: RankQ = None, device: DeviceQ = None) -> dict:
    """One block: its size and request, its life (alloc, free requested, free completed; before the trace or
    live at the dump), its allocation stack and free stack."""
    ax, _ = _device(db, rank, device)
    return ms.block(db, ax, block_id)


@router.get("/state")
def snapshot_state(db: RunDbDep, rank: RankQ = None, device: DeviceQ = None, at_ns: NsQ = None,
                   at_idx: IdxQ = None) -> dict:
    """The allocator's state after the last entry at or before the time (default: the dump): segments and their
    blocks (allocated, waiting for a free; the rest free), per pool and stream reserved, allocated, active, free
    and the largest free gap; fragmentation."""
    ax, _ = _device(db, rank, device)
    x = ms.x_of(db, ax, at_ns, at_idx, "at")
    k = max(-1, min(at_idx, ax.entries - 1)) if at_idx is not None else ms.entry_at(db, ax, x)
    out = mst.state(db, ax, k)
    out["x"] = None if k < 0 else ax.rel(ms.x_of(db, ax, None, k, "at"))
    out["axis"], out["origin_ns"] = ax.kind, str(ax.origin) if ax.kind == "ns" else None
    return out


@router.get("/leaks")
def snapshot_leaks(db: RunDbDep, rank: RankQ = None, device: DeviceQ = None, start_ns: NsQ = None,
                   end_ns: NsQ = None, start_idx: IdxQ = None, end_idx: IdxQ = None,
                   limit: GroupsQ = mst.DEFAULT_GROUPS) -> dict:
    """Potential leaks in [start, end): the blocks allocated in it and not freed before its end, grouped by
    allocation stack, with their count and requested bytes (largest first)."""
    ax, _ = _device(db, rank, device)
    lo, hi = ms.window(ax, ms.x_of(db, ax, start_ns, start_idx, "start"), ms.x_of(db, ax, end_ns, end_idx, "end"))
    i0, i1 = ms.interval_entries(db, ax, lo, hi)
    if start_idx is not None:
        i0 = max(0, min(start_idx, ax.entries))
    if end_idx is not None:
        i1 = max(0, min(end_idx, ax.entries))
    out = mst.leaks(db, ax, i0, i1, limit)
    out.update(axis=ax.kind, lo=ax.rel(lo), hi=ax.rel(hi), origin_ns=str(ax.origin) if ax.kind == "ns" else None)
    return out


@router.get("/ooms")
def snapshot_ooms(db: RunDbDep, rank: RankQ = None, device: DeviceQ = None) -> dict:
    """Each ``oom`` entry: the bytes asked for, what the device reported free, the state at that moment and its
    largest live allocations by stack."""
    ax, _ = _device(db, rank, device)
    return {"axis": ax.kind, "origin_ns": str(ax.origin) if ax.kind == "ns" else None, "ooms": mst.ooms(db, ax)}


@router.get("/stacks")
def snapshot_stacks(db: RunDbDep, stack_id: StackIdsQ, rank: RankQ = None) -> dict:
    """The frames of some allocation stacks, innermost first."""
    rank, _ = ms.pick(db, rank, None)
    return {"rank": rank, "frames": ms.frames(db, rank, stack_id)}
