"""One snapshot file into the ``mem_*`` tables of a rank, streaming (``ingest.memsnap.schema``).

:class:`Loader` is the :class:`~ingest.memsnap.pickles.Handler` the reader calls: each trace entry becomes a row of
``mem_events`` (rows buffered, written every ``FLUSH_ROWS`` by ``store.Store``); block lives are paired as the entries
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
from collections import defaultdict
from dataclasses import dataclass, field

from . import pickles
from .store import (
    ALLOC,
    BLOCK_STATES,
    CODE,
    FLUSH_ROWS,
    FREE,
    FREE_DONE,
    FREE_REQ,
    INT64_MAX,
    KNOWN_KEYS,
    NULL,
    OOM,
    OTHER,
    SEG_ALLOC,
    SEG_MAP,
    SEG_UNMAP,
    WORKSPACE,
    Store,
)
from .values import StackRef

TIME_US_MAX = INT64_MAX // 1000


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


class Loader(Store, pickles.Handler):
    """Streams one snapshot into the ``mem_*`` tables of ``rank`` through the DuckDB cursor ``cur``."""

    def __init__(self, cur, rank: int, file: str, size_bytes: int, on_progress=lambda f: None):
        self.cur, self.rank, self.file, self.size_bytes = cur, rank, file, max(1, size_bytes)
        self.on_progress = on_progress
        self.started = time.perf_counter()
        self.devices: dict[int, Device] = {}
        self.rows: list[tuple] = []  # mem_events rows (EVENT_COLUMNS) not yet written
        self.blocks: list[tuple] = []  # mem_blocks rows (BLOCK_COLUMNS) not yet written
        self.extra: list[list] = []
        self.dump_segments: list[dict] = []  # small: one dict per segment, blocks summarised
        self.dump_blocks: dict[int, dict[int, tuple]] = defaultdict(dict)  # device -> addr -> active block
        self.next_block = 0
        self.settings: dict | None = None
        self.annotations: list[list] = []
        self.annotation_count = 0
        self.other_actions: dict[str, int] = defaultdict(int)
        self.warnings: list[str] = []
        self._last_device: int | None = None  # the device of the last entry, and its state
        self._last: Device | None = None

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

    def entry(self, device: int, e: dict) -> None:  # the hot path: one call per trace entry
        d = self._last if device == self._last_device else self._switch(device)
        idx = d.entries
        d.entries = idx + 1
        get = e.get
        action = get("action")
        code = CODE.get(action, OTHER) if type(action) is str else OTHER
        addr = get("addr", NULL)
        if type(addr) is not int or not -INT64_MAX <= addr <= INT64_MAX:
            addr = _int(addr)
        size = get("size", NULL)
        if type(size) is not int or not -INT64_MAX <= size <= INT64_MAX:
            size = _int(size)
        stream = get("stream", NULL)
        if type(stream) is not int or not -INT64_MAX <= stream <= INT64_MAX:
            stream = _int(stream)
        frames = get("frames")
        stack = frames.id if type(frames) is StackRef else -1
        t = get("time_us")
        ts = t * 1000 if type(t) is int and 0 < t < TIME_US_MAX else NULL
        block = NULL
        if d.workspace is not None or code == WORKSPACE:
            if self._workspace(d, code, addr, size, stream):  # torch_npu's triple at the head: no history
                self.rows.append((device, idx, code, addr, size, stream, NULL, stack, NULL, NULL, 1, d.active,
                                  d.allocated, d.reserved))
                d.synthetic += 1
                return
        if ts != NULL:
            d.timed += 1
            if d.first_ts is None:
                d.first_ts = ts
            d.last_ts = ts
        if code == ALLOC:
            if size == NULL or addr == NULL:
                d.anomalies["alloc_without_addr_or_size"] += 1
            else:
                old = d.open.pop(addr, None)
                if old is not None:
                    d.anomalies["alloc_over_a_live_block"] += 1
                    old[9], old[10] = idx, ts
                    self._emit(d, old)
                self.next_block += 1
                block = self.next_block
                d.open[addr] = [block, addr, size, stream, stack, idx, ts, NULL, NULL, NULL, NULL, -1]
                d.active += size
                d.allocated += size
        elif FREE_REQ <= code <= FREE_DONE or code == FREE:
            block = self._free(d, code, idx, ts, addr, size, stream, stack)
        elif SEG_ALLOC <= code <= SEG_UNMAP:
            if size != NULL and addr != NULL:
                d.reserved += size if code == SEG_ALLOC or code == SEG_MAP else -size
                d.seg_events.append((idx, _opt(ts), code, addr, size, _opt(stream), stack))
            else:
                d.anomalies["segment_event_without_addr_or_size"] += 1
        elif code == OOM:
            d.ooms += 1
        elif code == OTHER:
            self.other_actions[str(action)[:40]] += 1
        self.rows.append((device, idx, code, addr, size, stream, ts, stack, block,
                          _int(get("device_free")) if code == OOM else NULL, 0, d.active, d.allocated, d.reserved))
        if code == OTHER or (len(e) > 5 and e.keys() - KNOWN_KEYS):
            self._extra(device, idx, e, code, action)
        if len(self.rows) >= FLUSH_ROWS:
            self._flush_events()

    def _switch(self, device: int) -> Device:
        self._last_device, self._last = device, self._dev(device)
        return self._last

    def _workspace(self, d: Device, code: int, addr: int, size: int, stream: int) -> bool:
        """Whether this entry is part of a workspace triple (``workspace_snapshot``, ``segment_alloc``, ``alloc`` of
        one address and size)."""
        if code == WORKSPACE:
            d.workspace = [addr, size, stream, 1]
            d.workspaces.append((addr, size, stream))
            return True
        ws = d.workspace
        if code == (SEG_ALLOC if ws[3] == 1 else ALLOC) and addr == ws[0] and size == ws[1]:
            ws[3] += 1
            if ws[3] == 3:
                d.workspace = None
            return True
        d.anomalies["workspace_snapshot_without_its_segment_and_block"] += 1
        d.workspace = None
        return False

    def _free(self, d: Device, code: int, idx: int, ts: int, addr: int, size: int, stream: int, stack: int) -> int:
        """A free request or completion: its life (one that began before the trace when none is open); returns
        the life's block id."""
        block = NULL
        life = d.open.get(addr) if addr != NULL else None
        if life is None and addr != NULL:  # the block was allocated before the trace began
            self.next_block += 1
            life = [self.next_block, addr, size, stream, stack, NULL, NULL, NULL, NULL, NULL, NULL, -1]
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
        return block

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
        self.blocks.append((d.device, life[0], life[1], dump[0] if dump else NULL, life[2], life[3],
                            life[4] if life[4] >= 0 else (dump[3] if dump else -1), life[5], life[6], life[7],
                            life[8], life[9], life[10], life[11], BLOCK_STATES.index(dump[2]) if dump else -1,
                            dump[4] if dump else NULL))
        if len(self.blocks) >= FLUSH_ROWS:
            self._flush_blocks()

    # ---- writing -----------------------------------------------------------------------------------------------
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
