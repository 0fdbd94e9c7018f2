"""CANN msprof output of a generated run, in the older per-iteration layout (FORMATS.md §8; the layout of
MindSpore's msprof runs): one ``PROF_<n>_<timestamp>_<id>/device_<d>/`` folder per device holding ``info.json.<d>``,
``start_info.<d>`` / ``end_info.<d>`` (each with its ``.done`` marker) and ``timeline/``:

* ``msprof_<d>_<model>_<iter>.json``: the iteration's whole device timeline: Ascend Hardware (one thread per
  stream, and the ``Step Trace(Model ID:<model>)`` thread with the ``Iteration <n>`` / ``FP_BP Time <n>`` /
  ``Iteration Refresh <n>`` / ``Reduce_<n>_0`` slices and the ``Data_aug Bound <n>`` ``s``/``t`` pair), CANN (the host
  API calls), HCCL (``Communication Kernel`` ops and ``Plane <p>`` tasks) and Overlap Analysis; metadata repeated in
  every file. An iteration is framed as msprof frames it: its Step Trace ``Iteration <n>`` slice (``Iteration
  Time``) starts some µs before its first task and ends some µs after its last, and its Overlap Analysis lane
  spans the first to the last task only;
* ``hccl_*`` and ``task_time_*``: the HCCL and the stream events of the same iteration, exactly as in msprof_*;
* ``step_trace_*``: the Step Trace lane of every iteration (repeated in each file), under a pid of its own.

Times are the device's monotonic clock in µs, written as JSON numbers (ms-precision floats, like msprof's Python
writer), taken from the text export's epoch times minus an offset (the run's hour maps to the real sample's clock).
Host-made flows and the Python lane are not msprof's: they are left out. Meant for small runs (each trace is read
whole).
"""
import json
import os
from decimal import Decimal

HOUR_NS = 3_600_000_000_000
REAL_CLOCK_NS = 56_579_931_060_630  # the real sample's clockMonotonicRaw at its collection start
# what the real files show: an iteration's first task starts 9.57-12.42 µs after it, its last task ends 6.22-14.91 µs
# before its end (FP Start lies between: 4.69-6.13 µs after the iteration's start)
LEAD_NS, LEAD_SPREAD_NS = 9_570, 2_850
TAIL_NS, TAIL_SPREAD_NS = 6_220, 8_690
HW_PID, STEP_TRACE_TID = 3, 10036
LANE_PIDS = {"CANN": 1003602, "HCCL": 1003611, "Overlap Analysis": 1003612}
COMM_TID = 70000
KEEP = ("Ascend Hardware", "CANN", "HCCL", "Overlap Analysis")


def _us(ns):
    """Device monotonic ns -> µs as msprof writes it (a JSON number with up to 3 decimals)."""
    return float(Decimal(ns) / 1000)


def _ns(ts):
    return int(Decimal(str(ts).strip()) * 1000)


def write_msprof(text_rank_dir, out_root, device, model, prof_name, first_iteration=1):
    """Write the PROF folder of ``device`` from the generated Level1 text export in ``text_rank_dir``; return its
    iterations as written: iteration -> (start, end) in device monotonic ns (their Iteration Time is end − start)."""
    with open(os.path.join(text_rank_dir, "ASCEND_PROFILER_OUTPUT", "trace_view.json"), encoding="utf-8") as fh:
        events = json.load(fh)
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    steps = sorted((int(e["name"].split("#")[1]), _ns(e["ts"]), _ns(e["ts"]) + round(e["dur"] * 1000))
                   for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    offset = _clock_offset(events)
    dev_dir = os.path.join(out_root, prof_name, f"device_{device}")
    timeline = os.path.join(dev_dir, "timeline")
    os.makedirs(timeline, exist_ok=True)
    pid_of = {pid: (HW_PID if name == "Ascend Hardware" else LANE_PIDS[name])
              for pid, name in procs.items() if name in KEEP}
    lanes = []  # (lane, start ns, event) of the device timeline, host flows dropped
    for e in events:
        name = procs.get(e.get("pid"))
        if e.get("ph") != "X" or name not in KEEP:
            continue
        start = _ns(e["ts"]) - offset
        ev = {"name": e["name"], "pid": pid_of[e["pid"]], "tid": e["tid"], "ts": _us(start), "dur": e["dur"]}
        if name == "HCCL" and not threads.get((e["pid"], e["tid"]), "").startswith("Plane"):
            ev["tid"] = COMM_TID
        elif name == "HCCL":
            ev["tid"] = int(threads[(e["pid"], e["tid"])].split()[1])
        if e.get("args"):
            args = {k: v for k, v in e["args"].items() if k not in ("connection_id", "Physic Stream Id")}
            if name == "Ascend Hardware":
                args["Stream Id"] = e["tid"]
            ev["args"] = args
        ev["ph"] = "X"
        lanes.append((name, start, ev))
    meta = _metadata(procs, threads, pid_of, model)
    iterations = _iterations(steps, lanes, offset, device, first_iteration)
    step_events = [ev for it, lo, end, _ in iterations for ev in _step_trace(it, lo, end, HW_PID, STEP_TRACE_TID)]
    for it, lo, end, mine in iterations:
        own_steps = _step_trace(it, lo, end, HW_PID, STEP_TRACE_TID)
        body = [e for _, _, e in mine]
        _dump(os.path.join(timeline, f"msprof_{device}_{model}_{it}.json"), meta + own_steps + body)
        _dump(os.path.join(timeline, f"hccl_{device}_{model}_{it}.json"),
              [m for m in meta if m["pid"] == LANE_PIDS["HCCL"]] + [e for n, _, e in mine if n == "HCCL"])
        _dump(os.path.join(timeline, f"task_time_{device}_{model}_{it}.json"),
              [m for m in meta if m["pid"] == HW_PID and m.get("tid") != STEP_TRACE_TID]
              + [e for n, _, e in mine if n == "Ascend Hardware"])
        # the step trace file repeats every iteration, under the Step Trace process of its own
        st_pid = STEP_TRACE_TID
        st_meta = [{"name": "process_name", "pid": st_pid, "tid": 0, "args": {"name": "Step Trace"}, "ph": "M"},
                   {"name": "thread_name", "pid": st_pid, "tid": st_pid, "args": {"name": f"Model ID:{model}"},
                    "ph": "M"},
                   {"name": "thread_sort_index", "pid": st_pid, "tid": st_pid, "args": {"sort_index": 70000 + model},
                    "ph": "M"}]
        moved = [{**e, "pid": st_pid, "tid": st_pid} for e in step_events]
        _dump(os.path.join(timeline, f"step_trace_{device}_{model}_{it}.json"), st_meta + moved)
    first = min(lo for _, lo, _, _ in iterations)
    last = max(end for _, _, end, _ in iterations)
    _info(dev_dir, device, first, last, offset)
    return {it: (lo, end) for it, lo, end, _ in iterations}


def _clock_offset(events):
    """Epoch ns − device monotonic ns: the run's hour maps to the real sample's monotonic clock at its collection
    start, so times stay below 10^11 µs, where a JSON number with 3 decimals still reads back to the exact ns."""
    first = min(_ns(e["ts"]) for e in events if e.get("ph") == "X")
    return first // HOUR_NS * HOUR_NS - REAL_CLOCK_NS


def _iterations(steps, lanes, offset, device, first_iteration):
    """Each iteration as msprof frames it: the device tasks (streams, HCCL) of a step (those starting from its host
    start to the next one's) and the other lanes' events starting there; its Step Trace slice runs from some µs
    (the real ranges) before the first task to some µs after the last; its Overlap Analysis lane is the run's,
    cut to the first and the last task (msprof computes it per iteration). Returns (iteration, start, end,
    [(lane, start, event)])."""
    overlap = [(s, e) for n, s, e in lanes if n == "Overlap Analysis"]
    out = []
    for i, (_, host_start, _) in enumerate(steps):
        it = first_iteration + i
        lo = host_start - offset
        hi = (steps[i + 1][1] - offset) if i + 1 < len(steps) else None
        mine = [(n, s, e) for n, s, e in lanes if n != "Overlap Analysis" and s >= lo and (hi is None or s < hi)]
        tasks = [(s, s + round(e["dur"] * 1000)) for n, s, e in mine if n in ("Ascend Hardware", "HCCL")]
        first, last = min(s for s, _ in tasks), max(e for _, e in tasks)
        mine += [("Overlap Analysis", s, e) for s, e in _cut(overlap, first, last)]
        lead = LEAD_NS + (it * 2_909 + device * 1_303) % LEAD_SPREAD_NS
        tail = TAIL_NS + (it * 3_637 + device * 971) % TAIL_SPREAD_NS
        if out and first - lead <= out[-1][2]:
            raise ValueError(f"iterations {it - 1} and {it} of device {device} overlap: the run has no gap for "
                             "the step trace between its steps")
        out.append((it, first - lead, last + tail, mine))
    return out


def _cut(overlap, first, last):
    """The Overlap Analysis lane of the tasks from ``first`` to ``last``, as msprof bounds it (by the task
    extremes): the run's slices within, those crossing a border cut at it, and Free from the first task to the
    first slice and from the last slice to the last task (the run's lane starts at its first computation)."""
    out = []
    for s, e in overlap:
        end = s + round(e["dur"] * 1000)
        lo, hi = max(s, first), min(end, last)
        if lo < hi:
            out.append((lo, hi, e if (lo, hi) == (s, end) else {**e, "ts": _us(lo), "dur": _us(hi - lo)}))
    free = next(e for _, e in overlap if e["name"] == "Free")
    tiles = [(lo, hi) for lo, hi, e in out if e["name"] != "Communication"]
    start, stop = min((lo for lo, _ in tiles), default=last), max((hi for _, hi in tiles), default=first)
    for lo, hi in ((first, start), (stop, last)) if tiles else ((first, last),):
        if lo < hi:
            out.append((lo, hi, {**free, "ts": _us(lo), "dur": _us(hi - lo)}))
    return [(lo, e) for lo, _, e in sorted(out, key=lambda x: (x[0], x[1]))]


def _metadata(procs, threads, pid_of, model):
    meta = []
    for pid, name in procs.items():
        if pid not in pid_of:
            continue
        new = pid_of[pid]
        meta.append({"name": "process_name", "pid": new, "tid": 0, "args": {"name": name}, "ph": "M"})
        if name == "Ascend Hardware":
            meta.append({"name": "thread_name", "pid": new, "tid": STEP_TRACE_TID,
                         "args": {"name": f"Step Trace(Model ID:{model})"}, "ph": "M"})
            meta.append({"name": "thread_sort_index", "pid": new, "tid": STEP_TRACE_TID,
                         "args": {"sort_index": 70000 + model}, "ph": "M"})
        for (tpid, tid), tname in sorted(threads.items(), key=lambda kv: str(kv[0])):
            if tpid != pid:
                continue
            if name == "HCCL":
                tid = COMM_TID if not tname.startswith("Plane") else int(tname.split()[1])
                tname = "Communication Kernel" if tid == COMM_TID else tname
            meta.append({"name": "thread_name", "pid": new, "tid": tid, "args": {"name": tname}, "ph": "M"})
        meta.append({"name": "process_labels", "pid": new, "tid": 0, "args": {"labels": "NPU"}, "ph": "M"})
        meta.append({"name": "process_sort_index", "pid": new, "tid": 0,
                     "args": {"sort_index": 3 if name == "Ascend Hardware" else new % 100}, "ph": "M"})
    return meta


def _step_trace(it, start, end, pid, tid):
    """The Step Trace slices of one iteration (times in device monotonic ns), and its Data_aug Bound s/t pair."""
    fp = start + 6_000
    bp = start + (end - start) // 10
    bound = f"Data_aug Bound {it}"
    return [
        {"name": f"Iteration {it}", "pid": pid, "tid": tid, "ts": _us(start), "dur": _us(end - start),
         "args": {"Iteration ID": it, "FP Start": _us(fp), "BP End": _us(bp), "Iteration End": _us(end),
                  "Iteration Time(ns)": float(end - start)}, "cat": "Iteration Time", "ph": "X"},
        {"name": f"FP_BP Time {it}", "pid": pid, "tid": tid, "ts": _us(fp), "dur": _us(bp - fp),
         "args": {"Iteration ID": it, "FP Start": _us(fp), "BP End": _us(bp), "FP_BP Time(ns)": float(bp - fp)},
         "cat": "FP_BP Time", "ph": "X"},
        {"name": f"Iteration Refresh {it}", "pid": pid, "tid": tid, "ts": _us(bp), "dur": _us(end - bp),
         "args": {"Iteration ID": it, "BP End": _us(bp), "Iteration End": _us(end),
                  "Iteration Refresh(ns)": float(end - bp)}, "cat": "Iteration Refresh", "ph": "X"},
        {"name": f"Reduce_{it}_0", "pid": pid, "tid": tid, "ts": _us(bp + 30_000),
         "dur": _us(max(end - bp - 60_000, 0)),
         "args": {"Iteration ID": it, "Reduce Start 0": _us(bp + 30_000), "Reduce End 0": _us(end - 30_000)},
         "cat": "Reduce", "ph": "X"},
        {"name": bound, "cat": "Data_aug Bound", "ph": "s", "ts": _us(end), "pid": pid, "tid": tid, "id": bound,
         "args": {"Iteration ID": it}},
        {"name": bound, "cat": "Data_aug Bound", "ph": "t", "ts": _us(end), "pid": pid, "tid": tid, "id": bound,
         "args": {"Data_aug Bound(us)": 0}},
    ]


def _dump(path, events):
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(events, fh)


def _info(dev_dir, device, first_ns, last_ns, offset):
    begin_us = (first_ns + offset) // 1000 - 20_000
    end_us = (last_ns + offset) // 1000 + 20_000
    files = {
        f"info.json.{device}": {"jobInfo": "NA", "version": "1.0", "devices": str(device), "hostname": "twin",
                                "DeviceInfo": [{"id": device, "ai_core_num": 32, "hwts_frequency": "100",
                                                "aic_frequency": "1000"}], "pid": "10036", "rank_id": device,
                                "pid_name": "python"},
        f"start_info.{device}": {"collectionTimeBegin": str(begin_us),
                                 "clockMonotonicRaw": str(begin_us * 1000 - offset)},
        f"end_info.{device}": {"collectionTimeEnd": str(end_us),
                               "clockMonotonicRaw": str(end_us * 1000 - offset)},
    }
    for name, obj in files.items():
        with open(os.path.join(dev_dir, name), "w", encoding="utf-8") as fh:
            json.dump(obj, fh)
        with open(os.path.join(dev_dir, name + ".done"), "w", encoding="utf-8") as fh:
            fh.write(f"filesize:{len(json.dumps(obj))}")
