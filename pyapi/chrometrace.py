"""A run's timeline (some ranks, a time window) as a Chrome trace JSON file: what Perfetto (ui.perfetto.dev) and
chrome://tracing open, and what ``ascendscope ingest`` reads back with the same lanes, slices, counters and flows.

* Lanes: each track's process and thread, with ``process_name``, ``process_labels``, ``process_sort_index``,
  ``thread_name`` and ``thread_sort_index`` metadata events, so the lanes come in the dashboard's order. One rank
  keeps its pids; several ranks get ``rank << 32 | pid`` (pids are 32-bit) and their rank in the process label.
* Slices: ``X`` events (instants ``i``), ``ts``/``dur`` in µs written as exact decimals (``1736408883694756.090``):
  a float would round epoch nanoseconds. ``args`` as stored. Counters: one ``C`` event per value.
* Flows: one ``s``/``f`` pair per flow, paired by ``(cat, id)`` with ``id`` the flow's own id (unique across
  ranks), at the ends' own timestamps. Each end binds to the slice it was bound to: an ``s`` end and an ``f`` end
  inside its slice bind to the deepest slice enclosing them (``bp: "e"`` on the ``f``), an ``f`` end before its
  slice to the first slice starting at or after it (no ``bp``), the rules of ``ingest/nesting.py``.

A slice is written when it overlaps the window; a counter value when it is inside it; a flow when both its ends'
slices are written. Only DuckDB and the standard library.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb

PID_BITS = 32
BATCH_ROWS = 50_000
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1

TRACKS_SQL = """
SELECT track_id, rank, pid, tid, process_name, thread_name, label, process_sort_index, thread_sort_index,
       counter_name
FROM tracks WHERE rank IN (SELECT unnest(?::INTEGER[])) ORDER BY rank, sort_index, track_id
"""
SLICES_SQL = """
SELECT s.track_id, s.ts_ns, s.dur_ns, s.name, s.cat, s.ph, s.args
FROM slices s WHERE s.rank IN (SELECT unnest(?::INTEGER[])) AND s.ts_ns <= ? AND s.ts_ns + s.dur_ns >= ?
ORDER BY s.track_id, s.slice_id
"""
COUNTERS_SQL = """
SELECT track_id, name, series, ts_ns, value FROM counters
WHERE rank IN (SELECT unnest(?::INTEGER[])) AND ts_ns BETWEEN ? AND ? ORDER BY track_id, ts_ns, series
"""
# per flow: both ends' slices in the window; the f end is written with bp "e" when its slice encloses it and could
# not be the first slice starting at or after it (the slice starts before it, or is not the first of the slices
# that start at the same time: slice ids follow the order (ts, longest first))
FLOWS_SQL = """
WITH win AS (
  SELECT slice_id, track_id, ts_ns, dur_ns FROM slices
  WHERE rank IN (SELECT unnest(?::INTEGER[])) AND ts_ns <= ? AND ts_ns + dur_ns >= ?
)
SELECT f.flow_id, f.cat, f.name, f.src_track_id, f.src_ts_ns, f.dst_track_id, f.dst_ts_ns,
       d.ts_ns <= f.dst_ts_ns AND f.dst_ts_ns <= d.ts_ns + d.dur_ns
       AND (d.ts_ns < f.dst_ts_ns OR EXISTS (SELECT 1 FROM slices o WHERE o.track_id = d.track_id
                                             AND o.ts_ns = d.ts_ns AND o.slice_id < d.slice_id)) AS enclosing
FROM flows f JOIN win s ON s.slice_id = f.src_slice_id JOIN win d ON d.slice_id = f.dst_slice_id
ORDER BY f.flow_id
"""


def us(ns: int) -> str:
    """Integer ns as exact µs text: 1736408883694756090 → ``1736408883694756.090``."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(int(ns)), 1000)
    return f"{sign}{q}.{r:03d}"


def _event(ph: str, ts_ns: int | None, dur_ns: int | None = None, **fields) -> str:
    """One event as JSON text, its ts/dur spliced in as exact decimals."""
    body = json.dumps({k: v for k, v in fields.items() if v is not None}, ensure_ascii=False, separators=(",", ":"))
    head = f'{{"ph":{json.dumps(ph)}'
    if ts_ns is not None:
        head += f',"ts":{us(ts_ns)}'
    if dur_ns is not None:
        head += f',"dur":{us(dur_ns)}'
    return head + ("," + body[1:] if body != "{}" else "}")


class _Lanes:
    """Output pid/tid per track, and the metadata events naming them."""

    def __init__(self, tracks: list[tuple], several_ranks: bool):
        self.by_track: dict[int, tuple[int, int]] = {}
        self.meta: list[str] = []
        seen_pid: set[int] = set()
        dense = iter(range(1, 1 << 62))
        remap: dict[tuple[int, int], int] = {}
        for (track_id, rank, pid, tid, pname, tname, label, psort, tsort, counter) in tracks:
            pid = 0 if pid is None else int(pid)
            if several_ranks:
                key = (int(rank), pid)
                if key not in remap:
                    remap[key] = (int(rank) << PID_BITS | pid) if 0 <= pid < (1 << PID_BITS) else -next(dense)
                out_pid = remap[key]
            else:
                out_pid = pid
            out_tid = 0 if tid is None else int(tid)
            self.by_track[int(track_id)] = (out_pid, out_tid)
            if out_pid not in seen_pid:
                seen_pid.add(out_pid)
                labels = ", ".join(x for x in (label, f"rank {rank}" if several_ranks else None) if x)
                self.meta.append(_event("M", None, name="process_name", pid=out_pid, tid=0,
                                        args={"name": pname or f"Process {pid}"}))
                if labels:
                    self.meta.append(_event("M", None, name="process_labels", pid=out_pid, tid=0,
                                            args={"labels": labels}))
                if psort is not None:
                    self.meta.append(_event("M", None, name="process_sort_index", pid=out_pid, tid=0,
                                            args={"sort_index": int(psort)}))
            if counter is None and tname is not None:
                self.meta.append(_event("M", None, name="thread_name", pid=out_pid, tid=out_tid,
                                        args={"name": tname}))
                if tsort is not None:
                    self.meta.append(_event("M", None, name="thread_sort_index", pid=out_pid, tid=out_tid,
                                            args={"sort_index": int(tsort)}))


def _batches(cur: duckdb.DuckDBPyConnection):
    while True:
        rows = cur.fetchmany(BATCH_ROWS)
        if not rows:
            return
        yield from rows


def write(conn: duckdb.DuckDBPyConnection, path: str | os.PathLike, *, ranks: list[int] | None = None,
          start_ns: int | None = None, end_ns: int | None = None) -> dict:
    """Write the trace to ``path`` (atomically: a temp file renamed); returns what was written."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            counts = stream(conn, out.write, ranks=ranks, start_ns=start_ns, end_ns=end_ns)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return counts | {"path": str(target), "bytes": target.stat().st_size}


def stream(conn: duckdb.DuckDBPyConnection, emit, *, ranks: list[int] | None = None, start_ns: int | None = None,
           end_ns: int | None = None, max_slices: int | None = None) -> dict:
    """Write the trace as text through ``emit(str)`` (a file's write, or a response stream); ``max_slices`` stops
    after that many slices (``truncated`` says so). Returns the counts."""
    cur = conn.cursor()
    try:
        all_ranks = [int(r) for (r,) in cur.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
        chosen = all_ranks if ranks is None else sorted({int(r) for r in ranks})
        unknown = sorted(set(chosen) - set(all_ranks))
        if unknown:
            raise ValueError(f"the run has no rank {', '.join(map(str, unknown))} (its ranks: "
                             f"{', '.join(map(str, all_ranks)) or 'none'})")
        lo = INT64_MIN if start_ns is None else int(start_ns)
        hi = INT64_MAX if end_ns is None else int(end_ns)
        if hi < lo:
            raise ValueError("end_ns is before start_ns")
        lanes = _Lanes(cur.execute(TRACKS_SQL, [chosen]).fetchall(), len(chosen) > 1)
        counts = {"ranks": chosen, "slices": 0, "counters": 0, "flows": 0, "truncated": False}
        emit('{"displayTimeUnit":"ns","traceEvents":[\n')
        first = True

        def put(text: str) -> None:
            nonlocal first
            emit(text if first else ",\n" + text)
            first = False

        for m in lanes.meta:
            put(m)
        cur.execute(SLICES_SQL, [chosen, hi, lo])
        for track_id, ts, dur, name, cat, ph, args in _batches(cur):
            if max_slices is not None and counts["slices"] >= max_slices:
                counts["truncated"] = True
                break
            pid, tid = lanes.by_track[int(track_id)]
            parsed = json.loads(args) if args else None
            if ph in ("i", "I"):
                put(_event("i", ts, name=name, cat=cat, pid=pid, tid=tid, s="t", args=parsed))
            else:
                put(_event("X", ts, dur, name=name, cat=cat, pid=pid, tid=tid, args=parsed))
            counts["slices"] += 1
        cur.execute(COUNTERS_SQL, [chosen, lo, hi])
        for track_id, name, series, ts, value in _batches(cur):
            pid, _ = lanes.by_track[int(track_id)]
            put(_event("C", ts, name=name, pid=pid, tid=0, args={series: value}))
            counts["counters"] += 1
        if not counts["truncated"]:
            cur.execute(FLOWS_SQL, [chosen, hi, lo])
            for flow_id, cat, name, src_track, src_ts, dst_track, dst_ts, enclosing in _batches(cur):
                spid, stid = lanes.by_track[int(src_track)]
                dpid, dtid = lanes.by_track[int(dst_track)]
                put(_event("s", src_ts, name=name, cat=cat, id=int(flow_id), pid=spid, tid=stid))
                put(_event("f", dst_ts, name=name, cat=cat, id=int(flow_id), pid=dpid, tid=dtid,
                           bp="e" if enclosing else None))
                counts["flows"] += 1
        emit("\n]}\n")
        return counts
    finally:
        cur.close()
