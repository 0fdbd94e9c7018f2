"""One snapshot file into the ``mem_*`` tables of a rank, streaming (``ingest.memsnap.schema``).

:class:`Loader` is the :class:`~ingest.memsnap.pickles.Handler` the reader calls: each trace entry becomes a row of
``mem_events`` (columns buffered in arrays, appended every ``FLUSH_ROWS``); block lives are paired as the entries
go by (an ``alloc`` opens one at its address, ``free_requested`` marks it, ``free_completed`` closes it; a free
with no ``alloc`` before it closes a life that began before the trace), so only the blocks live at a moment are
held. At the end (:meth:`Loader.finish`) the lives still open are matched with the blocks live at the dump, whose
other active blocks were allocated before the trace began: the state at the dump is the ground truth and the trace
(a ring buffer that starts mid-run) is read back from it. Segment lives come from ``segments.replay``.

Curves: each event carries the running sums of what the trace adds and removes (``active_rel`` …); the device's
``*_base`` is what was there before its first entry (the dump's figure less the trace's net change), so a figure at
an event is ``base + rel``. torch_npu's leading ``workspace_snapshot`` / ``segment_alloc`` / ``alloc`` triples
describe its workspace pools at the dump, not history: they are kept (``synthetic``, without a time) but change
nothing.
"""

from __future__ import annotations

import json
import time
from array import array
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..columns import arrow_table, insert_columns
from . import pickles, segments

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "snapshot", "oom", "workspace_snapshot", "free", "other")
CODE = {a: i for i, a in enumerate(ACTIONS)}
ALLOC, FREE_REQ, FREE_DONE, SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP, SNAP, OOM, WORKSPACE, FREE, OTHER = range(12)
KNOWN_KEYS = {"action", "addr", "size", "stream", "frames", "time_us", "device_free"}
NULL = -(1 << 63)
INT64_MAX = (1 << 63) - 1
FLUSH_ROWS = 1 << 18
LOD_SHIFT = 10  # the first level of mem_curve_lod: 1,024 entries per bucket …
LOD_LEVELS = (10, 16)  # … and the next: 65,536
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")

EVENT_COLUMNS = ("device", "idx", "action", "addr", "size", "stream", "ts_ns", "stack_id", "block_id",
                 "device_free", "synthetic", "active_rel", "allocated_rel", "reserved_rel")
BLOCK_COLUMNS = ("device", "block_id", "addr", "size", "requested_size", "stream", "stack_id", "alloc_idx",
                 "alloc_ts_ns", "free_requested_idx", "free_requested_ts_ns", "free_idx", "free_ts_ns",
                 "free_stack_id", "state_at_dump", "segment_address")


def _opt(v: int) -> int | None:
    return None if v == NULL else v


def _int(v) -> int:
    """An int64 column value, or NULL for anything else (bool, None, out of range)."""
    if type(v) is int and -INT64_MAX <= v <= INT64_MAX:
        return v
    return NULL


@dataclass
class Device:
    """What streaming one device's trace keeps."""

    device: int
    entries: int = 0
    active: int = 0  # running sums of the trace's changes (see the module note)
    allocated: int = 0
    reserved: int = 0
    open: dict = field(default_factory=dict)  # addr -> an open life (a list, see Loader._life)
    seg_events: list = field(default_factory=list)  # (idx, ts_ns, action, addr, size, stream, stack_id)
    timed: int = 0  # entries with a time
    synthetic: int = 0  # entries that describe the dump, not history (the workspace triples)
    first_ts: int | None = None
    last_ts: int | None = None
    workspace: list | None = None  # a workspace_snapshot's (addr, size, stream, step) while its triple is read
    workspaces: list = field(default_factory=list)  # (addr, size, stream)
    ooms: int = 0
    anomalies: dict = field(default_factory=lambda: defaultdict(int))


class Loader(pickles.Handler):
    """Streams one snapshot into the ``mem_*`` tables of ``rank`` through the DuckDB cursor ``cur``."""

    def __init__(self, cur, rank: int, file: str, size_bytes: int, on_progress=lambda f: None):
        self.cur, self.rank, self.file, self.size_bytes = cur, rank, file, max(1, size_bytes)
        self.on_progress = on_progress
        self.started = time.perf_counter()
        self.devices: dict[int, Device] = {}
        self.ev = {c: array("q") for c in EVENT_COLUMNS}
        self.bl = {c: array("q") for c in BLOCK_COLUMNS}
        self.extra: list[list] = []
        self.dump_segments: list[dict] = []  # small: one dict per segment, blocks summarised
        self.dump_blocks: dict[int, dict[int, tuple]] = defaultdict(dict)  # device -> addr -> active block
        self.next_block = 0
        self.settings: dict | None = None
        self.annotations: list[list] = []
        self.annotation_count = 0
        self.other_actions: dict[str, int] = defaultdict(int)
        self.warnings: list[str] = []

    # ---- the reader's calls ------------------------------------------------------------------------------------
    def progress(self, done_bytes: int) -> None:
        self.on_progress(min(0.95, 0.95 * done_bytes / self.size_bytes))

    def root_value(self, key: str, value) -> None:
        if key == "allocator_settings" and isinstance(value, dict):
            self.settings = value

    def segment(self, seg: dict) -> None:
        device = _int(seg.get("device", 0))
        address = _int(seg.get("address"))
        if device == NULL or address == NULL:
            self._dev(0 if device == NULL else device).anomalies["segment_without_address"] += 1
            return
        blocks = seg.get("blocks") or []
        addr = address
        n = 0
        for b in blocks if isinstance(blocks, list) else []:
            if not isinstance(b, dict):
                continue
            size = _int(b.get("size"))
            state = b.get("state")
            frames = b.get("frames")
            requested = b.get("requested_size")
            if "history" in b and isinstance(b["history"], list) and b["history"]:  # torch 1.13's format
                first = b["history"][0] if isinstance(b["history"][0], dict) else {}
                requested = first.get("real_size", requested)
                frames = first.get("frames", frames)
            requested = _int(requested if requested is not None else size)
            baddr = _int(b.get("address", addr))
            if state in ("active_allocated", "active_pending_free", "active_awaiting_free"):
                state = "active_pending_free" if state != "active_allocated" else state
                stack = frames.id if isinstance(frames, pickles.StackRef) else -1
                self.dump_blocks[device][baddr] = (size, requested, state, stack, address, _int(seg.get("stream")))
            addr = baddr + (size if size != NULL else 0)
            n += 1
        pool = seg.get("segment_pool_id")
        frames = seg.get("frames")
        self.dump_segments.append({
            "device": device, "address": address, "total_size": _opt(_int(seg.get("total_size"))),
            "allocated_size": _opt(_int(seg.get("allocated_size"))), "active_size": _opt(_int(seg.get("active_size"))),
            "requested_size": _opt(_int(seg.get("requested_size"))), "stream": _opt(_int(seg.get("stream"))),
            "segment_type": seg.get("segment_type") if isinstance(seg.get("segment_type"), str) else None,
            "pool_id": ",".join(str(p) for p in pool) if isinstance(pool, (tuple, list)) else None,
            "is_expandable": bool(seg.get("is_expandable")) if seg.get("is_expandable") is not None else False,
            "stack_id": frames.id if isinstance(frames, pickles.StackRef) else -1, "blocks": n})
        self._dev(device)

    def annotation(self, a: dict) -> None:
        self.annotation_count += 1
        if len(self.annotations) < 100_000:
            t = a.get("time_us")
            meta = {str(k): v for k, v in a.items() if k not in ("device", "time_us", "name", "stage")
                    and isinstance(v, (str, int, float, bool))}
            self.annotations.append([_int(a.get("device", 0)), t * 1000 if type(t) is int else None,
                                     str(a["name"]) if "name" in a else None,
                                     str(a["stage"]) if "stage" in a else None, json.dumps(meta) if meta else None])

    def _dev(self, device: int) -> Device:
        d = self.devices.get(device)
        if d is None:
            d = self.devices[device] = Device(device)
        return d

    def entry(self, device: int, e: dict) -> None:
        d = self.devices.get(device) or self._dev(device)
        idx = d.entries
        d.entries += 1
        action = e.get("action")
        code = CODE.get(action, OTHER) if type(action) is str else OTHER
        if code == OTHER:
            self.other_actions[str(action)[:40]] += 1
        addr = _int(e.get("addr"))
        size = _int(e.get("size"))
        stream = _int(e.get("stream"))
        frames = e.get("frames")
        stack = frames.id if type(frames) is pickles.StackRef else -1
        t = e.get("time_us")
        ts = t * 1000 if type(t) is int and 0 < t < INT64_MAX // 1000 else NULL
        device_free = _int(e.get("device_free")) if code == OOM else NULL
        synthetic = 0
        block = NULL
        ws = d.workspace
        if code == WORKSPACE:
            synthetic = 1
            d.workspace = [addr, size, stream, 1]
            d.workspaces.append((addr, size, stream))
        elif ws is not None:
            want = SEG_ALLOC if ws[3] == 1 else ALLOC
            if code == want and addr == ws[0] and size == ws[1]:
                synthetic = 1
                ws[3] += 1
                if ws[3] == 3:
                    d.workspace = None
            else:
                d.anomalies["workspace_snapshot_without_its_segment_and_block"] += 1
                d.workspace = None
        if synthetic:
            ts = NULL  # written at the dump, not when it happened: no time of its own
            d.synthetic += 1
        elif ts != NULL:
            d.timed += 1
            if d.first_ts is None:
                d.first_ts = ts
            d.last_ts = ts
        if synthetic:
            pass
        elif code == ALLOC:
            if size == NULL or addr == NULL:
                d.anomalies["alloc_without_addr_or_size"] += 1
            else:
                old = d.open.pop(addr, None)
                if old is not None:
                    d.anomalies["alloc_over_a_live_block"] += 1
                    old[9], old[10] = idx, ts
                    self._emit(d, old)
                life = [self._new_block(), addr, size, stream, stack, idx, ts, NULL, NULL, NULL, NULL, -1]
                d.open[addr] = life
                block = life[0]
                d.active += size
                d.allocated += size
        elif code in (FREE_REQ, FREE_DONE, FREE):
            life = d.open.get(addr) if addr != NULL else None
            if life is None and addr != NULL:  # the block was allocated before the trace began
                life = [self._new_block(), addr, size, stream, stack, NULL, NULL, NULL, NULL, NULL, NULL, -1]
                d.open[addr] = life
            if life is not None:
                block = life[0]
                if life[2] != size and size != NULL:
                    d.anomalies["free_size_differs_from_alloc"] += 1
                if code != FREE_DONE:
                    if life[7] != NULL:
                        d.anomalies["free_requested_twice"] += 1
                    life[7], life[8] = idx, ts
                    if stack >= 0:
                        life[11] = stack
                if code != FREE_REQ:
                    life[9], life[10] = idx, ts
                    if life[11] < 0 and stack >= 0:
                        life[11] = stack
                    del d.open[addr]
                    self._emit(d, life)
            if size != NULL:
                if code != FREE_DONE:
                    d.allocated -= size
                if code != FREE_REQ:
                    d.active -= size
        elif SEG_ALLOC <= code <= SEG_UNMAP:
            if size != NULL and addr != NULL:
                d.reserved += size if code in (SEG_ALLOC, SEG_MAP) else -size
                d.seg_events.append((idx, _opt(ts), code, addr, size, _opt(stream), stack))
            else:
                d.anomalies["segment_event_without_addr_or_size"] += 1
        elif code == OOM:
            d.ooms += 1
        ev = self.ev
        ev["device"].append(device)
        ev["idx"].append(idx)
        ev["action"].append(code)
        ev["addr"].append(addr)
        ev["size"].append(size)
        ev["stream"].append(stream)
        ev["ts_ns"].append(ts)
        ev["stack_id"].append(stack)
        ev["block_id"].append(block)
        ev["device_free"].append(device_free)
        ev["synthetic"].append(synthetic)
        ev["active_rel"].append(d.active)
        ev["allocated_rel"].append(d.allocated)
        ev["reserved_rel"].append(d.reserved)
        if len(e) > 5 or code == OTHER:
            self._extra(device, idx, e, code, action)
        if len(ev["idx"]) >= FLUSH_ROWS:
            self._flush_events()

    def _extra(self, device: int, idx: int, e: dict, code: int, action) -> None:
        if code == OTHER:
            self.extra.append([device, idx, "action", str(action)[:200]])
        for k, v in e.items():
            if k in KNOWN_KEYS or v in ("", None, (0, 0), [], {}):
                continue
            text = ",".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
            if len(self.extra) < 5_000_000:
                self.extra.append([device, idx, str(k)[:100], text[:2000]])

    def _new_block(self) -> int:
        self.next_block += 1
        return self.next_block

    def _emit(self, d: Device, life: list, dump: tuple | None = None) -> None:
        """A life into the mem_blocks buffer. ``dump``: the block as the dump lists it (live at the dump)."""
        bl = self.bl
        bl["device"].append(d.device)
        bl["block_id"].append(life[0])
        bl["addr"].append(life[1])
        bl["size"].append(dump[0] if dump else NULL)
        bl["requested_size"].append(life[2])
        bl["stream"].append(life[3])
        bl["stack_id"].append(life[4] if life[4] >= 0 else (dump[3] if dump else -1))
        for k, c in zip((5, 6, 7, 8, 9, 10), ("alloc_idx", "alloc_ts_ns", "free_requested_idx",
                                             "free_requested_ts_ns", "free_idx", "free_ts_ns")):
            bl[c].append(life[k])
        bl["free_stack_id"].append(life[11])
        bl["state_at_dump"].append(BLOCK_STATES.index(dump[2]) if dump else -1)
        bl["segment_address"].append(dump[4] if dump else NULL)
        if len(bl["block_id"]) >= FLUSH_ROWS:
            self._flush_blocks()

    # ---- writing -----------------------------------------------------------------------------------------------
    def _flush_events(self) -> None:
        ev = self.ev
        if not ev["idx"]:
            return
        batch = arrow_table({c: np.frombuffer(ev[c], dtype=np.int64) if ev[c].typecode == "q" else
                             np.frombuffer(ev[c], dtype=np.int8) for c in EVENT_COLUMNS})
        name = f"memsnap_events_{id(self)}"
        self.cur.register(name, batch)
        try:
            self.cur.execute(f"""INSERT INTO mem_events SELECT ?, device::INTEGER, idx, (?::VARCHAR[])[action + 1],
                nullif(addr, {NULL}), nullif(size, {NULL}), nullif(stream, {NULL}), nullif(ts_ns, {NULL}),
                nullif(stack_id, -1)::INTEGER, nullif(block_id, {NULL}), nullif(device_free, {NULL}),
                synthetic = 1, active_rel, allocated_rel, reserved_rel FROM {name}""", [self.rank, list(ACTIONS)])
        finally:
            self.cur.unregister(name)
        for c in EVENT_COLUMNS:
            ev[c] = array("q")

    def _flush_blocks(self) -> None:
        bl = self.bl
        if not bl["block_id"]:
            return
        batch = arrow_table({c: np.frombuffer(bl[c], dtype=np.int64) for c in BLOCK_COLUMNS})
        name = f"memsnap_blocks_{id(self)}"
        nulls = {c: f"nullif({c}, {NULL})" for c in BLOCK_COLUMNS}
        self.cur.register(name, batch)
        try:
            self.cur.execute(f"""INSERT INTO mem_blocks SELECT ?, device::INTEGER, block_id, addr, {nulls['size']},
                requested_size, {nulls['stream']}, nullif(stack_id, -1)::INTEGER, {nulls['alloc_idx']},
                {nulls['alloc_ts_ns']}, {nulls['free_requested_idx']}, {nulls['free_requested_ts_ns']},
                {nulls['free_idx']}, {nulls['free_ts_ns']}, nullif(free_stack_id, -1)::INTEGER,
                (?::VARCHAR[])[nullif(state_at_dump, -1) + 1], {nulls['segment_address']} FROM {name}""",
                             [self.rank, list(BLOCK_STATES)])
        finally:
            self.cur.unregister(name)
        for c in BLOCK_COLUMNS:
            bl[c] = array("q")

    def finish(self, stacks: pickles.Stacks) -> dict:
        """Close the lives, write the segments, frames, curves' level of detail and the per-device figures;
        returns the ``mem_snapshots`` row as a dict (its ``warnings`` are the load's)."""
        self._flush_events()
        for device in sorted(self.devices):
            d = self.devices[device]
            dump = self.dump_blocks.pop(device, {})
            for addr, life in sorted(d.open.items()):
                got = dump.pop(addr, None)
                if got is None:
                    d.anomalies["live_by_the_trace_but_not_in_the_dump"] += 1
                else:
                    if got[1] != life[2]:
                        d.anomalies["requested_size_differs_from_the_dump"] += 1
                    if (got[2] == "active_pending_free") != (life[7] != NULL):
                        d.anomalies["pending_free_differs_from_the_dump"] += 1
                self._emit(d, life, got)
            d.open.clear()
            for addr, b in sorted(dump.items()):  # live at the dump, allocated before the trace began
                self._emit(d, [self._new_block(), addr, b[1], b[5], b[3], NULL, NULL, NULL, NULL, NULL, NULL, -1],
                           b)
        self._flush_blocks()
        self._write_segments()
        self._write_frames(stacks)
        self._write_extra()
        devices = self._write_devices()
        self._write_lod()
        return self._write_snapshot(stacks, devices)

    def _write_segments(self) -> None:
        rows = []
        for device in sorted(self.devices):
            d = self.devices[device]
            dump = [s for s in self.dump_segments if s["device"] == device]
            for addr, _size, _stream in d.workspaces:
                for s in dump:
                    if s["address"] == addr:
                        s["is_workspace"] = True
                        break
                else:
                    d.anomalies["workspace_not_in_the_dump"] += 1
            pieces, anomalies = segments.replay(dump, d.seg_events)
            for k, v in anomalies.items():
                d.anomalies[k] += v
            rows.extend([self.rank, device, *p] for p in pieces)
        if rows:
            insert_columns(self.cur, "mem_segments", [list(c) for c in zip(*rows)])

    def _write_frames(self, stacks: pickles.Stacks) -> None:
        cols: list[list] = [[], [], [], [], []]
        for sid, ids in enumerate(stacks.stacks):
            for depth, fid in enumerate(ids):
                filename, line, name = stacks.frames[fid]
                for col, v in zip(cols, (sid, depth, name, filename, line)):
                    col.append(v)
            if len(cols[0]) >= FLUSH_ROWS:
                self._insert_frames(cols)
                cols = [[], [], [], [], []]
        self._insert_frames(cols)

    def _insert_frames(self, cols: list[list]) -> None:
        if cols[0]:
            self.cur.execute("INSERT INTO mem_frames SELECT ?, unnest(?), unnest(?), unnest(?), unnest(?), "
                             "unnest(?)", [self.rank, *cols])

    def _write_extra(self) -> None:
        if self.extra:
            cols = [list(c) for c in zip(*self.extra)]
            self.cur.execute("INSERT INTO mem_event_extra SELECT ?, unnest(?), unnest(?), unnest(?), unnest(?)",
                             [self.rank, *cols])
        if self.annotations:
            cols = [list(c) for c in zip(*self.annotations)]
            self.cur.execute("INSERT INTO mem_annotations SELECT ?, unnest(?), unnest(?), unnest(?), unnest(?), "
                             "unnest(?)::JSON", [self.rank, *cols])

    def _write_devices(self) -> list[dict]:
        out = []
        for device in sorted(self.devices):
            d = self.devices[device]
            dump = [s for s in self.dump_segments if s["device"] == device]
            blocks = self.cur.execute(BLOCK_FIGURES, [self.rank, device]).fetchone()
            (n_blocks, before, live_end, allocated_end, active_end, requested_end, active_req_end) = blocks
            reserved_end = sum(s["total_size"] for s in dump if s["total_size"] is not None)
            base = {"active": active_req_end - d.active, "allocated": requested_end - d.allocated,
                    "reserved": reserved_end - d.reserved}
            figures = self.cur.execute(CURVE_FIGURES, [base["active"], base["allocated"], base["reserved"],
                                                       self.rank, device]).fetchone()
            peak, peak_idx, peak_ts, min_active, min_allocated, min_reserved = figures
            if d.entries == 0 or peak is None or peak < base["active"]:  # the state before the first entry
                peak, peak_idx, peak_ts = base["active"], None, None
            lows = ((min_active, base["active"]), (min_allocated, base["allocated"]),
                    (min_reserved, base["reserved"]))
            mins = [min(v, b) if v is not None else b for v, b in lows]
            for name, v in zip(("active", "allocated", "reserved"), mins):
                if v < 0:
                    d.anomalies[f"{name}_below_zero"] += 1
            timed = d.timed > 0 and d.timed + d.synthetic == d.entries
            row = {"device": device, "entries": d.entries, "has_time": timed,
                   "first_ts_ns": d.first_ts, "last_ts_ns": d.last_ts, "segments_at_dump": len(dump),
                   "reserved_at_dump": reserved_end, "allocated_at_dump": allocated_end, "active_at_dump": active_end,
                   "requested_at_dump": requested_end, "active_requested_at_dump": active_req_end,
                   "active_base": base["active"], "allocated_base": base["allocated"],
                   "reserved_base": base["reserved"], "peak_active": peak, "peak_idx": peak_idx, "peak_ts_ns": peak_ts,
                   "min_active": mins[0], "min_allocated": mins[1], "min_reserved": mins[2], "blocks": n_blocks,
                   "blocks_before_trace": before, "blocks_live_at_dump": live_end,
                   "workspace_bytes": sum(s for _, s, _ in d.workspaces if s != NULL), "ooms": d.ooms,
                   "anomalies": json.dumps(dict(sorted(d.anomalies.items()))) if d.anomalies else None}
            self.cur.execute(f"INSERT INTO mem_devices VALUES (?, {', '.join('?' * len(row))})",
                             [self.rank, *row.values()])
            for what, n in sorted(d.anomalies.items()):
                self.warnings.append(f"device {device}: {n} × {what.replace('_', ' ')} (docs/formats.md, "
                                     "memory snapshots)")
            out.append(row)
        return out

    def _write_lod(self) -> None:
        for device, d in self.devices.items():
            if d.entries <= 1 << LOD_SHIFT:
                continue
            for level in LOD_LEVELS:
                if d.entries <= 1 << level:
                    break
                self.cur.execute(LOD_SQL.format(shift=level), [level, self.rank, device])

    def _write_snapshot(self, stacks: pickles.Stacks, devices: list[dict]) -> dict:
        flavour = None
        keys = set(self.settings or {})
        if any("CUDA" in str(k) for k in keys):
            flavour = "cuda"
        elif any("NPU" in str(k) for k in keys) or any(d.workspaces for d in self.devices.values()):
            flavour = "npu"
        row = {"file": self.file, "size_bytes": self.size_bytes, "flavour": flavour, "devices": len(devices),
               "entries": sum(d["entries"] for d in devices), "segments": len(self.dump_segments),
               "frames": len(stacks.frames), "stacks": len(stacks.stacks), "annotations": self.annotation_count,
               "settings": json.dumps(self.settings, default=str) if self.settings else None,
               "seconds": round(time.perf_counter() - self.started, 3)}
        self.cur.execute(f"INSERT INTO mem_snapshots VALUES (?, {', '.join('?' * len(row))})",
                         [self.rank, *row.values()])
        if self.other_actions:
            listed = ", ".join(f"{k} ×{v}" for k, v in sorted(self.other_actions.items()))
            self.warnings.append(f"trace entries of actions this version does not know, kept in mem_events as "
                                 f"'other' (their name in mem_event_extra): {listed}")
        if self.annotation_count > len(self.annotations):
            self.warnings.append(f"{self.annotation_count} external annotations: the first {len(self.annotations)} "
                                 "are kept")
        return row


BLOCK_FIGURES = """
SELECT count(*), count(*) FILTER (alloc_idx IS NULL), count(*) FILTER (free_idx IS NULL),
       coalesce(sum(size) FILTER (free_idx IS NULL AND state_at_dump = 'active_allocated'), 0)::BIGINT,
       coalesce(sum(size) FILTER (free_idx IS NULL AND state_at_dump IS NOT NULL), 0)::BIGINT,
       coalesce(sum(requested_size) FILTER (free_idx IS NULL AND state_at_dump = 'active_allocated'), 0)::BIGINT,
       coalesce(sum(requested_size) FILTER (free_idx IS NULL AND state_at_dump IS NOT NULL), 0)::BIGINT
FROM mem_blocks WHERE rank = ? AND device = ?
"""
# the peak of active memory (its earliest entry) and the lowest of each curve, over the entries
CURVE_FIGURES = """
SELECT max(active_rel) + $1, arg_min(idx, (-active_rel, idx)), arg_min(ts_ns, (-active_rel, idx)),
       min(active_rel) + $1, min(allocated_rel) + $2, min(reserved_rel) + $3
FROM mem_events WHERE rank = $4 AND device = $5
"""
LOD_SQL = """
INSERT INTO mem_curve_lod
SELECT rank, device, ?, idx >> {shift}, min(idx), max(idx), min(ts_ns), max(ts_ns), min(active_rel),
       max(active_rel), min(allocated_rel), max(allocated_rel), min(reserved_rel), max(reserved_rel),
       arg_max(active_rel, idx), arg_max(allocated_rel, idx), arg_max(reserved_rel, idx)
FROM mem_events WHERE rank = ? AND device = ? GROUP BY rank, device, idx >> {shift} ORDER BY 4
"""


def load(cur, path, rank: int, file: str, on_progress=lambda f: None, limits: pickles.Limits | None = None
         ) -> tuple[dict, list[str]]:
    """Read the snapshot at ``path`` into the ``mem_*`` tables for ``rank``; returns its ``mem_snapshots`` row
    and the warnings. Raises ``pickles.BadPickle`` (or ``RefusedPickle``) when the file cannot be read: nothing
    of it is kept then."""
    from pathlib import Path

    size = Path(path).stat().st_size
    loader = Loader(cur, rank, file, size, on_progress)
    try:
        with open(path, "rb") as fh:
            stacks = pickles.read(fh, loader, limits)
        row = loader.finish(stacks)
    except BaseException:
        for table in ("mem_events", "mem_blocks", "mem_segments", "mem_frames", "mem_event_extra", "mem_devices",
                      "mem_curve_lod", "mem_annotations", "mem_snapshots"):
            cur.execute(f"DELETE FROM {table} WHERE rank = ?", [rank])
        raise
    on_progress(1.0)
    return row, loader.warnings
