"""MindSpore profiler output made from a generated torch_npu rank: the same simulated device, another framework.

* :func:`to_ascend_ms` writes MindSpore 2.3+'s ``{worker}_{pid}_{timestamp}_ascend_ms`` folder: its
  ``profiler_info_{rank}.json`` (MindSpore's keys) and ``ASCEND_PROFILER_OUTPUT``, whose files are torch_npu's
  with MindSpore's differences (docs/formats.md, "MindSpore output"): the framework lane is the ``MindSpore``
  process (pid 1, sort index 1) whose records are named ``module::event::name`` with graph scopes
  (``Default/network-WithLossCell/...``), the task-queue flows are ``async_mindspore``, there are no ``fwdbwd``
  flows; ``kernel_details.csv`` says ``Step ID``; ``memory_record.csv``'s components are ``MindSpore`` and
  ``MindSpore+GE``; ``operator_details.csv`` holds only ``Name`` and ``Input Shapes``. ``mode`` "pynative" keeps
  the steps (``Python::PythonObserved::ProfilerStep#N``); "graph" (jit level O2, no ``Profiler.step()``) has
  none: each step's range is a ``RunGraph`` stage, ``kernel_details.csv`` has no ``Step ID`` and
  ``step_trace_time.csv`` has one row, step 0, over the whole run (what MindSpore writes without steps). PyNative
  adds a ``CPU OP`` process (pid 2: a host-CPU operator per step), graph mode a ``Scope Layer`` process (pid 3:
  a slice per scope depth over each graph run's device tasks).
* :func:`to_profiler_dir` writes MindSpore 2.0-2.2's ``profiler`` folder of one rank: ``profiler_info_{rank}.json``,
  MindSpore's own ``ascend_timeline_display_{rank}.json`` (times in µs from the first task, lanes known by
  ``process_labels``) and ``aicore_intermediate_{rank}_type.csv``, beside the msprof ``PROF_*`` folder they were
  made from (``_msprof.py``).

Only the files change: every time and every count stays the generated rank's, so the twin's CSVs agree with its
trace as the torch_npu run's do.
"""
import csv
import json
import os
import re
import shutil
import sqlite3
from decimal import Decimal

from . import _msprof

FWK_PID = 1
SCOPE = "Default/network-WithLossCell/_backbone-Net"
_CAMEL = re.compile(r"(?:^|_)([a-z0-9])")


def _prim(torch_name):
    """A MindSpore primitive-like name for a torch op (``aten::native_layer_norm`` -> ``NativeLayerNorm``)."""
    base = torch_name.split("::")[-1].split("#")[0].strip("_") or "Op"
    return _CAMEL.sub(lambda m: m.group(1).upper(), re.sub(r"[^0-9A-Za-z_]", "_", base))


class _Names:
    """Each torch op becomes ``module::event::{scope}/{Prim}-op{n}``, numbered per primitive as graphs are."""

    def __init__(self, module_event):
        self.module_event, self.counts = module_event, {}

    def __call__(self, torch_name):
        prim = _prim(torch_name)
        n = self.counts[prim] = self.counts.get(prim, -1) + 1
        return f"{self.module_event}::{SCOPE}/{prim}-op{n}"


# what torch_npu's db adds to CANN's msprof db: MindSpore's db export is the msprof db alone
TORCH_DB_TABLES = ("PYTORCH_API", "PYTORCH_CALLCHAINS", "CONNECTION_IDS", "MEMORY_RECORD", "OP_MEMORY", "STEP_TIME",
                   "RANK_DEVICE_MAP")


def to_ascend_ms(pt_dir, out_root, *, rank, mode="pynative", level="Level1"):
    """Write the MindSpore 2.3+ folder of the generated torch_npu rank folder ``pt_dir`` under ``out_root``;
    returns its path. A db export (``ascend_pytorch_profiler_{rank}.db`` in ``pt_dir``) becomes MindSpore's
    ``ascend_mindspore_profiler_{rank}.db``: the msprof db without torch_npu's tables, and no analysis.db
    (MindSpore copies msprof's ``communication_analyzer.db`` instead, which is not read)."""
    if mode not in ("pynative", "graph"):
        raise ValueError("mode must be pynative or graph")
    name = f"worker-{rank}_{41230 + rank}_20250109083403{rank:03d}_ascend_ms"
    dst = os.path.join(out_root, name)
    src_out = os.path.join(pt_dir, "ASCEND_PROFILER_OUTPUT")
    out = os.path.join(dst, "ASCEND_PROFILER_OUTPUT")
    os.makedirs(out, exist_ok=True)
    os.makedirs(os.path.join(dst, "FRAMEWORK"), exist_ok=True)  # MindSpore's raw framework data: not read
    names = _Names("PynativeFramework::RunOp" if mode == "pynative" else "RuntimeFramework::KernelLaunch")
    for entry in sorted(os.listdir(src_out)):
        src, path = os.path.join(src_out, entry), os.path.join(out, entry)
        if entry == "analysis.db":
            continue
        if entry == f"ascend_pytorch_profiler_{rank}.db":
            _msprof_db(src, os.path.join(out, f"ascend_mindspore_profiler_{rank}.db"))
        elif entry == "trace_view.json":
            _trace(src, path, mode, names)
        elif entry == "kernel_details.csv":
            _rewrite(src, path, kernel_details(mode))
        elif entry == "memory_record.csv":
            _rewrite(src, path, _memory_component)
        elif entry == "operator_details.csv":
            if mode == "pynative":  # record_shapes: MindSpore writes the name and shapes only
                _rewrite(src, path, _operator_details(names))
        elif entry == "step_trace_time.csv" and mode == "graph":
            _one_step(src, path)
        else:
            shutil.copyfile(src, path)
    with open(os.path.join(pt_dir, f"profiler_info_{rank}.json"), encoding="utf-8") as fh:
        pt_info = json.load(fh)
    info = {
        "profiler_parameters": {"output_path": str(out_root), "profiler_level": level, "with_stack": False,
                                "profile_memory": True, "aicore_metrics": "AicPipeUtilization",
                                "cpu_trace": True, "npu_trace": True, "l2_cache": True},
        "ms_profiler_info": {"start_collect_syscnt": pt_info["start_info"]["start_cnt"],
                             "start_collect_clock_time": pt_info["start_info"]["start_monotonic"]},
        "cann_profiler_info": {},
        "analysis_cost_time": {"analyse": 12.5},
        "ms_version": "2.5.0",
        "cann_version": "8.0.RC3",
        "jit_level": "O0" if mode == "pynative" else "O2",
    }
    with open(os.path.join(dst, f"profiler_info_{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=4)
    return dst


def _trace(src, dst, mode, names):
    with open(src, encoding="utf-8") as fh:
        events = json.load(fh)
    py = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
          and (e.get("args") or {}).get("name") == "Python"}
    out = []
    for e in events:
        if e.get("pid") not in py:
            out.append(e)
            continue
        e = dict(e, pid=FWK_PID)
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "M":
            if e["name"] == "process_name":
                e["args"] = {"name": "MindSpore"}
            elif e["name"] == "process_sort_index":
                e["args"] = {"sort_index": 1}
        elif ph in ("s", "f"):
            if cat == "fwdbwd":
                continue  # MindSpore links no forward op to its backward op
            if cat == "async_task_queue":
                e.update(cat="async_mindspore", name="mindspore_to_self")
            elif cat == "async_npu":
                e["name"] = "mindspore_to_npu"
        elif ph == "X" and cat == "cpu_op":
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"Python::PythonObserved::{e['name']}" if mode == "pynative" else "RunGraph"
            else:
                e["name"] = names(e["name"])
            e.update(cat="", args={})
        elif ph == "X" and cat in ("enqueue", "dequeue"):
            op = e["name"].split("@", 1)[-1]
            event = "PyNativeFrontendTask" if cat == "enqueue" else "PyNativeLaunchTask"
            e.update(name=f"PynativeFramework::{event}::{op}", cat="")
        out.append(e)
    out += _cpu_op_lane(out) if mode == "pynative" else _scope_layer(out)
    with open(dst, "w", encoding="utf-8") as fh:
        json.dump(out, fh)


def _meta(pid, name, sort, tids, label=None):
    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
              {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}}]
    if label:
        events.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}})
    for tid in tids:
        events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"Thread {tid}"}},
                   {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]
    return events


def _ns_of(e):
    return int(Decimal(str(e["ts"])) * 1000)


def _cpu_op_lane(events):
    """MindSpore's CPU OP process (pid 2): a host-CPU operator at the start of each step."""
    steps = [e for e in events if e.get("ph") == "X" and "ProfilerStep#" in e["name"]]
    out = [{"ph": "X", "name": f"{SCOPE}/Reshape-op{i}", "pid": 2, "tid": e["tid"],
            "ts": _us(_ns_of(e) + 500), "dur": 2.5, "cat": "", "args": {"type": "Reshape"}}
           for i, e in enumerate(steps)]
    return (_meta(2, "CPU OP", 2, sorted({e["tid"] for e in out}), "CPU") + out) if out else []


def _scope_layer(events):
    """MindSpore's Scope Layer process (pid 3): one slice per scope depth over the device tasks of each graph run."""
    hw = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
          and (e.get("args") or {}).get("name") == "Ascend Hardware"}
    tasks = sorted((_ns_of(e), _ns_of(e) + round(e["dur"] * 1000)) for e in events
                   if e.get("ph") == "X" and e.get("pid") in hw)
    out = []
    for run in (e for e in events if e.get("ph") == "X" and e.get("name") == "RunGraph"):
        start, end = _ns_of(run), _ns_of(run) + round(run["dur"] * 1000)
        inside = [t for t in tasks if start <= t[0] < end]
        if not inside:
            continue
        lo, hi = inside[0][0], max(t[1] for t in inside)
        out += [{"ph": "X", "name": name, "pid": 3, "tid": depth, "ts": _us(lo), "dur": (hi - lo) / 1000}
                for depth, name in enumerate(SCOPE.split("/"))]
    return (_meta(3, "Scope Layer", 12, range(len(SCOPE.split("/")))) + out) if out else []


def _us(ns):
    return f"{ns // 1000}.{ns % 1000:03d}"


def _msprof_db(src, dst):
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        for table in TORCH_DB_TABLES:
            con.execute(f"DROP TABLE IF EXISTS {table}")
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()


def _read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def _write(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *rows])


def _rewrite(src, dst, fn):
    header, rows = _read(src)
    _write(dst, *fn(header, rows))


def kernel_details(mode):
    def fn(header, rows):
        if "Step Id" not in header:
            return header, rows
        i = header.index("Step Id")
        if mode == "graph":  # no step markers: MindSpore leaves the column out
            return header[:i] + header[i + 1:], [r[:i] + r[i + 1:] for r in rows]
        return header[:i] + ["Step ID"] + header[i + 1:], rows
    return fn


def _memory_component(header, rows):
    i = header.index("Component")
    ren = {"PTA": "MindSpore", "PTA+GE": "MindSpore+GE"}
    return header, [r[:i] + [ren.get(r[i], r[i])] + r[i + 1:] for r in rows]


def _operator_details(names):
    def fn(header, rows):
        n, s = header.index("Name"), header.index("Input Shapes")
        return ["Name", "Input Shapes"], [[names(r[n]), r[s]] for r in rows]
    return fn


def _one_step(src, dst):
    """Step 0 over the whole run: each column the sum of the steps', the first step's Preparing."""
    header, rows = _read(src)
    total = ["0"]
    for j, col in enumerate(header[1:], start=1):
        values = [Decimal(r[j]) for r in rows if r[j].strip()]
        value = values[0] if col == "Preparing" and values else sum(values, Decimal("0"))
        total.append(str(value))
    _write(dst, header, [total])


# ------------------------------------------------------------------------------------------ MindSpore 2.0-2.2
LABELS = {"device": "AICORE OP", 9000: "AICPU OP", 10000: "Communication Op", 11000: "Host CPU OP",
          12000: "Op Overlap Analyse"}


def to_profiler_dir(pt_dir, out_root, *, rank, device, prof_name, exported=True):
    """Write MindSpore 2.0-2.2's ``profiler`` folder of one rank into ``out_root`` (shared by the ranks of a run,
    as MindSpore shares it): the msprof ``PROF_*`` folder of the device and MindSpore's own summaries. Without
    ``exported`` the ``PROF_*`` folder holds no msprof export (before 2.2 MindSpore parsed the raw data itself):
    MindSpore's own timeline is then all there is to read."""
    os.makedirs(out_root, exist_ok=True)
    _msprof.write_msprof(pt_dir, out_root, device=device, model=2, prof_name=prof_name)
    if not exported:
        shutil.rmtree(os.path.join(out_root, prof_name, f"device_{device}", "timeline"))
    src_out = os.path.join(pt_dir, "ASCEND_PROFILER_OUTPUT")
    header, rows = _read(os.path.join(src_out, "kernel_details.csv"))
    col = {h: i for i, h in enumerate(header)}
    starts = [Decimal(r[col["Start Time(us)"]].strip()) for r in rows]
    t0 = min(starts) if starts else Decimal(0)
    events = [{"name": "process_labels", "ph": "M", "pid": device, "args": {"labels": LABELS["device"]}}]
    events += [{"name": "process_labels", "ph": "M", "pid": pid, "args": {"labels": label}}
               for pid, label in LABELS.items() if pid != "device"]
    streams, by_type, spans = set(), {}, {"compute": [], "comm": [], "steps": {}}
    for r, start in zip(rows, starts):
        dur = Decimal(r[col["Duration(us)"]])
        stream = r[col["Stream ID"]]
        end = start - t0 + dur
        step = spans["steps"].setdefault(r[col["Step Id"]], [start - t0, end])
        step[:] = [min(step[0], start - t0), max(step[1], end)]
        if not stream.isdigit():  # a collective (HCCL row): the communication lane
            events.append({"name": r[col["Name"]], "ph": "X", "tid": 0, "ts": float(start - t0),
                           "dur": float(dur), "pid": 10000})
            spans["comm"].append((start - t0, end))
            continue
        spans["compute"].append((start - t0, end))
        streams.add(int(stream))
        events.append({"name": r[col["Name"]], "ph": "X", "tid": int(stream), "ts": float(start - t0),
                       "dur": float(dur), "pid": device})
        t = by_type.setdefault(r[col["Type"]], [Decimal(0), 0])
        t[0] += dur
        t[1] += 1
    events += [{"name": "thread_name", "ph": "M", "pid": device, "tid": s, "args": {"name": f"Stream #{s}"}}
               for s in sorted(streams)]
    events += _steps_and_overlap(device, spans)
    with open(os.path.join(out_root, f"ascend_timeline_display_{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(events, fh)
    total = sum((t for t, _ in by_type.values()), Decimal(0)) or Decimal(1)
    _write(os.path.join(out_root, f"aicore_intermediate_{rank}_type.csv"),
           ["op_type", "total_time", "execution_frequency", "percent"],
           [[k, str(t / 1000), str(n), str(round(100 * t / total, 2))] for k, (t, n) in sorted(by_type.items())])
    info = {"context_mode": 0, "rank_id": rank, "ms_version": "2.2.14", "parallel_mode": "data_parallel",
            "pipeline_stage_num": 1, "pipeline_stage_id": 0, "rank_size": None, "is_heterogeneous": False}
    with open(os.path.join(out_root, f"profiler_info_{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(info, fh)


OVERLAP_TIDS = {"Merged Computation Op": 7999, "Pure Communication Op": 8000, "Merged Communication Op": 8001,
                "Free Time": 8002}
STEPS_TID = 100000


def _union(spans):
    out = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _minus(spans, cut):
    """``spans`` (a union) without the intervals of ``cut`` (a union)."""
    out = []
    for lo, hi in spans:
        for c_lo, c_hi in cut:
            if c_hi <= lo or c_lo >= hi:
                continue
            if c_lo > lo:
                out.append([lo, c_lo])
            lo = max(lo, c_hi)
        if lo < hi:
            out.append([lo, hi])
    return out


def _steps_and_overlap(device, spans):
    """MindSpore's Steps thread (a slice per step named by its number, over its tasks) and its Op Overlap Analyse
    threads: merged computation, merged communication, communication not under computation, and free time."""
    compute, comm = _union(spans["compute"]), _union(spans["comm"])
    busy = _union(compute + comm)
    free = _minus([[busy[0][0], busy[-1][1]]], busy) if busy else []
    lanes = {"Merged Computation Op": compute, "Merged Communication Op": comm,
             "Pure Communication Op": _minus(comm, compute), "Free Time": free}
    events = [{"name": "thread_name", "ph": "M", "pid": device, "tid": STEPS_TID, "args": {"name": "Steps"}}]
    events += [{"name": str(step), "ph": "X", "pid": device, "tid": STEPS_TID, "ts": float(lo), "dur": float(hi - lo)}
               for step, (lo, hi) in sorted(spans["steps"].items(), key=lambda kv: kv[1][0])]
    for name, tid in OVERLAP_TIDS.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 12000, "tid": tid, "args": {"name": name}})
        events += [{"name": name, "ph": "X", "pid": 12000, "tid": tid, "ts": float(lo), "dur": float(hi - lo)}
                   for lo, hi in lanes[name]]
    return events
