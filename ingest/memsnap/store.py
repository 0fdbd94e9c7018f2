"""Writing one snapshot's ``mem_*`` rows (``ingest.memsnap.load``'s other half): the buffered event and block rows
as Arrow batches (one conversion per ``FLUSH_ROWS``), and, once the file is read, the segment pieces
(``segments.replay``), the distinct stacks' frames, the rare entry keys, each device's figures (the dump's totals,
the curves' bases, the peak, the lowest of each curve, the inconsistencies) and the curves' level of detail.
"""

from __future__ import annotations

import json
import time

import numpy as np

from ..columns import arrow_table, insert_columns
from . import segments
from .values import Stacks

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "snapshot", "oom", "workspace_snapshot", "free", "other")
CODE = {a: i for i, a in enumerate(ACTIONS)}
ALLOC, FREE_REQ, FREE_DONE, SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP, SNAP, OOM, WORKSPACE, FREE, OTHER = range(12)
KNOWN_KEYS = {"action", "addr", "size", "stream", "frames", "time_us", "device_free"}
NULL = -(1 << 63)
INT64_MAX = (1 << 63) - 1
FLUSH_ROWS = 1 << 16
LOD_SHIFT = 10  # the first level of mem_curve_lod: 1,024 entries per bucket …
LOD_LEVELS = (10, 16)  # … and the next: 65,536
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")

EVENT_COLUMNS = ("device", "idx", "action", "addr", "size", "stream", "ts_ns", "stack_id", "block_id",
                 "device_free", "synthetic", "active_rel", "allocated_rel", "reserved_rel")
BLOCK_COLUMNS = ("device", "block_id", "addr", "size", "requested_size", "stream", "stack_id", "alloc_idx",
                 "alloc_ts_ns", "free_requested_idx", "free_requested_ts_ns", "free_idx", "free_ts_ns",
                 "free_stack_id", "state_at_dump", "segment_address")


def _columns(rows: list[tuple], names: tuple[str, ...]):
    """Rows of int64 values as an Arrow table of ``names`` (one C-level conversion, no Python per value)."""
    table = np.array(rows, dtype=np.int64).reshape(len(rows), len(names))
    return arrow_table({name: table[:, k] for k, name in enumerate(names)})


def _columns(rows: list[tuple], names: tuple[str, ...]):
    """Rows of int64 values as an Arrow table of ``names`` (one C-level conversion, no Python per value)."""
    table = np.array(rows, dtype=np.int64).reshape(len(rows), len(names))
    return arrow_table({name: table[:, k] for k, name in enumerate(names)})


class Store:
    """The writing half of ``load.Loader`` (which holds ``cur``, ``rank``, ``devices``, ``rows`` …)."""

    def _flush_events(self) -> None:
        if not self.rows:
            return
        batch = _columns(self.rows, EVENT_COLUMNS)
        self.rows = []
        name = f"memsnap_events_{id(self)}"
        self.cur.register(name, batch)
        try:
            self.cur.execute(f"""INSERT INTO mem_events SELECT ?, device::INTEGER, idx, (?::VARCHAR[])[action + 1],
                nullif(addr, {NULL}), nullif(size, {NULL}), nullif(stream, {NULL}), nullif(ts_ns, {NULL}),
                nullif(stack_id, -1)::INTEGER, nullif(block_id, {NULL}), nullif(device_free, {NULL}),
                synthetic = 1, active_rel, allocated_rel, reserved_rel FROM {name}""", [self.rank, list(ACTIONS)])
        finally:
            self.cur.unregister(name)

    def _flush_blocks(self) -> None:
        if not self.blocks:
            return
        batch = _columns(self.blocks, BLOCK_COLUMNS)
        self.blocks = []
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

    def finish(self, stacks: Stacks) -> dict:
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

    def _write_frames(self, stacks: Stacks) -> None:
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

    def _write_snapshot(self, stacks: Stacks, devices: list[dict]) -> dict:
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
