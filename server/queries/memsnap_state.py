"""Memory snapshot view: the allocator's state after an entry, the potential leaks of an interval, the OOMs.

*State at an entry* ``k`` (the last entry at or before the time asked): the reserved ranges then (``mem_segments``'
pieces alive after ``k``; adjacent pieces of one stream and kind merged into one segment, as memory_viz merges an
expandable segment's maps) and the blocks live then (allocated, or freed but waiting for another stream:
``active_pending_free``), each placed in the segment holding its address; what lies between them is free
(inactive). A block's bytes are its size when the dump lists it (the rounded size), else its request (a block freed
within the trace has no other size recorded). Per pool and stream: reserved, allocated, active, free
(reserved − active) and the largest free gap; fragmentation = 1 − largest free gap / free.

*Potential leaks in [i0, i1)*: the blocks allocated by an entry of the interval and not freed (``free_requested``)
by one before its end, grouped by allocation stack, with their count and requested bytes.

*OOM*: each ``oom`` entry, the bytes it asked for, what the device said was free, the state then and its largest
live allocations by stack.
"""

from __future__ import annotations

from ascendscope.server.queries import ns_str
from ascendscope.server.queries.memsnap import Axis, frames, stack_labels

MAX_SEGMENTS = 2_000
MAX_BLOCKS = 20_000
DEFAULT_GROUPS = 50
MAX_GROUPS = 500

PIECES_AT_SQL = """
SELECT address, size, stream, segment_type, pool_id, is_expandable, is_workspace, dump_address, start_idx
FROM mem_segments
WHERE rank = ? AND device = ? AND coalesce(start_idx, -1) <= ? AND coalesce(end_idx, 9223372036854775807) > ?
ORDER BY address
"""
LIVE_AT_SQL = """
SELECT block_id, addr, coalesce(size, requested_size) AS bytes, requested_size, size, stream, stack_id,
       free_requested_idx IS NOT NULL AND free_requested_idx <= ? AS pending, alloc_idx
FROM mem_blocks
WHERE rank = ? AND device = ? AND coalesce(alloc_idx, -1) <= ? AND coalesce(free_idx, 9223372036854775807) > ?
ORDER BY addr
"""
TOP_LIVE_SQL = """
SELECT stack_id, count(*) AS blocks, sum(requested_size)::BIGINT AS bytes, max(requested_size) AS largest,
       arg_max(block_id, requested_size) AS largest_block
FROM mem_blocks
WHERE rank = ? AND device = ? AND coalesce(alloc_idx, -1) <= ? AND coalesce(free_idx, 9223372036854775807) > ?
  AND (free_requested_idx IS NULL OR free_requested_idx > ?)
GROUP BY stack_id ORDER BY bytes DESC, stack_id NULLS LAST LIMIT ?
"""
LEAKS_SQL = """
SELECT stack_id, count(*) AS blocks, sum(requested_size)::BIGINT AS bytes, min(alloc_idx) AS first_idx,
       max(alloc_idx) AS last_idx, arg_max(block_id, requested_size) AS largest_block,
       count(*) FILTER (WHERE free_idx IS NULL) AS live_at_dump
FROM mem_blocks
WHERE rank = ? AND device = ? AND alloc_idx >= ? AND alloc_idx < ?
  AND (free_requested_idx IS NULL OR free_requested_idx >= ?) AND (free_idx IS NULL OR free_idx >= ?)
GROUP BY stack_id ORDER BY bytes DESC, stack_id NULLS LAST
"""
OOMS_SQL = """
SELECT idx, ts_ns, size, device_free, stream, stack_id FROM mem_events
WHERE rank = ? AND device = ? AND action = 'oom' ORDER BY idx LIMIT 100
"""


def state(db, ax: Axis, k: int, block_limit: int = MAX_BLOCKS) -> dict:
    """The allocator's state after entry ``k`` (the module note); ``k`` = -1: before the first entry."""
    pieces = db.rows(PIECES_AT_SQL, [ax.rank, ax.device, k, k])
    live = db.rows(LIVE_AT_SQL, [k, ax.rank, ax.device, k, k])
    segs = _merge(pieces)
    blocks_out, outside = _place(segs, live, block_limit)
    pools: dict[tuple, dict] = {}
    for s in segs:
        key = (s["segment_type"] or "unknown", s["stream"])
        p = pools.setdefault(key, {"pool": key[0], "stream": key[1], "segments": 0, "reserved": 0, "allocated": 0,
                                   "active": 0, "largest_free": 0})
        p["segments"] += 1
        for f in ("reserved", "allocated", "active"):
            p[f] += s[f]
        p["largest_free"] = max(p["largest_free"], s["largest_free"])
    totals = {"reserved": sum(s["reserved"] for s in segs), "segments": len(segs), "blocks": len(live),
              "allocated": sum(b[2] for b in live if not b[7]), "active": sum(b[2] for b in live),
              "allocated_requested": sum(b[3] for b in live if not b[7]),
              "active_requested": sum(b[3] for b in live),
              "pending_free": sum(1 for b in live if b[7]),
              "largest_free": max((s["largest_free"] for s in segs), default=0),
              "outside_segments": outside}
    totals["free"] = totals["reserved"] - totals["active"]
    totals["fragmentation"] = (None if totals["free"] <= 0 else
                               round(1 - totals["largest_free"] / totals["free"], 6))
    for p in pools.values():
        p["free"] = p["reserved"] - p["active"]
    return {"idx": k, "totals": totals, "pools": sorted(pools.values(), key=lambda p: (p["pool"], p["stream"] or 0)),
            "segments": segs[:MAX_SEGMENTS], "blocks": blocks_out, "truncated": len(segs) > MAX_SEGMENTS or
            len(blocks_out) < len(live) - outside, "stacks": stack_labels(db, ax.rank, {b["stack_id"]
                                                                                       for b in blocks_out})}


def _merge(pieces: list[tuple]) -> list[dict]:
    """Adjacent pieces of one stream, kind and pool as one segment (the module note)."""
    segs: list[dict] = []
    for address, size, stream, stype, pool, expandable, workspace, _dump, _start in pieces:
        last = segs[-1] if segs else None
        if (last is not None and last["address"] + last["reserved"] == address and last["stream"] == stream
                and last["is_expandable"] and expandable):
            last["reserved"] += size
            last["pieces"] += 1
            continue
        segs.append({"address": address, "reserved": size, "stream": stream, "segment_type": stype,
                     "pool_id": pool, "is_expandable": bool(expandable), "is_workspace": bool(workspace),
                     "pieces": 1, "allocated": 0, "active": 0, "blocks": 0, "largest_free": 0})
    return segs


def _place(segs: list[dict], live: list[tuple], limit: int) -> tuple[list[dict], int]:
    """Each live block in the segment holding its address (both sorted by address); the segments' figures and
    largest free gaps. Returns the blocks (at most ``limit``) and how many lie outside every segment."""
    out: list[dict] = []
    outside = 0
    si = 0
    cursor = {}
    for block_id, addr, nbytes, requested, size, stream, stack, pending, alloc_idx in live:
        while si < len(segs) and segs[si]["address"] + segs[si]["reserved"] <= addr:
            si += 1
        if si >= len(segs) or addr < segs[si]["address"]:
            outside += 1
            continue
        s = segs[si]
        gap = addr - cursor.get(si, s["address"])
        s["largest_free"] = max(s["largest_free"], gap)
        cursor[si] = max(cursor.get(si, s["address"]), addr + nbytes)
        s["blocks"] += 1
        s["active"] += nbytes
        if not pending:
            s["allocated"] += nbytes
        if len(out) < limit:
            out.append({"block_id": block_id, "addr": addr, "bytes": nbytes, "requested_size": requested,
                        "size": size, "stream": stream, "stack_id": stack, "segment": si,
                        "state": "active_pending_free" if pending else "active_allocated",
                        "before_trace": alloc_idx is None})
    for i, s in enumerate(segs):
        end = cursor.get(i, s["address"])
        s["largest_free"] = max(s["largest_free"], s["address"] + s["reserved"] - end)
        s["free"] = s["reserved"] - s["active"]
    return out, outside


def top_live(db, ax: Axis, k: int, limit: int = 20) -> list[dict]:
    """The allocations live after entry ``k`` (not waiting for a free) grouped by stack, largest first."""
    rows = db.rows(TOP_LIVE_SQL, [ax.rank, ax.device, k, k, k, limit])
    labels = stack_labels(db, ax.rank, {r[0] for r in rows})
    return [{"stack_id": r[0], "blocks": r[1], "bytes": r[2], "largest": r[3], "largest_block": r[4],
             "label": labels.get(str(r[0]), {}).get("label")} for r in rows]


def leaks(db, ax: Axis, i0: int, i1: int, limit: int = DEFAULT_GROUPS) -> dict:
    """Blocks allocated by an entry in [i0, i1) and not freed by one before i1, per allocation stack."""
    rows = db.rows(LEAKS_SQL, [ax.rank, ax.device, i0, i1, i1, i1])
    shown = rows[:limit]
    stacks = {r[0] for r in shown}
    labels = stack_labels(db, ax.rank, stacks)
    full = frames(db, ax.rank, stacks)
    groups = [{"stack_id": r[0], "blocks": r[1], "bytes": r[2], "first_idx": r[3], "last_idx": r[4],
               "largest_block": r[5], "live_at_dump": r[6], "label": labels.get(str(r[0]), {}).get("label"),
               "frames": full.get(str(r[0]), [])} for r in shown]
    return {"i0": i0, "i1": i1, "groups": groups, "total_groups": len(rows),
            "blocks": sum(r[1] for r in rows), "bytes": sum(r[2] for r in rows), "truncated": len(rows) > limit}


def ooms(db, ax: Axis) -> list[dict]:
    out = []
    for idx, ts, size, device_free, stream, stack in db.rows(OOMS_SQL, [ax.rank, ax.device]):
        st = state(db, ax, idx, block_limit=0)
        out.append({"idx": idx, "x": ax.rel(ts if ax.kind == "ns" else idx), "ts_ns": ns_str(ts),
                    "requested": size, "device_free": device_free, "stream": stream, "stack_id": stack,
                    "frames": frames(db, ax.rank, [stack]).get(str(stack), []) if stack is not None else [],
                    "totals": st["totals"], "pools": st["pools"], "top": top_live(db, ax, idx)})
    return out
