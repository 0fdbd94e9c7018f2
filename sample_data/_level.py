"""A generated Level1 text export made into what torch_npu writes at another profiler level (FORMATS.md §3.3, §4.1,
§4.11). Meant for small runs: the trace is rewritten through Python objects.

Level0:
* the trace is pruned as torch_npu prunes it: every event whose name starts with ``CANN``, ``AscendCL``,
  ``Runtime``, ``GE``, ``Node``, ``Model``, ``Hccl``, ``acl_to_npu`` or ``Communication@``, and every event whose
  ``args.name`` is one of them, is dropped, so the CANN lane's ``process_name`` goes while its ``thread_name``
  events and HostToDevice flow starts stay under an unnamed pid; the HCCL planes (task level) are not collected;
* kernel_details.csv keeps ``Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),
  Block Dim`` with Type and Accelerator Core ``N/A`` (an HCCL row keeps its core);
* op_statistic.csv, api_statistic.csv and communication*.json are not written.

Level2 is Level1 with the level named in profiler_info (the CANN level adds runtime API rows; the generator's
runtime calls are already there).
"""
import csv
import io
import json
import os

PRUNED_PREFIXES = ("CANN", "AscendCL", "Runtime", "GE", "Node", "Model", "Hccl", "acl_to_npu", "Communication@")
LEVEL0_KERNEL_COLUMNS = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                         "Wait Time(us)", "Block Dim"]
LEVEL0_ABSENT = ("op_statistic.csv", "api_statistic.csv", "communication.json", "communication_matrix.json")
LEVELS = ("Level0", "Level1", "Level2")


def _pruned(event, plane_tids):
    name = event.get("name") or ""
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    if name.startswith(PRUNED_PREFIXES) or args.get("name") in PRUNED_PREFIXES:
        return True
    return (event.get("pid"), event.get("tid")) in plane_tids


def to_level(rank_dir, level, trace_name="trace_view.json"):
    """Rewrite the Level1 text export in ``rank_dir`` (``ASCEND_PROFILER_OUTPUT`` and profiler_info) as ``level``."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}")
    if level == "Level1":
        return
    _set_level(rank_dir, level)
    if level == "Level2":
        return
    out = os.path.join(rank_dir, "ASCEND_PROFILER_OUTPUT")
    path = os.path.join(out, trace_name)
    with open(path, encoding="utf-8") as fh:
        events = json.load(fh)
    hccl = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
            and (e.get("args") or {}).get("name") == "HCCL"}
    planes = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
              and e.get("pid") in hccl and str((e.get("args") or {}).get("name", "")).startswith("Plane")}
    kept = [e for e in events if not _pruned(e, planes)]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[" + ", ".join(json.dumps(e) for e in kept) + "]")
    _level0_kernels(os.path.join(out, "kernel_details.csv"))
    for name in LEVEL0_ABSENT:
        p = os.path.join(out, name)
        if os.path.exists(p):
            os.remove(p)


def _level0_kernels(path):
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(LEVEL0_KERNEL_COLUMNS)
    for r in rows:
        hccl = r["Accelerator Core"] == "HCCL"
        w.writerow([r["Step Id"], r["Name"], "N/A", "HCCL" if hccl else "N/A", r["Start Time(us)"],
                    r["Duration(us)"], r["Wait Time(us)"], r["Block Dim"]])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        fh.write(buf.getvalue())


def _set_level(rank_dir, level):
    for name in os.listdir(rank_dir):
        if name.startswith("profiler_info") and name.endswith(".json"):
            path = os.path.join(rank_dir, name)
            with open(path, encoding="utf-8") as fh:
                info = json.load(fh)
            exp = info["config"]["experimental_config"]
            exp["_profiler_level"] = level
            if level == "Level0":
                exp["_aic_metrics"] = "ACL_AICORE_NONE"
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(info, fh, indent=4)
