"""CSV / JSON output helpers for the synthetic run generator (headers, aggregations, communication files).

All CSVs are written with ``csv.writer`` defaults (``\\r\\n`` line ends, minimal quoting), like torch_npu.
Timestamp cells are ``<us>.<3 decimals>`` strings followed by a TAB (see ``ts_cell``).
"""
import csv
import json
import re

MB = 1048576.0

KERNEL_HEADER = [
    "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
    "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim", "HF32 Eligible",
    "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
    "Context ID", "aicore_time(us)", "aic_total_cycles", "aic_mac_ratio", "aic_scalar_ratio", "aic_mte2_ratio",
    "aiv_time(us)", "aiv_total_cycles", "aiv_vec_ratio", "aiv_scalar_ratio", "aiv_mte2_ratio", "cube_utilization(%)"]
N_METRICS = 11
HCCL_NA = ",".join(["N/A"] * (len(KERNEL_HEADER) - 12))     # kernel_details cells after "Block Dim" of HCCL rows
OPERATOR_DETAILS_HEADER = [
    "Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
    "Device Self Duration(us)", "Device Total Duration(us)", "Device Self Duration With AICore(us)",
    "Device Total Duration With AICore(us)"]
OP_STATISTIC_HEADER = ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                       "Max Time(us)", "Ratio(%)"]
API_STATISTIC_HEADER = ["Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
STEP_TRACE_HEADER = ["Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free",
                     "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
MEMORY_RECORD_HEADER = ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)",
                        "Total Active(MB)", "Stream Ptr", "Device Type"]
OPERATOR_MEMORY_HEADER = [
    "Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)", "Active Release Time(us)", "Duration(us)",
    "Active Duration(us)", "Allocation Total Allocated(MB)", "Allocation Total Reserved(MB)",
    "Allocation Total Active(MB)", "Release Total Allocated(MB)", "Release Total Reserved(MB)",
    "Release Total Active(MB)", "Stream Ptr", "Device Type"]
NPU_MODULE_MEM_HEADER = ["Component", "Timestamp(us)", "Total Reserved(MB)", "Device"]
L2_CACHE_HEADER = ["Stream Id", "Task Id", "Hit Rate", "Victim Rate", "Op Name"]

# CANN modules reported in npu_module_mem.csv with their (constant) reserved MB.
MODULES = [("SLOG", 0.0), ("HCCL", 118.5), ("FMK", 0.0), ("RUNTIME", 61.25), ("DRV", 2.0), ("DEVMM", 0.0),
           ("TS", 4.0), ("AICPU", 18.0), ("APP", 0.0), ("GE", 12.5), ("FE", 0.0), ("PROFILING", 24.0)]


def ts_cell(ns):
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}\t"


def cell(value):
    """One CSV cell exactly as csv.writer (QUOTE_MINIMAL) writes it; used to pre-render constant cells."""
    s = value if isinstance(value, str) else str(value)
    if any(c in s for c in ',"\r\n'):
        return '"' + s.replace('"', '""') + '"'
    return s


def cells(values):
    return ",".join(cell(v) for v in values)


class CsvOut:
    """A csv.writer on a file that counts its data rows. ``write_lines`` takes pre-rendered ``...\r\n`` lines."""

    def __init__(self, path, header):
        self.path = path
        self.fh = open(path, "w", newline="", encoding="utf-8")
        self.writer = csv.writer(self.fh)
        self.writer.writerow(header)
        self.rows = 0

    def write(self, rows):
        self.writer.writerows(rows)
        self.rows += len(rows)

    def write_lines(self, lines):
        self.fh.write("".join(lines))
        self.rows += len(lines)

    def close(self):
        self.fh.close()


def write_csv(path, header, rows):
    out = CsvOut(path, header)
    out.write(rows)
    out.close()
    return out.rows


def op_statistic_rows(stats):
    """stats: {(op type, core type): [count, total ns, min ns, max ns]} -> rows sorted by total time."""
    stats = {k: v for k, v in stats.items() if v[0]}
    grand = sum(v[1] for v in stats.values()) or 1
    rows = []
    for (op_type, core), (cnt, tot, mn, mx) in sorted(stats.items(), key=lambda kv: (-kv[1][1], kv[0])):
        rows.append([op_type, core, cnt, round(tot / 1000, 3), round(mn / 1000, 3), round(tot / cnt / 1000, 3),
                     round(mx / 1000, 3), round(tot * 100 / grand, 3)])
    return rows


_LEVEL_ORDER = {"hccl": 0, "acl": 1, "runtime": 2, "node": 3}


def api_statistic_rows(stats):
    """stats: {(level, api name): [count, total ns, min ns, max ns, sum of squares in us^2]}."""
    rows = []
    stats = {k: v for k, v in stats.items() if v[0]}
    for (level, name), (cnt, tot, mn, mx, sq) in sorted(stats.items(),
                                                        key=lambda kv: (_LEVEL_ORDER.get(kv[0][0], 9), kv[0][1])):
        mean = tot / 1000 / cnt
        var = max(sq / cnt - mean * mean, 0.0)
        rows.append([level, name, round(tot / 1000, 3), cnt, round(mean, 3), round(mn / 1000, 3),
                     round(mx / 1000, 3), round(var, 3)])
    return rows


def step_trace_rows(steps, stats):
    """steps: [(step id, device start ns, end ns, host start ns)]; stats: {step id: dict of ns sums/extremes}.
    Values follow torch_npu's TraceStepTimeParser, in us."""
    rows = []
    for sid, _, _, host_start in steps:
        st = stats.get(sid)
        if st is None:
            continue
        comp, comm, cno, free = st["Computing"], st["Communication"], st["Communication(Not Overlapped)"], st["Free"]
        stage = (st["e2e_end"] - st["e2e_start"]) if st["e2e_start"] is not None else 0
        prep = (st["first_task"] - host_start) if st["first_task"] is not None else 0
        rows.append([str(sid), comp / 1000, cno / 1000, (comm - cno) / 1000, comm / 1000, free / 1000,
                     stage / 1000, 0, cno / 1000, prep / 1000])
    return rows


_COMM_TYPE_RE = re.compile(r"send|reduce|invalid|broadcast|allreduce|receive|allgather|reducescatter|scatter|"
                           r"alltoall|alltoallv|alltoallvc|batchsendrecv")


def comm_type(op_name):
    m = _COMM_TYPE_RE.search(op_name.lower())
    return m.group(0) if m else "invalid"


def _bw(size_mb, time_ms):
    return round(size_mb / time_ms, 4) if time_ms else 0


def _zero_bw(with_bw=True):
    d = {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0, "Large Packet Ratio": 0,
         "Size Distribution": {}}
    if not with_bw:
        d = {"Transit Time(ms)": 0, "Transit Size(MB)": 0, "Size Distribution": {}}
    return d


def _time_info(el, tr, wa, sy, start_us=None):
    d = {} if start_us is None else {"Start Timestamp(us)": start_us}
    d.update({"Elapse Time(ms)": el / 1e6, "Transit Time(ms)": tr / 1e6, "Wait Time(ms)": wa / 1e6,
              "Synchronization Time(ms)": sy / 1e6, "Idle Time(ms)": (el - tr - wa) / 1e6,
              "Wait Time Ratio": round(wa / (wa + tr), 4) if wa + tr else 0,
              "Synchronization Time Ratio": round(sy / (sy + tr), 4) if sy + tr else 0})
    return d


def communication_json(comm_ops, group):
    """comm_ops: list of dicts from the simulator (one per HCCL op). Returns (communication, matrix) objects."""
    comm, matrix = {}, {}
    for op in comm_ops:
        key = f"step{op['step']}"
        cstep = comm.setdefault(key, {"p2p": {}, "collective": {}})
        mstep = matrix.setdefault(key, {"p2p": [], "collective": {}})
        hccs_b, hccs_ns, dist = op["hccs_bytes"], op["hccs_ns"], op["hccs_dist"]
        size_mb, time_ms = hccs_b / 1e6, hccs_ns / 1e6
        bw = {"RDMA": _zero_bw(),
              "HCCS": {"Transit Size(MB)": size_mb, "Transit Time(ms)": time_ms,
                       "Bandwidth(GB/s)": _bw(size_mb, time_ms),
                       "Large Packet Ratio": 0.0,
                       "Size Distribution": {str(b / 1e6): [c, ns / 1e6] for b, (c, ns) in sorted(dist.items())}},
              "PCIE": _zero_bw(),
              "SDMA": {"Transit Size(MB)": size_mb, "Transit Time(ms)": time_ms,
                       "Bandwidth(GB/s)": _bw(size_mb, time_ms), "Large Packet Ratio": 0, "Size Distribution": {}},
              "SIO": _zero_bw()}
        if not hccs_b:
            bw["HCCS"] = _zero_bw()
            bw["SDMA"] = _zero_bw()
        cstep["collective"][f"{op['name']}@{group}"] = {
            "Communication Time Info": _time_info(op["elapse_ns"], op["transit_ns"], op["wait_ns"], op["sync_ns"],
                                                  op["start_ns"] / 1000),
            "Communication Bandwidth Info": bw}
        slot = mstep["collective"].setdefault((comm_type(op["name"]), group), {})
        for link, (transport, nbytes, ns) in op["links"].items():
            mb, ms = nbytes / 1e6, ns / 1e6
            slot.setdefault(link, []).append({"Transport Type": transport, "Transit Size(MB)": mb,
                                              "Transit Time(ms)": ms, "Bandwidth(GB/s)": _bw(mb, ms),
                                              "Op Name": op["name"]})
    for key, cstep in comm.items():
        ops = [v for k, v in cstep["collective"].items()]
        if ops:
            cstep["collective"]["Total Op Info"] = _total_info(ops)
        mstep = matrix[key]
        slots = {}
        for (ctype, grp), links in mstep["collective"].items():
            out = {}
            for link, entries in links.items():
                entries.sort(key=lambda e: -e["Bandwidth(GB/s)"])
                picks = {"top1": entries[0], "middle": entries[len(entries) // 2], "bottom1": entries[-1]}
                mb = sum(e["Transit Size(MB)"] for e in entries)
                ms = sum(e["Transit Time(ms)"] for e in entries)
                picks["total"] = {"Transport Type": entries[0]["Transport Type"], "Transit Size(MB)": mb,
                                  "Transit Time(ms)": ms, "Bandwidth(GB/s)": _bw(mb, ms)}
                if len(entries) >= 2:
                    picks["bottom2"] = entries[-2]
                if len(entries) >= 3:
                    picks["bottom3"] = entries[-3]
                for slot_name, entry in picks.items():
                    out.setdefault(slot_name, {})[link] = entry
            for slot_name in ("top1", "middle", "bottom1", "total", "bottom2", "bottom3"):
                if slot_name in out:
                    slots[f"{ctype}-{slot_name}@{grp}"] = out[slot_name]
        mstep["collective"] = slots
    return comm, matrix


def _total_info(ops):
    keys = ["Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)"]
    t = {k: sum(o["Communication Time Info"][k] for o in ops) for k in keys}
    tr, wa, sy = t["Transit Time(ms)"], t["Wait Time(ms)"], t["Synchronization Time(ms)"]
    t["Wait Time Ratio"] = round(wa / (wa + tr), 4) if wa + tr else 0
    t["Synchronization Time Ratio"] = round(sy / (sy + tr), 4) if sy + tr else 0
    bw = {}
    for tp in ("RDMA", "HCCS", "PCIE", "SDMA", "SIO"):
        entry = {"Transit Time(ms)": 0, "Transit Size(MB)": 0, "Size Distribution": {}}
        for o in ops:
            src = o["Communication Bandwidth Info"][tp]
            entry["Transit Time(ms)"] += src["Transit Time(ms)"]
            entry["Transit Size(MB)"] += src["Transit Size(MB)"]
            for size, (cnt, ms) in src["Size Distribution"].items():
                cur = entry["Size Distribution"].setdefault(size, [0, 0])
                cur[0] += cnt
                cur[1] += ms
        bw[tp] = entry
    return {"Communication Time Info": t, "Communication Bandwidth Info": bw}


def write_json(path, obj, indent=None):
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=indent)
