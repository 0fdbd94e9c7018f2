"""CANN msprof output of a generated run, in the older per-iteration layout (FORMATS.md §8; the layout of
MindSpore's msprof runs): one ``PROF_<n>_<timestamp>_<id>/device_<d>/`` folder per device holding ``info.json.<d>``,
``start_info.<d>`` / ``end_info.<d>`` (each with its ``.done`` marker) and ``timeline/``:

* ``msprof_<d>_<model>_<iter>.json``: the iteration's whole device timeline: Ascend Hardware (one thread per
  stream, and the ``Step Trace(Model ID:<model>)`` thread with the ``Iteration <n>`` / ``FP_BP Time <n>`` /
  ``Iteration Refresh <n>`` / ``Reduce_<n>_0`` slices and the ``Data_aug Bound <n>`` ``s``/``t`` pair), CANN (the host
  API calls), HCCL (``Communication Kernel`` ops and ``Plane <p>`` tasks) and Overlap Analysis; metadata repeated in
  every file;
* ``hccl_*`` and ``task_time_*``: the HCCL and the stream events of the same iteration, exactly as in msprof_*;
* ``step_trace_*``: the Step Trace lane of every iteration (repeated in each file), under a pid of its own.

Times are the device's monotonic clock in µs, written as JSON numbers (ms-precision floats, like msprof's Python
writer), taken from the text export's epoch times minus a fixed offset. Host-made flows and the Python lane are
not msprof's: they are left out. Meant for small runs (each trace is read whole).
"""
import json
import os
from decimal import Decimal

MONOTONIC_OFFSET_NS = 1_692_340_024_324_979_000 - 56_579_931_060_630_000 + 1_000_000_000
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
    """Write the PROF folder of ``device`` from the generated Level1 text export in ``text_rank_dir``."""
    with open(os.path.join(text_rank_dir, "ASCEND_PROFILER_OUTPUT", "trace_view.json"), encoding="utf-8") as fh:
        events = json.load(fh)
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    steps = sorted((int(e["name"].split("#")[1]), _ns(e["ts"]), _ns(e["ts"]) + round(e["dur"] * 1000))
                   for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
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
        start = _ns(e["ts"]) - MONOTONIC_OFFSET_NS
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
    iterations = []
    for i, (_, host_start, host_end) in enumerate(steps):
        it = first_iteration + i
        lo = host_start - MONOTONIC_OFFSET_NS
        hi = (steps[i + 1][1] - MONOTONIC_OFFSET_NS) if i + 1 < len(steps) else None
        mine = [(n, s, e) for n, s, e in lanes if s >= lo and (hi is None or s < hi)]
        end = max([s + round(e["dur"] * 1000) for _, s, e in mine] + [host_end - MONOTONIC_OFFSET_NS])
        iterations.append((it, lo, end, mine))
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
    _info(dev_dir, device, first, last)


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


def _info(dev_dir, device, first_ns, last_ns):
    begin_us = (first_ns + MONOTONIC_OFFSET_NS) // 1000 - 20_000
    end_us = (last_ns + MONOTONIC_OFFSET_NS) // 1000 + 20_000
    files = {
        f"info.json.{device}": {"jobInfo": "NA", "version": "1.0", "devices": str(device), "hostname": "twin",
                                "DeviceInfo": [{"id": device, "ai_core_num": 32, "hwts_frequency": "100",
                                                "aic_frequency": "1000"}], "pid": "10036", "rank_id": device,
                                "pid_name": "python"},
        f"start_info.{device}": {"collectionTimeBegin": str(begin_us),
                                 "clockMonotonicRaw": str(begin_us * 1000 - MONOTONIC_OFFSET_NS)},
        f"end_info.{device}": {"collectionTimeEnd": str(end_us),
                               "clockMonotonicRaw": str(end_us * 1000 - MONOTONIC_OFFSET_NS)},
    }
    for name, obj in files.items():
        with open(os.path.join(dev_dir, name), "w", encoding="utf-8") as fh:
            json.dump(obj, fh)
        with open(os.path.join(dev_dir, name + ".done"), "w", encoding="utf-8") as fh:
            fh.write(f"filesize:{len(json.dumps(obj))}")
