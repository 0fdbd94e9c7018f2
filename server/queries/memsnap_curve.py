"""Memory snapshot view: a device's curves and its stacked allocations (memory_viz's Active Memory Timeline).

Curves: the active (allocated or waiting for a free), allocated and reserved bytes after each entry are
``base + rel`` (``mem_devices`` / ``mem_events``); a window of at most ``RAW_ENTRIES`` entries is bucketed from the
entries themselves (min, max and last per bucket), a wider one from ``mem_curve_lod`` (the same per 1,024 or 65,536
entries) at the coarsest level whose buckets are at most ``1/LOD_NARROW`` of an answer's bucket; a level-of-detail
bucket that straddles two answer buckets is read from its entries, so every bucket equals the naive
``SELECT … FROM mem_events`` over its entries (a test checks it, on both axes).

The stacked allocations: the ``limit`` largest blocks live in the window, stacked as memory_viz stacks them (older
below, so a block slides down when one below it is freed), each as its bottom's steps; the rest of active memory is
the band between their total and the active curve (memory_viz's "summarized" band).
"""

from __future__ import annotations

import numpy as np

from ascendscope.server.queries.memsnap import EVENT_AT_SQL, Axis, idx_range, stack_labels

DEFAULT_BUCKETS = 1_200
MAX_BUCKETS = 8_000
RAW_ENTRIES = 1 << 21
LOD_LEVELS = (16, 10)  # coarsest first (ingest.memsnap.store.LOD_LEVELS)
LOD_NARROW = 32  # a level is read when its buckets are at most 1/32 of an answer's bucket (few straddle two)
DEFAULT_DRAWN = 500
MAX_DRAWN = 1_000
MAX_VERTICES = 300_000

# per bucket of x: the first and last x, min / max / last of each curve (rel: add the device's bases)
RAW_CURVE_SQL = """
SELECT ((x - ?)::HUGEINT * ? // ?)::BIGINT AS b, min(x), max(x),
       min(active_rel), max(active_rel), arg_max(active_rel, idx),
       min(allocated_rel), max(allocated_rel), arg_max(allocated_rel, idx),
       min(reserved_rel), max(reserved_rel), arg_max(reserved_rel, idx)
FROM (SELECT {x} AS x, * FROM mem_events WHERE rank = ? AND device = ? AND idx BETWEEN ? AND ? {extra})
GROUP BY b ORDER BY b
"""
LOD_CURVE_SQL = """
SELECT ((x - ?)::HUGEINT * ? // ?)::BIGINT AS b, min(x), max({x_last}),
       min(active_min), max(active_max), arg_max(active_last, last_idx),
       min(allocated_min), max(allocated_max), arg_max(allocated_last, last_idx),
       min(reserved_min), max(reserved_max), arg_max(reserved_last, last_idx)
FROM (SELECT {x_first} AS x, * FROM mem_curve_lod
      WHERE rank = ? AND device = ? AND level = ? AND first_idx >= ? AND last_idx <= ?)
WHERE b = (({x_last} - ?)::HUGEINT * ? // ?)::BIGINT
GROUP BY b ORDER BY b
"""
# the level-of-detail buckets that straddle two buckets of the answer: read from the entries instead
STRADDLING_SQL = """
SELECT bucket FROM mem_curve_lod
WHERE rank = ? AND device = ? AND level = ? AND first_idx >= ? AND last_idx <= ?
  AND (({x_first} - ?)::HUGEINT * ? // ?) <> (({x_last} - ?)::HUGEINT * ? // ?)
"""
# blocks live in [lo, hi] of x (a NULL start is before the trace, a NULL end after the dump)
BLOCKS_IN_WINDOW_SQL = """
SELECT block_id, addr, requested_size, size, stream, stack_id, alloc_idx, free_requested_idx, free_idx,
       {start} AS x0, {end} AS x1, state_at_dump
FROM mem_blocks
WHERE rank = ? AND device = ? AND {start} <= ? AND {end} > ?
ORDER BY requested_size DESC, block_id LIMIT ?
"""


def curve(db, ax: Axis, dev: dict, lo: int, hi: int, buckets: int) -> dict:
    """The three curves over [lo, hi] of x in at most ``buckets`` buckets (columns: x0, x1, and per curve min,
    max, last), and the state just before the window (``before``)."""
    i0, i1 = idx_range(db, ax, lo, hi)
    base = (dev["active_base"], dev["allocated_base"], dev["reserved_base"])
    prev = i0 - 1
    before = list(base)
    if prev >= 0:
        row = db.rows(EVENT_AT_SQL, [ax.rank, ax.device, prev])
        if row:
            before = [base[k] + row[0][2 + k] for k in range(3)]
    out = {"axis": ax.kind, "origin_ns": str(ax.origin) if ax.kind == "ns" else None, "lo": ax.rel(lo),
           "hi": ax.rel(hi), "before": dict(zip(("active", "allocated", "reserved"), before)),
           "entries": max(0, i1 - i0 + 1), "buckets": 0, "source": "entries"}
    cols = {k: [] for k in ("x0", "x1", "active_min", "active_max", "active_last", "allocated_min", "allocated_max",
                            "allocated_last", "reserved_min", "reserved_max", "reserved_last")}
    if i1 >= i0:
        n = i1 - i0 + 1
        span = max(1, hi - lo)
        x = "ts_ns" if ax.kind == "ns" else "idx"
        head = [lo, buckets, span, ax.rank, ax.device]
        scale = [lo, buckets, span]
        level = next((lv for lv in LOD_LEVELS if n > RAW_ENTRIES and (1 << lv) * buckets * LOD_NARROW <= n), None)
        if level is None:
            rows = db.rows(RAW_CURVE_SQL.format(x=x, extra=""), [*head, i0, i1])
        else:
            out["source"] = f"mem_curve_lod level {level} ({1 << level} entries per bucket)"
            first_full = -(-i0 >> level) << level  # buckets inside [i0, i1]; the edges are read raw
            last_full = ((i1 + 1) >> level << level) - 1
            names = {"x_first": "first_ts_ns" if ax.kind == "ns" else "first_idx",
                     "x_last": "last_ts_ns" if ax.kind == "ns" else "last_idx"}
            rows = db.rows(LOD_CURVE_SQL.format(**names), [*head, level, first_full, last_full, *scale])
            straddling = [r[0] for r in db.rows(STRADDLING_SQL.format(**names), [
                ax.rank, ax.device, level, first_full, last_full, *scale, *scale])]
            if straddling:
                rows += db.rows(RAW_CURVE_SQL.format(x=x, extra=f"AND list_contains(?, idx >> {int(level)})"),
                                [*head, first_full, last_full, straddling])
            for a, b in ((i0, min(i1, first_full - 1)), (max(i0, last_full + 1), i1)):
                if b >= a:
                    rows += db.rows(RAW_CURVE_SQL.format(x=x, extra=""), [*head, a, b])
            rows = _merge_buckets(rows)
        for r in rows:
            cols["x0"].append(ax.rel(r[1]))
            cols["x1"].append(ax.rel(r[2]))
            for k, name in enumerate(("active", "allocated", "reserved")):
                cols[f"{name}_min"].append(int(r[3 + 3 * k]) + base[k])
                cols[f"{name}_max"].append(int(r[4 + 3 * k]) + base[k])
                cols[f"{name}_last"].append(int(r[5 + 3 * k]) + base[k])
        out["buckets"] = len(rows)
    out["columns"] = cols
    return out


def _merge_buckets(rows: list[tuple]) -> list[tuple]:
    """Rows of the same bucket from the level of detail and the raw edges, as one (rows sorted by bucket)."""
    merged: dict[int, list] = {}
    for r in sorted(rows, key=lambda r: (r[0], r[2])):  # by bucket, then last x: the last row's last is the last
        got = merged.get(r[0])
        if got is None:
            merged[r[0]] = list(r)
            continue
        got[1], got[2] = min(got[1], r[1]), max(got[2], r[2])
        for k in range(3):
            got[3 + 3 * k] = min(got[3 + 3 * k], r[3 + 3 * k])
            got[4 + 3 * k] = max(got[4 + 3 * k], r[4 + 3 * k])
            got[5 + 3 * k] = r[5 + 3 * k]
    return [tuple(v) for _, v in sorted(merged.items())]


def block_bounds(ax: Axis) -> tuple[str, str]:
    """SQL of a block's start and end x (before / after the trace for NULLs)."""
    if ax.kind == "ns":
        return f"coalesce(alloc_ts_ns, {ax.before})", f"coalesce(free_ts_ns, {ax.after})"
    return "coalesce(alloc_idx, -1)", f"coalesce(free_idx, {ax.after})"


def allocations(db, ax: Axis, lo: int, hi: int, limit: int) -> dict:
    """The ``limit`` largest blocks live in [lo, hi], stacked (the module note)."""
    start, end = block_bounds(ax)
    rows = db.rows(BLOCKS_IN_WINDOW_SQL.format(start=start, end=end), [ax.rank, ax.device, hi, lo, limit])
    n = len(rows)
    blocks = []
    if n:
        x0 = np.array([max(r[9], lo) for r in rows], dtype=np.int64)
        x1 = np.array([min(r[10], hi) for r in rows], dtype=np.int64)
        size = np.array([r[2] for r in rows], dtype=np.int64)
        order = sorted(range(n), key=lambda i: (-1 if rows[i][6] is None else rows[i][6], rows[i][0]))
        rank_of = np.empty(n, dtype=np.int64)
        rank_of[order] = np.arange(n)
        vertices = 0
        truncated = False
        for i in order:
            below = rank_of < rank_of[i]
            live_at_start = below & (x0 <= x0[i]) & (x1 > x0[i])
            bottom = int(size[live_at_start].sum())
            steps = [[ax.rel(int(x0[i])), bottom]]
            ends = below & (x1 > x0[i]) & (x1 < x1[i]) & (x0 <= x0[i])
            for e, s in sorted(zip(x1[ends].tolist(), size[ends].tolist())):
                bottom -= s
                if steps[-1][0] == ax.rel(e):
                    steps[-1][1] = bottom
                else:
                    steps.append([ax.rel(e), bottom])
            vertices += len(steps)
            if vertices > MAX_VERTICES:
                truncated = True
                break
            r = rows[i]
            blocks.append({"block_id": r[0], "addr": r[1], "requested_size": r[2], "size": r[3], "stream": r[4],
                           "stack_id": r[5], "alloc_idx": r[6], "free_requested_idx": r[7], "free_idx": r[8],
                           "x0": ax.rel(int(x0[i])), "x1": ax.rel(int(x1[i])), "steps": steps,
                           "state_at_dump": r[11]})
    else:
        truncated = False
    total = _drawn_total(ax, blocks)
    labels = stack_labels(db, ax.rank, {b["stack_id"] for b in blocks})
    return {"axis": ax.kind, "origin_ns": str(ax.origin) if ax.kind == "ns" else None, "lo": ax.rel(lo),
            "hi": ax.rel(hi), "blocks": blocks, "drawn_total": total, "stacks": labels, "limit": limit,
            "truncated": truncated or n == limit}


def _drawn_total(ax: Axis, blocks: list[dict]) -> list[list[int]]:
    """The stacked blocks' total as steps ``[x, bytes]``."""
    changes: dict[int, int] = {}
    for b in blocks:
        changes[b["x0"]] = changes.get(b["x0"], 0) + b["requested_size"]
        changes[b["x1"]] = changes.get(b["x1"], 0) - b["requested_size"]
    total, out = 0, []
    for x in sorted(changes):
        total += changes[x]
        out.append([x, total])
    return out
