"""Memory snapshot view: the snapshots of a run, a device's time axis, its figures, one block's details
(``ingest.memsnap`` wrote the tables; ``memsnap_curve`` answers the curves and the stacked allocations,
``memsnap_state`` the state, leaks and OOM).

The time axis of a device (:class:`Axis`): its entries' ``time_us`` as epoch ns when every entry has one (``ns``),
else the entry's index in its trace (``index``), as memory_viz draws it. Answers give x relative to ``origin_ns``
(:func:`origin_of`: the run's time zero when the rank was profiled while the snapshot recorded, else the snapshot's
first entry) on a ``ns`` axis, the index on an ``index`` axis. A figure *at* x is the state after the last entry at
or before x.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendscope.server.queries import NotFound, QueryError, ns_str

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
RUN_ORIGIN_SQL = "SELECT (SELECT min(start_ns) FROM ranks), (SELECT min(min_ts_ns) FROM tracks)"
RUN_SPAN_SQL = "SELECT min(start_ns), max(end_ns) FROM ranks"
CLOCK_SLACK_NS = 3_600 * 10 ** 9  # a snapshot dumped within an hour of the profiled span shares its time zero
LAST_AT_OR_BEFORE_SQL = "SELECT max(idx) FROM mem_events WHERE rank = ? AND device = ? AND ts_ns <= ?"
FIRST_AT_OR_AFTER_SQL = "SELECT min(idx) FROM mem_events WHERE rank = ? AND device = ? AND ts_ns >= ?"
EVENT_AT_SQL = """
SELECT idx, ts_ns, active_rel, allocated_rel, reserved_rel FROM mem_events
WHERE rank = ? AND device = ? AND idx = ?
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


def run_origin(db) -> int | None:
    """The run's time zero as the timeline has it (``server.db.RunInfo.origin_ns``), None for a run without
    ranks or tracks (a snapshot alone)."""
    row = db.rows(RUN_ORIGIN_SQL)
    starts = [v for v in (row[0] if row else ()) if v is not None]
    return int(min(starts)) if starts and min(starts) else None


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
