"""Reserved memory over the trace: the segments at the dump, read backwards through the segment events.

The trace is a ring buffer, so what was reserved when it begins is unknown until it is rebuilt from the end: start
with the segments at the dump (each an address range) and walk the ``segment_*`` entries from the last to the
first. Going back over a ``segment_free`` / ``segment_unmap`` puts its range back (it was reserved just before);
going back over a ``segment_alloc`` / ``segment_map`` takes it away (it was not reserved before), closing the
*piece* of the range it covers: that range, reserved from this entry to the end of the record it was cut from.
A range still reserved when the walk reaches the first entry was reserved before the trace began (start NULL).

Expandable segments map and unmap parts of one range, so a record is split where an entry covers only part of it
(memory_viz merges adjacent maps of one stream for its drawing; the pieces here are the exact ranges). Two
inconsistencies are counted, never hidden: a free of a range that is still reserved after it
(``segment_freed_but_still_reserved``) and an allocation of bytes that are not reserved after it
(``segment_allocated_but_not_reserved_after``, which would make reserved memory negative going back).
"""

from __future__ import annotations

import bisect
from collections import defaultdict

SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP = 3, 4, 5, 6  # load.ACTIONS' codes


class _Record:
    __slots__ = ("lo", "hi", "end", "attrs")

    def __init__(self, lo: int, hi: int, end: tuple, attrs: dict):
        self.lo, self.hi, self.end, self.attrs = lo, hi, end, attrs


def replay(dump: list[dict], events: list[tuple]) -> tuple[list[tuple], dict[str, int]]:
    """The pieces of reserved memory of one device (rows of ``mem_segments`` after its rank and device) from its
    segments at the dump (``load.Loader.dump_segments``) and its segment events ``(idx, ts_ns, action, addr, size,
    stream, stack_id)`` in trace order; and the inconsistencies counted."""
    anomalies: dict[str, int] = defaultdict(int)
    live: list[_Record] = []
    for s in sorted(dump, key=lambda s: s["address"]):
        if s["total_size"] is None or s["total_size"] <= 0:
            continue
        rec = _Record(s["address"], s["address"] + s["total_size"], (None, None), {
            "stream": s["stream"], "segment_type": s["segment_type"], "pool_id": s["pool_id"],
            "is_expandable": s["is_expandable"], "is_workspace": bool(s.get("is_workspace")),
            "stack_id": s["stack_id"], "dump": s})
        if live and live[-1].hi > rec.lo:
            anomalies["segments_overlap_at_the_dump"] += 1
            continue
        live.append(rec)
    pieces: list[tuple] = []
    for idx, ts, action, addr, size, stream, stack in reversed(events):
        lo, hi = addr, addr + size
        if action in (SEG_FREE, SEG_UNMAP):
            at = _first_overlap(live, lo)
            if at < len(live) and live[at].lo < hi:
                anomalies["segment_freed_but_still_reserved"] += 1
                continue
            live.insert(at, _Record(lo, hi, (idx, ts), {
                "stream": stream, "segment_type": None, "pool_id": None, "is_expandable": action == SEG_UNMAP,
                "is_workspace": False, "stack_id": stack, "dump": None}))
        elif action in (SEG_ALLOC, SEG_MAP):
            covered = 0
            at = _first_overlap(live, lo)
            while at < len(live) and live[at].lo < hi:
                rec = live[at]
                cut_lo, cut_hi = max(rec.lo, lo), min(rec.hi, hi)
                covered += cut_hi - cut_lo
                pieces.append(_piece(rec, cut_lo, cut_hi, (idx, ts)))
                rest = []
                if rec.lo < cut_lo:
                    rest.append(_Record(rec.lo, cut_lo, rec.end, rec.attrs))
                if cut_hi < rec.hi:
                    rest.append(_Record(cut_hi, rec.hi, rec.end, rec.attrs))
                live[at:at + 1] = rest
                at += len(rest)
            if covered < size:
                anomalies["segment_allocated_but_not_reserved_after"] += 1
    for rec in live:
        pieces.append(_piece(rec, rec.lo, rec.hi, (None, None)))
    pieces.sort(key=lambda p: (p[9] if p[9] is not None else -1, p[1]))
    rows = []
    for i, p in enumerate(pieces):
        rows.append((i, *p[1:]))
    return rows, anomalies


def _first_overlap(live: list[_Record], lo: int) -> int:
    """The index of the first record ending after ``lo`` (records are sorted and disjoint)."""
    his = [r.hi for r in live]  # (a device has few segments; the list is rebuilt per event)
    return bisect.bisect_right(his, lo)


def _piece(rec: _Record, lo: int, hi: int, start: tuple) -> tuple:
    a = rec.attrs
    dump = a["dump"]
    whole = dump is not None and rec.end[0] is None and lo == dump["address"] and hi - lo == dump["total_size"]
    figures = ((dump["address"], dump["total_size"], dump["allocated_size"], dump["active_size"],
                dump["requested_size"], dump["blocks"]) if whole else
               (dump["address"] if dump is not None else None, None, None, None, None, None))
    return (0, lo, hi - lo, a["stream"], a["segment_type"], a["pool_id"], a["is_expandable"], a["is_workspace"],
            a["stack_id"] if a["stack_id"] is not None and a["stack_id"] >= 0 else None, start[0], start[1],
            rec.end[0], rec.end[1], *figures)
