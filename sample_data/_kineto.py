"""A PyTorch Kineto (Chrome) trace of a GPU run, made from a generated rank's simulation: the same model, host ops
and kernels, as CUDA would record them (the format of the GPU traces that open beside an NPU run).

* host process (``pid`` = the Python pid, label ``CPU``): torch ops as ``cpu_op`` (``External id``, ``Sequence
  number``, ``Fwd thread id``, ``Input Dims`` / ``Input type`` as lists), ``ProfilerStep#<n>`` as
  ``user_annotation``, each kernel launch as a ``cuda_runtime`` ``cudaLaunchKernel`` (its ``correlation``);
* GPU process (``pid`` = the device, label ``GPU <d>``, sort index 16777216 + d): kernels (``cat: kernel``, one
  ``stream <n>`` thread per stream), memcpy tasks as ``gpu_memcpy``, the collectives as NCCL kernels;
* flows ``ac2g`` (a launch to its first kernel) and ``fwdbwd`` (forward to backward op), one start and one finish
  per ``(cat, id)``;
* ``style="old"``: integer µs ``ts``/``dur`` (Kineto of 2023); ``style="new"``: ``baseTimeNanoseconds`` with
  ``ts`` relative to it (float µs with ns decimals), ``distributedInfo`` with its process groups, two global
  instant events (``ph: i``) and ``gpu_user_annotation`` spans of the collectives.
"""
import gzip
import json
from decimal import Decimal

GPU_SORT = 16777216
BASE_NS = 1_711_964_646_000_000_000


def _ns(ts):
    return int(Decimal(str(ts).strip()) * 1000)


def write_kineto(text_trace, out_path, rank, world_size, style="old"):
    """Write ``out_path`` (gzip when it ends in ``.gz``) from the generated text export trace ``text_trace``."""
    with open(text_trace, encoding="utf-8") as fh:
        events = json.load(fh)
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    py_pid = next(pid for pid, name in procs.items() if name == "Python")
    dev = rank % 8
    base = BASE_NS if style == "new" else 0

    def when(ns):
        if style == "old":
            return ns // 1000
        return float(Decimal(ns - base) / 1000)

    def span(dur_ns):
        return dur_ns // 1000 if style == "old" else dur_ns / 1000

    out = [{"ph": "M", "name": "process_name", "pid": py_pid, "tid": 0, "args": {"name": f"python:trainer:{rank}"}},
           {"ph": "M", "name": "process_labels", "pid": py_pid, "tid": 0, "args": {"labels": "CPU"}},
           {"ph": "M", "name": "process_sort_index", "pid": py_pid, "tid": 0, "args": {"sort_index": py_pid}},
           {"ph": "M", "name": "process_name", "pid": dev, "tid": 0, "args": {"name": f"python:trainer:{rank}"}},
           {"ph": "M", "name": "process_labels", "pid": dev, "tid": 0, "args": {"labels": f"GPU {dev}"}},
           {"ph": "M", "name": "process_sort_index", "pid": dev, "tid": 0, "args": {"sort_index": GPU_SORT + dev}}]
    streams, ext = set(), 0
    def device_task(e):  # what CUDA would record: kernels, memcpys and the collectives' kernels
        lane = procs.get(e.get("pid"))
        return e.get("ph") == "X" and (
            lane == "Ascend Hardware" and (e.get("args") or {}).get("Task Type") in _KERNEL_TYPES
            or lane == "HCCL" and str(e.get("name", "")).startswith("hcom"))

    # the first device task of each launch (HostToDevice connection id): the finish of its ac2g flow
    first_task = {}
    for e in events:
        cid = (e.get("args") or {}).get("connection_id")
        if device_task(e) and cid is not None and (cid not in first_task or _ns(e["ts"]) < _ns(first_task[cid]["ts"])):
            first_task[cid] = e
    for e in events:
        ph = e.get("ph")
        lane = procs.get(e.get("pid"))
        if ph != "X":
            if ph in ("s", "f") and e.get("cat") == "fwdbwd":
                out.append({"ph": ph, "id": e["id"], "pid": py_pid, "tid": e["tid"], "ts": when(_ns(e["ts"])),
                            "cat": "fwdbwd", "name": "fwdbwd", **({"bp": "e"} if ph == "f" else {})})
            continue
        start, dur = _ns(e["ts"]), round(e["dur"] * 1000)
        a = e.get("args") or {}
        if lane == "Python" and e.get("cat") == "cpu_op":
            ext += 1
            name = e["name"]
            if name.startswith("ProfilerStep#"):
                out.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": py_pid, "tid": e["tid"],
                            "ts": when(start), "dur": span(dur), "args": {"External id": ext}})
                continue
            args = {"External id": ext, "Fwd thread id": a.get("Fwd thread id", 0),
                    "Sequence number": a.get("Sequence number", -1)}
            if a.get("Input Dims") is not None:
                args["Input Dims"] = [[int(x) for x in d.split(",") if x.strip().lstrip("-").isdigit()]
                                      for d in a["Input Dims"].split(";\r\n")]
                args["Input type"] = (a.get("Input type") or "").split(";\r\n")
            out.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": py_pid, "tid": e["tid"], "ts": when(start),
                        "dur": span(dur), "args": args})
        elif lane == "CANN" and e["name"].startswith("Runtime@") and a.get("connection_id") in first_task:
            cid = a["connection_id"]
            out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": py_pid,
                        "tid": a.get("Thread Id", e["tid"]), "ts": when(start), "dur": span(dur),
                        "args": {"External id": cid, "cbid": 211, "correlation": cid}})
            out.append({"ph": "s", "id": cid, "pid": py_pid, "tid": a.get("Thread Id", e["tid"]), "ts": when(start),
                        "cat": "ac2g", "name": "ac2g"})
        elif device_task(e):
            stream = a.get("Physic Stream Id", e["tid"]) if lane == "Ascend Hardware" else 99
            streams.add(stream)
            cid = a.get("connection_id")
            memcpy = (a.get("Task Type") or "") == "PCIE_DMA_SQE"
            cat = "gpu_memcpy" if memcpy else "kernel"
            name = "Memcpy HtoD (Pageable -> Device)" if memcpy else (
                f"ncclKernel_AllReduce_RING_LL_Sum_float({e['name']})" if lane == "HCCL" else f"void {e['name']}()")
            out.append({"ph": "X", "cat": cat, "name": name, "pid": dev, "tid": stream, "ts": when(start),
                        "dur": span(dur), "args": {"External id": cid, "device": dev, "stream": stream,
                                                   "correlation": cid}})
            if e is first_task.get(cid):
                out.append({"ph": "f", "id": cid, "pid": dev, "tid": stream, "ts": when(start), "cat": "ac2g",
                            "name": "ac2g", "bp": "e"})
            if lane == "HCCL" and style == "new":
                out.append({"ph": "X", "cat": "gpu_user_annotation", "name": "nccl:all_reduce", "pid": dev,
                            "tid": stream, "ts": when(start), "dur": span(dur), "args": {"External id": cid}})
    for stream in sorted(streams):
        out.append({"ph": "M", "name": "thread_name", "pid": dev, "tid": stream, "args": {"name": f"stream {stream} "}})
    _drop_lonely_ends(out)
    data = {"schemaVersion": 1, "record_shapes": 1,
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size}, "traceEvents": out}
    if style == "new":
        data["distributedInfo"].update({"pg_count": 1, "pg_config": [{
            "pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": world_size,
            "ranks": list(range(world_size))}]})
        first = min(_ns(e["ts"]) for e in events if e.get("ph") == "X")
        out += [{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                 "tid": "Trace PyTorch Profiler", "ts": when(first - 1000)},
                {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": when(first + 10**9)}]
        data.update({"displayTimeUnit": "ms", "baseTimeNanoseconds": base})
    opener = gzip.open if str(out_path).endswith(".gz") else open
    with opener(out_path, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)


_KERNEL_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE", "PCIE_DMA_SQE")


def _drop_lonely_ends(events):
    """Keep a flow end only when its (cat, id) has both a start and a finish (Kineto writes complete pairs)."""
    ends = {}
    for e in events:
        if e.get("ph") in ("s", "f"):
            ends.setdefault((e["cat"], str(e["id"])), set()).add(e["ph"])
    events[:] = [e for e in events
                 if e.get("ph") not in ("s", "f") or ends[(e["cat"], str(e["id"]))] == {"s", "f"}]
