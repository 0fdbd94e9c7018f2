"""Critical path of one rank's step, and the step re-evaluated with kernels (or a kernel type, or communication)
sped up: the what-if. The model is ``critical_model.py``'s; this module loads the step's elements from the rank's
slices and flows (one shard), the collectives' peer arrivals from ``cluster_collectives`` (all ranks), and shapes
the answer.

What is loaded for a step (its host start to the later of its host and device end):

* device elements: the tasks of the Ascend Hardware streams (top level), and the op-level communication lanes'
  collectives. A collective absorbs the non-compute tasks inside its span on the stream that holds most of them
  (its Notify Wait / SDMA / Write Value tasks): it takes that stream's place in stream order;
* host elements: the top-level CANN API calls (a ``…Synchronize…`` call is a ``sync``) and the task queue's
  Enqueue slices; a rank without a CANN lane (Level0) has the torch ops that launched device work instead;
* launch dependencies from the HostToDevice flows (async_npu without a CANN lane), queue dependencies from the
  async_task_queue flows (an enqueue feeds the calls inside the dequeue it leads to);
* the step's host end (the ProfilerStep's end), after the main thread's last call;
* with ``infer`` (the default), the order between each collective and the kernels launched before and after it on
  the same host thread, where no wait task shows it (``critical_infer.py``); the answer lists those edges.

Kernel types (for a what-if on a type) are kernel_details.csv's ``Type`` of the same kernel, else its Task Type.
"""

from __future__ import annotations

import bisect

from ascendscope.server.queries import NotFound, QueryError, critical_infer, ns_str, table_columns
from ascendscope.server.queries.critical_model import Element, Model

MAX_ELEMENTS = 300_000
MAX_PATH_SEGMENTS = 2_000
MAX_TOP = 25
MAX_FACTOR = 1000.0
MAX_PICKS = 200
MAX_INFERRED_LISTED = 200
WAIT_TASK_TYPES = ("EVENT_WAIT_SQE", "EVENT_WAIT", "Notify Wait")
COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE")
SYNC_MARKER = "Synchronize"
ASSUMPTIONS = (
    "Each selected kernel takes its measured time divided by the factor (with communication selected: each "
    "collective's transfer, the time after its last peer arrived); every other duration is kept.",
    "An element starts when the last of its dependencies allows, plus the gap measured after that one (launch "
    "latency, scheduling): the previous task of its stream, the host call that launched it (HostToDevice or "
    "async_npu flows), the previous call of its host thread, the enqueue that fed its dequeue.",
    "A host synchronize call and a device event-wait task end when the device work they waited for ends (the "
    "latest device task ending inside them), plus their measured tail.",
    "A collective cannot complete before the last other rank of its group arrives: the other ranks keep their "
    "measured arrivals (the what-if changes this rank only).",
    "Where no wait task shows it, a collective starts after the work its host thread launched before it, and the "
    "work launched after it starts after it ends (torch_npu's order; inferred from the launch order, only where "
    "the measured times obey it; listed, and switched off with infer=false).",
    "Other dependencies the trace does not show (memory or CPU contention) are not modelled; an element without a "
    "known dependency keeps its measured start.",
    "The step ends when its last device element or its host step (ProfilerStep) ends, whichever is later; the host "
    "step ends after the main thread's last call, with the measured gap, or, when a device task ended in that gap, "
    "that long after the task (the host waited for it).",
)
CATEGORY_OF = {"kernel": "kernel", "device": "device task", "wait": "event wait", "collective": "collective",
               "host": "host call", "sync": "host synchronize", "end": "host after the last call"}
GAP_WORDS = {"gap_launch": "launch latency", "gap_stream": "stream gap", "gap_thread": "host between calls",
             "gap_queue": "task queue latency", "gap_inferred": "gap after an order inferred from the launches",
             "before": "before the path"}

STEPS_SQL = """
SELECT st.step, st.host_start_ns, st.host_end_ns, st.device_start_ns, st.device_end_ns, t.tid AS main_tid
FROM steps st LEFT JOIN slices s ON s.slice_id = st.slice_id LEFT JOIN tracks t ON t.track_id = s.track_id
WHERE st.rank = ? ORDER BY st.step
"""
HAS_TRACE_SQL = "SELECT has_trace FROM ranks WHERE rank = ?"
HAS_CANN_SQL = "SELECT count(*) > 0 FROM tracks WHERE rank = ? AND kind = 'cann'"
DEVICE_SQL = """
SELECT s.slice_id, s.track_id, t.kind, s.name, s.ts_ns, s.ts_ns + s.dur_ns AS end_ns, s.depth,
       json_extract_string(s.args, '$."Task Type"') AS task_type, k.type AS ktype
FROM slices s JOIN tracks t ON t.track_id = s.track_id
LEFT JOIN (SELECT name, start_ns, any_value({type_col}) AS type FROM kernels
           WHERE rank = ? AND start_ns >= ? AND start_ns < ? GROUP BY name, start_ns) k
       ON k.name = s.name AND k.start_ns = s.ts_ns
WHERE s.rank = ? AND s.ts_ns < ? AND s.ts_ns + s.dur_ns > ? AND s.depth = 0
  AND (t.kind = 'hardware' OR (t.kind = 'communication' AND NOT starts_with(coalesce(t.thread_name, ''), 'Plane')))
  -- step markers on device lanes are not work: msprof's Step Trace iterations, Kineto's GPU ProfilerStep copy
  AND NOT starts_with(coalesce(t.thread_name, ''), 'Step Trace') AND coalesce(s.cat, '') <> 'gpu_user_annotation'
ORDER BY s.ts_ns, s.slice_id
"""
HOST_SQL = """
SELECT s.slice_id, s.track_id, t.kind, t.tid, s.name, s.ts_ns, s.ts_ns + s.dur_ns AS end_ns, s.cat, s.depth
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = ? AND s.ts_ns < ? AND s.ts_ns + s.dur_ns > ?
  AND ((t.kind = 'cann' AND s.depth = 0) OR (t.kind = 'python' AND s.cat IN ('enqueue', 'dequeue')))
ORDER BY s.ts_ns, s.slice_id
"""
FLOWS_SQL = """
SELECT f.cat, f.src_slice_id, a.track_id, t.tid, t.kind, a.name, a.ts_ns, a.ts_ns + a.dur_ns AS end_ns, a.depth,
       f.dst_slice_id
FROM flows f JOIN slices a ON a.slice_id = f.src_slice_id JOIN tracks t ON t.track_id = a.track_id
WHERE f.rank = ? AND f.cat IN ('HostToDevice', 'async_npu', 'async_task_queue') AND f.dst_slice_id IS NOT NULL
  AND f.dst_ts_ns >= ? AND f.dst_ts_ns < ?
"""
PEERS_TABLE_SQL = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'cluster_collectives'"
PEERS_SQL = """
WITH mine AS (
  SELECT *, lag(slice_id) OVER (PARTITION BY group_id ORDER BY start_ns) AS prev_slice_id
  FROM cluster_collectives WHERE rank = ? AND slice_id IS NOT NULL AND start_ns < ? AND end_ns > ?
)
SELECT m.slice_id, m.prev_slice_id, max(o.start_ns) AS peer_ns, arg_max(o.rank, o.start_ns) AS peer_rank,
       arg_max(o.window_start_ns, o.start_ns) AS peer_window_start_ns,
       arg_max(o.computing_ns, o.start_ns) AS computing_ns, arg_max(o.other_comm_ns, o.start_ns) AS other_comm_ns,
       arg_max(o.launch_bound_ns, o.start_ns) AS launch_bound_ns, arg_max(o.free_ns, o.start_ns) AS free_ns,
       arg_max(o.preparing_ns, o.start_ns) AS preparing_ns
FROM mine m LEFT JOIN cluster_collectives o
  ON o.group_id = m.group_id AND o.op_name = m.op_name AND o.seq = m.seq AND o.rank <> m.rank
GROUP BY m.slice_id, m.prev_slice_id
"""
PARTS = ("computing_ns", "other_comm_ns", "launch_bound_ns", "free_ns", "preparing_ns")


class _Builder:
    """The elements of one step and their dependencies."""

    def __init__(self):
        self.el: list[Element] = []
        self.by_slice: dict[int, int] = {}

    def add(self, e: Element) -> int:
        self.el.append(e)
        i = len(self.el) - 1
        if e.slice_id is not None:
            self.by_slice[e.slice_id] = i
        if len(self.el) > MAX_ELEMENTS:
            raise QueryError("step_too_large", f"the step has more than {MAX_ELEMENTS:,} elements to model")
        return i


def _device(b: _Builder, rows: list[dict]) -> None:
    """Device elements; a collective absorbs the non-compute tasks inside it on its busiest stream."""
    hw = [r for r in rows if r["kind"] == "hardware"]
    colls = [r for r in rows if r["kind"] == "communication"]
    starts = [r["ts_ns"] for r in hw]
    absorbed: set[int] = set()
    lane_of: dict[int, int] = {}
    for c in colls:
        lo, hi = bisect.bisect_left(starts, c["ts_ns"]), bisect.bisect_right(starts, c["end_ns"])
        inside: dict[int, list[int]] = {}
        for r in hw[lo:hi]:
            if r["end_ns"] <= c["end_ns"] and r["task_type"] not in COMPUTE_TASK_TYPES \
                    and not str(r["task_type"] or "").startswith("KERNEL_"):
                inside.setdefault(r["track_id"], []).append(r["slice_id"])
        if inside:
            track = max(inside, key=lambda t: len(inside[t]))
            absorbed.update(inside[track])
            lane_of[c["slice_id"]] = track
    for r in rows:
        if r["slice_id"] in absorbed:
            continue
        tt = r["task_type"]
        if r["kind"] == "communication":
            kind, lane = "collective", ("track", lane_of.get(r["slice_id"], r["track_id"]))
        else:
            compute = tt in COMPUTE_TASK_TYPES or str(tt or "").startswith("KERNEL_")
            kind = "kernel" if compute else ("wait" if tt in WAIT_TASK_TYPES else "device")
            lane = ("track", r["track_id"])
        b.add(Element(kind, r["name"], int(r["ts_ns"]), int(r["end_ns"]), lane, int(r["slice_id"]),
                      int(r["track_id"]), r["ktype"] or tt or None, int(r["depth"] or 0)))


def _stream_order(b: _Builder) -> None:
    lanes: dict[tuple, list[int]] = {}
    for i, e in enumerate(b.el):
        if e.kind in ("kernel", "device", "wait", "collective"):
            lanes.setdefault(e.lane, []).append(i)
    for idx in lanes.values():
        idx.sort(key=lambda i: (b.el[i].start, b.el[i].end))
        for prev, cur in zip(idx, idx[1:]):
            b.el[cur].preds.append((prev, "end", 0, "stream"))


def _thread_order(b: _Builder) -> None:
    """Each host element (and the step's end) after the previous one of its thread that ended before it."""
    lanes: dict[tuple, list[int]] = {}
    for i, e in enumerate(b.el):
        if e.kind in ("host", "sync", "end"):
            lanes.setdefault(e.lane, []).append(i)
    for idx in lanes.values():
        idx.sort(key=lambda i: (b.el[i].start, b.el[i].kind == "end", b.el[i].end))
        last = None
        for i in idx:
            if last is not None and b.el[last].end <= b.el[i].start:
                b.el[i].preds.append((last, "end", 0, "thread"))
            if last is None or b.el[i].end >= b.el[last].end:
                last = i


def _targets(b: _Builder) -> None:
    """A sync (and the step's host end) ends with the latest device element ending inside it; a wait task, with
    one of another stream."""
    dev = sorted((e.end, i) for i, e in enumerate(b.el) if e.kind in ("kernel", "device", "wait", "collective"))
    ends = [d[0] for d in dev]
    for i, e in enumerate(b.el):
        if e.kind not in ("sync", "wait", "end") or e.end <= e.start:
            continue
        k = bisect.bisect_right(ends, e.end) - 1
        while k >= 0 and ends[k] > e.start:
            j = dev[k][1]
            if j != i and (e.kind != "wait" or b.el[j].lane != e.lane):
                e.target = j
                break
            k -= 1


def _host(b: _Builder, host_rows: list[dict], flows: list[dict], has_cann: bool) -> None:
    """Host elements, launch and queue dependencies."""
    dequeues: dict[int, list[tuple[int, int, int]]] = {}  # tid -> (start, end, dequeue slice id), sorted
    for r in host_rows:
        if r["kind"] == "python" and r["cat"] == "dequeue":
            dequeues.setdefault(r["tid"], []).append((int(r["ts_ns"]), int(r["end_ns"]), int(r["slice_id"])))
            continue
        if r["kind"] == "cann" and not has_cann:
            continue
        kind = "sync" if r["kind"] == "cann" and SYNC_MARKER in (r["name"] or "") else "host"
        b.add(Element(kind, r["name"], int(r["ts_ns"]), int(r["end_ns"]), ("thread", r["tid"]), int(r["slice_id"]),
                      int(r["track_id"]), depth=int(r["depth"] or 0)))
    if not has_cann:  # Level0: the torch ops that launched device work are the host side
        for f in flows:
            if f["cat"] == "async_npu" and f["src_slice_id"] not in b.by_slice:
                b.add(Element("host", f["name"], int(f["ts_ns"]), int(f["end_ns"]), ("thread", f["tid"]),
                              int(f["src_slice_id"]), int(f["track_id"]), depth=int(f["depth"] or 0)))
    # host elements per track, to find the top-level call holding a nested flow source
    per_track: dict[int, list[tuple[int, int, int]]] = {}
    for i, e in enumerate(b.el):
        if e.kind in ("host", "sync"):
            per_track.setdefault(e.track_id, []).append((e.start, e.end, i))
    for v in per_track.values():
        v.sort()
    launch_cat = "HostToDevice" if has_cann else "async_npu"
    enqueue_of: dict[int, int] = {}  # dequeue slice id -> enqueue element
    for f in flows:
        if f["cat"] == "async_task_queue":
            src = b.by_slice.get(f["src_slice_id"])
            if src is not None:
                enqueue_of[int(f["dst_slice_id"])] = src
            continue
        if f["cat"] != launch_cat:
            continue
        dst = b.by_slice.get(f["dst_slice_id"])
        h = _holder(per_track.get(f["track_id"], []), int(f["ts_ns"]), int(f["end_ns"]))
        if dst is None or h is None:
            continue
        ready = min(int(f["end_ns"]), b.el[dst].start)
        b.el[dst].preds.append((h, "start", ready - b.el[h].start, "launch"))
    for i, e in enumerate(list(b.el)):
        if e.kind not in ("host", "sync") or e.lane[1] not in dequeues:
            continue
        ds = dequeues[e.lane[1]]
        k = bisect.bisect_right(ds, (e.start, float("inf"), 0)) - 1
        if k >= 0 and ds[k][1] >= e.end and ds[k][2] in enqueue_of:
            q = enqueue_of[ds[k][2]]
            if q != i and b.el[q].start <= e.start:
                b.el[i].preds.append((q, "start", min(b.el[q].end, e.start) - b.el[q].start, "queue"))


def _holder(calls: list[tuple[int, int, int]], start: int, end: int) -> int | None:
    """The host element of a track whose span holds [start, end]."""
    k = bisect.bisect_right(calls, (start, float("inf"), 0)) - 1
    while k >= 0:
        s, e, i = calls[k]
        if e >= end:
            return i
        if e < start and k > 0 and calls[k - 1][1] < start:
            return None
        k -= 1
    return None


def _peers(b: _Builder, rows: list[dict]) -> None:
    for r in rows:
        i = b.by_slice.get(r["slice_id"])
        if i is None or r["peer_ns"] is None:
            continue
        e = b.el[i]
        e.peer_ns, e.peer_rank = int(r["peer_ns"]), int(r["peer_rank"])
        e.peer_window_start_ns = None if r["peer_window_start_ns"] is None else int(r["peer_window_start_ns"])
        e.peer_parts = {p[:-3]: (None if r[p] is None else int(r[p])) for p in PARTS}
        if r["prev_slice_id"] is not None:
            e.prev_local = b.by_slice.get(r["prev_slice_id"])


def _step(db, rank: int, step: int | None) -> dict:
    steps = db.dicts(STEPS_SQL, [rank])
    if not steps:
        raise NotFound("no_steps", f"rank {rank} has no steps (no ProfilerStep or iteration in its trace)")
    if step is None:
        return steps[0] | {"all": [s["step"] for s in steps]}
    for s in steps:
        if s["step"] == step:
            return s | {"all": [x["step"] for x in steps]}
    raise NotFound("step_not_found", f"rank {rank} has no step {step}")


def load(db, rank: int, step: int | None, infer: bool = True) -> tuple[Model, dict]:
    """The model of ``rank``'s ``step`` (default: its first) and the step's facts (``inferred``: the edges inferred
    from the launch order, ``(from, to, rule)``; none without ``infer``)."""
    row = db.rows(HAS_TRACE_SQL, [rank])
    if not row:
        raise NotFound("rank_not_found", f"no rank {rank} in this run")
    if not row[0][0]:
        raise NotFound("no_trace", f"rank {rank} has no trace (trace_view.json): its critical path is unknown")
    st = _step(db, rank, step)
    lo = int(st["host_start_ns"])
    hi = max(int(st["host_end_ns"]), int(st["device_end_ns"] or st["host_end_ns"]))
    has_cann = bool(db.rows(HAS_CANN_SQL, [rank])[0][0])
    type_col = "type" if "type" in table_columns(db, "kernels") else "NULL::VARCHAR"
    b = _Builder()
    _device(b, db.dicts(DEVICE_SQL.format(type_col=type_col), [rank, lo, hi, rank, hi, lo]))
    flows = db.dicts(FLOWS_SQL, [rank, lo, hi])
    _host(b, db.dicts(HOST_SQL, [rank, hi, lo]), flows, has_cann)
    end = None
    # the step's host end is an element only when the host calls of its thread are modelled (torch_npu's enqueue /
    # CANN calls): a Kineto ProfilerStep's thread runs none of them, and an msprof iteration is a device lane — an
    # end without predecessors would be the whole step "before the path"
    main = ("thread", st["main_tid"])
    if st["main_tid"] is not None and any(e.lane == main for e in b.el):
        end = b.add(Element("end", "host until the step's end", int(st["host_end_ns"]), int(st["host_end_ns"]),
                            ("thread", st["main_tid"])))
    _stream_order(b)
    _thread_order(b)
    if end is not None and b.el[end].preds:  # the step's end: from the main thread's last call to the host end
        b.el[end].start = min(b.el[b.el[end].preds[0][0]].end, b.el[end].end)
    _targets(b)
    inferred = critical_infer.infer(b.el) if infer else []
    if db.rows(PEERS_TABLE_SQL)[0][0]:
        _peers(b, db.dicts(PEERS_SQL, [rank, hi, lo]))
    if not b.el:
        raise NotFound("empty_step", f"rank {rank}'s step {st['step']} has no device or host element")
    return Model(b.el, lo), {**st, "lo": lo, "hi": hi, "has_cann": has_cann, "inferred": inferred}


def _scale(pick: dict, factor: float):
    names, types, comm = set(pick.get("kernels") or ()), set(pick.get("types") or ()), bool(pick.get("communication"))
    inv = 1.0 / factor

    def scale(e: Element) -> float:
        if e.kind == "collective":
            return inv if comm else 1.0
        if e.kind in ("kernel", "device") and (e.name in names or (e.ktype is not None and e.ktype in types)):
            return inv
        return 1.0

    return scale


def _segments(model: Model, sched, span: int) -> list[dict]:
    out = []
    for g in model.walk(sched)[:MAX_PATH_SEGMENTS]:
        dur = g["end"] - g["start"]
        seg = {"kind": g["kind"], "start_ns": ns_str(g["start"]), "end_ns": ns_str(g["end"]), "dur_ns": dur,
               "share": dur / span if span else None, "name": None, "category": None, "slice_id": None,
               "track_id": None, "depth": None, "rank": None}
        if g["kind"] in GAP_WORDS:
            seg["name"] = GAP_WORDS[g["kind"]]
            seg["category"] = "gap" if g["kind"] != "before" else "before"
        if g["index"] is not None:
            e = model.el[g["index"]]
            seg.update(slice_id=e.slice_id, track_id=e.track_id, depth=e.depth)
            if g["kind"] == "remote":
                seg.update(name=f"rank {e.peer_rank} before {e.name}", category="waiting for another rank",
                           rank=e.peer_rank, peer_parts=e.peer_parts,
                           peer_window_start_ns=ns_str(e.peer_window_start_ns))
            elif g["kind"] == "transfer":
                seg.update(name=e.name, category="collective")
            elif g["kind"] == "tail":
                seg.update(name=e.name, category=CATEGORY_OF[e.kind])
            elif g["kind"] == "work":
                seg.update(name=e.name, category=CATEGORY_OF[e.kind])
            else:
                seg["after"] = e.name
        out.append(seg)
    return out


def _totals(segs: list[dict], span: int) -> tuple[list[dict], list[dict]]:
    cats: dict[str, int] = {}
    names: dict[tuple, list] = {}
    for s in segs:
        cats[s["category"]] = cats.get(s["category"], 0) + s["dur_ns"]
        if s["kind"] in ("work", "transfer", "tail", "remote"):
            key = (s["name"], s["category"])
            acc = names.setdefault(key, [0, 0, s["slice_id"]])
            acc[0] += s["dur_ns"]
            acc[1] += 1
    by_cat = [{"category": c, "ns": v, "share": v / span if span else None}
              for c, v in sorted(cats.items(), key=lambda kv: -kv[1])]
    top = [{"name": n, "category": c, "ns": v[0], "count": v[1], "share": v[0] / span if span else None,
            "slice_id": v[2]} for (n, c), v in sorted(names.items(), key=lambda kv: -kv[1][0])[:MAX_TOP]]
    return by_cat, top


def _edge(model: Model, a: int, b: int, rule: str) -> dict:
    def end(i):
        e = model.el[i]
        return {"name": e.name, "kind": e.kind, "slice_id": e.slice_id, "track_id": e.track_id}

    return {"from": end(a), "to": end(b), "rule": rule, "words": critical_infer.RULES[rule]}


def critical_path(db, rank: int, step: int | None = None, pick: dict | None = None,
                  factor: float | None = None, infer: bool = True) -> dict:
    """The measured critical path of ``rank``'s ``step`` with each segment's share of the step, and with a pick
    (``{"kernels": [...], "types": [...], "communication": bool}``) and a ``factor`` the step re-evaluated;
    ``infer`` adds the collectives' order inferred from the launch order where no wait task shows it."""
    model, st = load(db, rank, step, infer)
    m = model.measured
    span = m.step_end - model.step_start
    segs = _segments(model, m, span)
    by_cat, top = _totals(segs, span)
    out = {
        "rank": rank, "step": st["step"], "steps": st["all"], "has_cann": st["has_cann"],
        "step_start_ns": ns_str(model.step_start), "step_end_ns": ns_str(m.step_end), "step_ns": span,
        "elements": len(model.el), "path": segs, "categories": by_cat, "top": top,
        "truncated": len(segs) >= MAX_PATH_SEGMENTS, "assumptions": list(ASSUMPTIONS),
        "kernel_names": _names(model, "name"), "kernel_types": _names(model, "ktype"), "whatif": None,
        "infer": infer, "inferred_total": len(st["inferred"]),
        "inferred_edges": [_edge(model, *x) for x in st["inferred"][:MAX_INFERRED_LISTED]],
        "inferred_truncated": len(st["inferred"]) > MAX_INFERRED_LISTED,
    }
    if pick and (pick.get("kernels") or pick.get("types") or pick.get("communication")):
        if factor is None or not (0 < factor <= MAX_FACTOR):
            raise QueryError("bad_factor", f"factor must be above 0 and at most {MAX_FACTOR:g}")
        scale = _scale(pick, factor)
        w = model.schedule(scale)
        changed = sum(1 for e in model.el if scale(e) != 1.0)
        wspan = w.step_end - model.step_start
        wsegs = _segments(model, w, wspan)
        wcat, wtop = _totals(wsegs, wspan)
        out["whatif"] = {"pick": pick, "factor": factor, "elements_changed": changed,
                         "estimated_end_ns": ns_str(w.step_end), "estimated_step_ns": wspan,
                         "saved_ns": span - wspan, "path": wsegs, "categories": wcat, "top": wtop}
    return out


def _names(model: Model, attr: str) -> list[dict]:
    """The step's kernels by name (or type), most time first, for the what-if picker."""
    acc: dict[str, list[int]] = {}
    for e in model.el:
        key = getattr(e, attr)
        if e.kind in ("kernel", "device") and key:
            a = acc.setdefault(key, [0, 0])
            a[0] += e.end - e.start
            a[1] += 1
    ranked = sorted(acc.items(), key=lambda kv: -kv[1][0])[:MAX_PICKS]
    return [{"name": k, "ns": v[0], "count": v[1]} for k, v in ranked]
