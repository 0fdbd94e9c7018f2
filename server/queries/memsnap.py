"""Memory snapshot view: a device's active memory over time (memory_viz's stacked allocations), its curves, one
block's details (``ingest.memsnap`` wrote the tables; ``memsnap_state`` answers the state, leaks and OOM).

The time axis of a device (:class:`Axis`): its entries' ``time_us`` as epoch ns when every entry has one (``ns``),
else the entry's index in its trace (``index``), as memory_viz draws it. Answers give x relative to ``origin_ns``
(the run's time zero when the run has a trace, else the device's first entry) on a ``ns`` axis, the index on an
``index`` axis. A figure *at* x is the state after the last entry at or before x.

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

from dataclasses import dataclass

import numpy as np

from ascendscope.server.queries import NotFound, QueryError, ns_str

DEFAULT_BUCKETS = 1_200
MAX_BUCKETS = 8_000
RAW_ENTRIES = 1 << 21
LOD_LEVELS = (16, 10)  # coarsest first (ingest.memsnap.load.LOD_LEVELS)
LOD_NARROW = 32  # a level is read when its buckets are at most 1/32 of an answer's bucket (few straddle two)
DEFAULT_DRAWN = 300
MAX_DRAWN = 1_000
MAX_VERTICES = 300_000
MAX_STACK_FRAMES = 64

SNAPSHOTS_SQL = """
SELECT s.rank, s.file, s.size_bytes, s.flavour, s.devices, s.entries, s.segments, s.frames, s.stacks,
       s.annotations, s.seconds, r.has_trace
FROM mem_snapshots s LEFT JOIN ranks r USING (rank) ORDER BY s.rank
"""
DEVICE_SQL = "SELECT * FROM mem_devices WHERE rank = ? AND device = ?"
DEVICES_SQL = "SELECT * FROM mem_devices WHERE rank = ? ORDER BY device"
FIRST_TIME_SQL = """
SELECT min(first_ts_ns) FILTER (WHERE has_time), max(last_ts_ns) FILTER (WHERE has_time) FROM mem_devices
WHERE rank = ?
"""
RANK_SPAN_SQL = "SELECT min(start_ns), max(end_ns) FROM ranks WHERE rank = ?"
RUN_SPAN_SQL = "SELECT min(start_ns), max(end_ns) FROM ranks"
CLOCK_SLACK_NS = 3_600 * 10 ** 9  # a snapshot dumped within an hour of the profiled span shares its time zero
LAST_AT_OR_BEFORE_SQL = "SELECT max(idx) FROM mem_events WHERE rank = ? AND device = ? AND ts_ns <= ?"
FIRST_AT_OR_AFTER_SQL = "SELECT min(idx) FROM mem_events WHERE rank = ? AND device = ? AND ts_ns >= ?"
EVENT_AT_SQL = """
SELECT idx, ts_ns, active_rel, allocated_rel, reserved_rel FROM mem_events
WHERE rank = ? AND device = ? AND idx = ?
"""
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
BLOCK_SQL = "SELECT * FROM mem_blocks WHERE rank = ? AND block_id = ?"
STACK_LABELS_SQL = """
SELECT stack_id, count(*) AS depth,
       coalesce(arg_min(name || ' · ' || regexp_extract(filename, '[^/]*$') || ':' || line, depth)
                FILTER (WHERE filename NOT LIKE '%site-packages%' AND filename NOT LIKE '%/torch/%'
                        AND filename NOT LIKE '%/torch_npu/%' AND filename NOT LIKE '%.c'
                        AND filename NOT LIKE '%.cpp' AND filename NOT LIKE '%.h'),
                arg_min(name || ' · ' || regexp_extract(filename, '[^/]*$') || ':' || line, depth)) AS label
FROM mem_frames WHERE rank = ? AND list_contains(?, stack_id) GROUP BY stack_id
"""
FRAMES_SQL = """
SELECT stack_id, depth, name, filename, line FROM mem_frames
WHERE rank = ? AND list_contains(?, stack_id) AND depth < ? ORDER BY stack_id, depth
"""
OTHER_FILE_WARNINGS_SQL = """
SELECT file, message FROM warnings WHERE rank = ? AND file = ? ORDER BY message LIMIT 50
"""


@dataclass
class Axis:
    """A device's time axis (the module note)."""

    rank: int
    device: int
    kind: str  # "ns" or "index"
    entries: int
    first: int  # the first and last x of its entries (index: 0 and entries - 1)
    last: int
    origin: int  # x of the answers' 0 (ns: epoch ns; index: 0)

    def rel(self, x):
        return None if x is None else int(x) - self.origin

    @property
    def before(self) -> int:
        """An x before every entry: where a life that began before the trace is drawn from."""
        return self.first - 1

    @property
    def after(self) -> int:
        """An x after every entry: where a life still live at the dump is drawn to."""
        return self.last + 1


def snapshots(db) -> list[dict]:
    return db.dicts(SNAPSHOTS_SQL)


def pick(db, rank: int | None, device: int | None) -> tuple[int, dict]:
    """The rank (default: the first with a snapshot) and device (default: the one with the most entries)."""
    ranks = [r["rank"] for r in snapshots(db)]
    if not ranks:
        raise NotFound("no_snapshot", "this run has no memory snapshot (open a _dump_snapshot pickle alone, in an "
                                      "archive, or beside its rank folders)")
    rank = ranks[0] if rank is None else rank
    if rank not in ranks:
        raise NotFound("no_snapshot", f"rank {rank} has no memory snapshot; ranks with one: "
                                      f"{', '.join(map(str, ranks))}")
    devices = db.dicts(DEVICES_SQL, [rank])
    if device is None:
        return rank, max(devices, key=lambda d: (d["entries"], -d["device"]))
    for d in devices:
        if d["device"] == device:
            return rank, d
    raise NotFound("no_device", f"rank {rank}'s snapshot has no device {device}; devices: "
                                f"{', '.join(str(d['device']) for d in devices)}")


def origin_of(db, rank: int, run_origin: int | None) -> int | None:
    """The answers' time zero: the run's, when its rank was profiled while the snapshot's entries were recorded
    (within ``CLOCK_SLACK_NS`` of its profiled span: both clocks are the epoch), else the snapshot's first time (of
    any device)."""
    row = db.rows(FIRST_TIME_SQL, [rank])
    first, last = (row[0][0], row[0][1]) if row else (None, None)
    if run_origin and first is not None and _near_the_run(db, rank, first, last):
        return run_origin
    return int(first) if first is not None else run_origin


def _near_the_run(db, rank: int, first: int, last: int) -> bool:
    span = db.rows(RANK_SPAN_SQL, [rank])
    if not span or span[0][0] is None:
        span = db.rows(RUN_SPAN_SQL)
    lo, hi = span[0] if span else (None, None)
    return lo is not None and first <= hi + CLOCK_SLACK_NS and last >= lo - CLOCK_SLACK_NS


def axis_of(dev: dict, origin: int | None) -> Axis:
    """``origin``: :func:`origin_of`."""
    if dev["has_time"]:
        origin = origin if origin else int(dev["first_ts_ns"])
        return Axis(dev["rank"], dev["device"], "ns", dev["entries"], int(dev["first_ts_ns"]),
                    int(dev["last_ts_ns"]), origin)
    return Axis(dev["rank"], dev["device"], "index", dev["entries"], 0, max(0, dev["entries"] - 1), 0)


def x_of(db, ax: Axis, ns: int | None, idx: int | None, what: str) -> int | None:
    """A time parameter as the axis' x: ``*_ns`` (absolute epoch ns, on a ``ns`` axis) or ``*_idx`` (an entry
    index: its time on a ``ns`` axis)."""
    if ns is not None and idx is not None:
        raise QueryError("bad_time", f"give {what}_ns or {what}_idx, not both")
    if ns is not None:
        if ax.kind != "ns":
            raise QueryError("bad_time", f"device {ax.device}'s trace has no time_us: ask with {what}_idx (the entry "
                                         "index)")
        return ns
    if idx is None or ax.kind == "index":
        return idx
    if idx < 0:
        return ax.before
    if idx >= ax.entries:
        return ax.after
    row = db.rows(EVENT_AT_SQL, [ax.rank, ax.device, idx])
    return int(row[0][1]) if row and row[0][1] is not None else ax.before


def entry_at(db, ax: Axis, x: int | None) -> int:
    """The index of the last entry at or before x (-1: before every entry)."""
    if x is None:
        return ax.entries - 1
    if ax.kind == "index":
        return max(-1, min(int(x), ax.entries - 1))
    row = db.rows(LAST_AT_OR_BEFORE_SQL, [ax.rank, ax.device, x])
    return -1 if not row or row[0][0] is None else int(row[0][0])


def idx_range(db, ax: Axis, lo: int, hi: int) -> tuple[int, int]:
    """The entries whose x lies in [lo, hi] (first, last; last < first when none)."""
    if ax.kind == "index":
        return max(0, lo), min(ax.entries - 1, hi)
    a = db.rows(FIRST_AT_OR_AFTER_SQL, [ax.rank, ax.device, lo])[0][0]
    b = db.rows(LAST_AT_OR_BEFORE_SQL, [ax.rank, ax.device, hi])[0][0]
    return (0, -1) if a is None or b is None else (int(a), int(b))


def interval_entries(db, ax: Axis, lo: int, hi: int) -> tuple[int, int]:
    """The entries of [lo, hi) as [i0, i1): from the first at or after lo to the first at or after hi."""
    if ax.kind == "index":
        return max(0, lo), max(0, min(ax.entries, hi))
    a = db.rows(FIRST_AT_OR_AFTER_SQL, [ax.rank, ax.device, lo])[0][0]
    b = db.rows(FIRST_AT_OR_AFTER_SQL, [ax.rank, ax.device, hi])[0][0]
    return (ax.entries if a is None else int(a)), (ax.entries if b is None else int(b))


def window(ax: Axis, lo: int | None, hi: int | None) -> tuple[int, int]:
    lo = ax.before if lo is None else lo
    hi = ax.after if hi is None else hi
    if hi <= lo:
        raise QueryError("bad_window", "the window's end must be after its start")
    return lo, hi


def device_json(dev: dict, ax: Axis) -> dict:
    out = {k: dev[k] for k in ("device", "entries", "has_time", "segments_at_dump", "reserved_at_dump",
                               "allocated_at_dump", "active_at_dump", "requested_at_dump", "active_requested_at_dump",
                               "peak_active", "peak_idx", "blocks", "blocks_before_trace", "blocks_live_at_dump",
                               "workspace_bytes", "ooms", "min_active", "min_allocated", "min_reserved")}
    out["axis"] = ax.kind
    out["x_first"], out["x_last"] = ax.rel(ax.first), ax.rel(ax.last)
    out["peak_x"] = ax.rel(dev["peak_ts_ns"] if ax.kind == "ns" else dev["peak_idx"])
    out["first_ts_ns"], out["last_ts_ns"] = ns_str(dev["first_ts_ns"]), ns_str(dev["last_ts_ns"])
    out["anomalies"] = dev["anomalies"]
    return out


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


def stack_labels(db, rank: int, stack_ids) -> dict[str, dict]:
    """Per stack id: its depth and a label (the innermost frame outside torch and C++ sources)."""
    ids = sorted(s for s in stack_ids if s is not None)
    if not ids:
        return {}
    return {str(r[0]): {"depth": r[1], "label": r[2]} for r in db.rows(STACK_LABELS_SQL, [rank, ids])}


def frames(db, rank: int, stack_ids) -> dict[str, list[dict]]:
    """The frames of some stacks, innermost first (at most ``MAX_STACK_FRAMES`` each)."""
    ids = sorted({s for s in stack_ids if s is not None})
    out: dict[str, list[dict]] = {str(s): [] for s in ids}
    if ids:
        for sid, _depth, name, filename, line in db.rows(FRAMES_SQL, [rank, ids, MAX_STACK_FRAMES]):
            out[str(sid)].append({"name": name, "filename": filename, "line": line})
    return out


def block(db, ax: Axis, block_id: int) -> dict:
    rows = db.dicts(BLOCK_SQL, [ax.rank, block_id])
    if not rows or rows[0]["device"] != ax.device:
        raise NotFound("no_block", f"no block {block_id} on rank {ax.rank} device {ax.device}")
    b = rows[0]
    start = b["alloc_ts_ns"] if ax.kind == "ns" else b["alloc_idx"]
    end = b["free_ts_ns"] if ax.kind == "ns" else b["free_idx"]
    stacks = frames(db, ax.rank, [b["stack_id"], b["free_stack_id"]])
    out = {k: b[k] for k in ("block_id", "addr", "size", "requested_size", "stream", "alloc_idx", "free_requested_idx",
                             "free_idx", "state_at_dump", "segment_address", "stack_id", "free_stack_id")}
    out.update({"x0": ax.rel(start), "x1": ax.rel(end), "before_trace": b["alloc_idx"] is None,
                "live_at_dump": b["free_idx"] is None,
                "lifetime": None if start is None or end is None else int(end) - int(start),
                "alloc_ts_ns": ns_str(b["alloc_ts_ns"]), "free_ts_ns": ns_str(b["free_ts_ns"]),
                "frames": stacks.get(str(b["stack_id"]), []), "free_frames": stacks.get(str(b["free_stack_id"]), [])})
    return out


def overview(db, rank: int, dev: dict, run_origin: int | None, file_warnings: bool = True) -> dict:
    """The snapshots of the run, and for the chosen rank its devices (figures at the dump, peak, curve bases)."""
    origin = origin_of(db, rank, run_origin)
    ax = axis_of(dev, origin)
    snaps = snapshots(db)
    mine = next(s for s in snaps if s["rank"] == rank)
    devices = [device_json(d, axis_of(d, origin)) for d in db.dicts(DEVICES_SQL, [rank])]
    warnings = [{"file": f, "message": m} for f, m in db.rows(OTHER_FILE_WARNINGS_SQL, [rank, mine["file"]])] \
        if file_warnings else []
    return {"snapshots": snaps, "rank": rank, "device": dev["device"], "axis": ax.kind,
            "origin_ns": str(ax.origin) if ax.kind == "ns" else None, "clock": _clock(ax, mine, run_origin),
            "devices": devices, "warnings": warnings}


def _clock(ax: Axis, snap: dict, run_origin: int | None) -> str:
    if ax.kind == "index":
        return "the trace has no time_us: the time axis is the entry's index in the trace, as memory_viz draws it"
    if run_origin and ax.origin == run_origin:
        return ("time_us is the allocator's clock converted to epoch µs and the profiler's times are epoch ns: both "
                "share the run's time zero")
    if run_origin:
        return ("time_us (epoch µs) lies more than an hour from the profiled span: times are from the snapshot's "
                "first entry")
    return "time_us (epoch µs), from the snapshot's first entry"
