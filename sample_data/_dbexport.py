"""The db export of a generated rank (FORMATS.md §7): ``ascend_pytorch_profiler_{rank}.db`` and ``analysis.db``
written from the same rank's Level1 text export, which they then replace (a db-export rank folder holds
profiler_info and the two databases, as torch_npu writes it). Meant for small runs (the trace is read whole).

What goes where, with torch_npu's and msprof's schema (the 2025 sample's CANN 8.0 columns):

* ``PYTORCH_API``: the Python lane's torch ops (type 50001), Enqueue / Dequeue (50002) and python_function
  frames (50003), times as text;
  ``connectionId`` is a ``CONNECTION_IDS`` group: a torch op's holds the connection ids of the tasks it launched
  (its async_npu flows) and, for a forward / backward pair, one id shared by both; an Enqueue / Dequeue pair
  shares its correlation id (offset by ``5 << 28``, as torch_npu keeps framework ids apart from CANN's);
  ``PYTORCH_CALLCHAINS`` holds each op's call stack, one row per frame.
* ``CANN_API``: the CANN lane (``AscendCL@…`` as type 20000 acl, ``Runtime@…`` as 5000 runtime), with its
  connection id (the HostToDevice flow's).
* ``TASK``: every Ascend Hardware task (msprof's task type names: KERNEL_AICORE, KERNEL_AIVEC, …);
  ``COMPUTE_TASK_INFO`` for the tasks kernel_details.csv lists (name, type, core, shapes; "N/A" at Level0) and
  ``TASK_PMU_INFO`` their metrics (``*_time`` in ns); ``COMMUNICATION_OP`` the HCCL operators (group = the HCCL
  comm's 19-digit hash) and ``COMMUNICATION_TASK_INFO`` the plane tasks (each on the task of the HCCL stream at
  its start; none at Level0).
* memory: ``MEMORY_RECORD``, ``NPU_MEM`` (memory_record's APP rows), ``OP_MEMORY``, ``NPU_OP_MEM`` (CANN's
  records of the GE blocks: allocation and release) and ``NPU_MODULE_MEM`` from the memory CSVs, sizes in bytes
  (a GE block's name without ``cann::``, with no stream and no active totals); counters ``AICORE_FREQ``, and
  ``HBM``, ``LLC``, ``ACC_PMU`` and ``SOC_BANDWIDTH_LEVEL`` rows on NPU_MEM's clock.
* ``STEP_TIME`` (device step ranges), ``STRING_IDS`` (CANN strings from 0, framework from ``1 << 28``, memory
  from ``2 << 28``), the ``ENUM_*`` tables, ``META_DATA``, ``NPU_INFO``, ``HOST_INFO``, ``SESSION_TIME_INFO``,
  ``RANK_DEVICE_MAP``; ``OVERLAP_ANALYSIS`` only when asked (MindStudio Insight adds it when it opens a file).
* analysis.db: ``StepTraceTime`` (step_trace_time.csv, µs) and at Level1/2 ``CommAnalyzerTime`` /
  ``CommAnalyzerBandwidth`` (the transports that carried data, one row per packet size) / ``CommAnalyzerMatrix``
  from communication*.json.
"""
import csv
import json
import os
import sqlite3
from decimal import Decimal

FWK_STRINGS, MEMORY_STRINGS = 1 << 28, 2 << 28
FWK_CONNECTION = 5 << 28
API_TYPES = {"runtime": 5000, "hccl": 5500, "node": 10000, "model": 15000, "acl": 20000, "op": 50001,
             "queue": 50002, "trace": 50003, "mstx": 50004}
API_PREFIX = {"AscendCL": "acl", "Runtime": "runtime", "Node": "node", "Model": "model", "Hccl": "hccl"}
DATA_TYPES = ["INT8", "INT16", "INT32", "FP16", "FP32", "INT64", "UINT64", "UINT8", "UINT16", "UINT32", "FP64",
              "BFP16", "INT128"]
LINK_TYPES = ["ON_CHIP", "HCCS", "PCIE", "ROCE", "SIO", "HCCS_SW", "STANDARD_ROCE", "RESERVED"]
TRANSPORT_TYPES = ["SDMA", "RDMA", "LOCAL"]
RDMA_TYPES = ["RDMA_SEND_NOTIFY", "RDMA_SEND_PAYLOAD", "RDMA_PAYLOAD_PREPARE", "RDMA_PAYLOAD_CHECK",
              "RDMA_PAYLOAD_ACK", "RDMA_SEND_OP"]
MODULES = ["SLOG", "IDEDD", "IDEDH", "HCCL", "FMK", "HIAIENGINE", "DVPP", "RUNTIME", "CCE", "HDC", "DRV", "MDCFUSION",
           "MDCLOCATION", "MDCPERCEPTION", "MDCFSM", "MDCCOMMON", "MDCMONITOR", "MDCBSWP", "MDCDEFAULT", "MDCSC",
           "MDCPNC", "MLL", "DEVMM", "KERNEL", "LIBMEDIA", "CCECPU", "ASCENDDK", "ROS", "HCCP", "ROCE", "TEFUSION",
           "PROFILING", "DP", "APP", "TS", "TSDUMP", "AICPU", "LP", "TDT", "FE", "MD", "MB", "ME", "IMU", "IMP", "GE"]
NA = 65534
TASK_TYPES = {"AI_CORE": "KERNEL_AICORE", "AI_VECTOR_CORE": "KERNEL_AIVEC", "AI_CPU": "KERNEL_AICPU",
              "DSA_SQE": "STARS_COMMON", "EVENT_WAIT_SQE": "EVENT_WAIT", "EVENT_RECORD_SQE": "EVENT_RECORD",
              "PCIE_DMA_SQE": "MEMCPY_ASYNC"}
PMU_COLUMNS = {"aicore_time(us)": "aic_total_time", "aic_total_cycles": "aic_total_cycles",
               "aic_mac_ratio": "aic_mac_ratio", "aic_scalar_ratio": "aic_scalar_ratio",
               "aic_mte2_ratio": "aic_mte2_ratio", "aiv_time(us)": "aiv_total_time",
               "aiv_total_cycles": "aiv_total_cycles", "aiv_vec_ratio": "aiv_vec_ratio",
               "aiv_scalar_ratio": "aiv_scalar_ratio", "aiv_mte2_ratio": "aiv_mte2_ratio"}
TEXT_FILES = ("trace_view.json", "kernel_details.csv", "operator_details.csv", "op_statistic.csv",
              "api_statistic.csv", "step_trace_time.csv", "memory_record.csv", "operator_memory.csv",
              "npu_module_mem.csv", "l2_cache.csv", "communication.json", "communication_matrix.json")
MB = 1048576

DDL = {
    "STRING_IDS": "id INTEGER PRIMARY KEY, value TEXT",
    "ENUM_API_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "ENUM_HCCL_DATA_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "ENUM_HCCL_LINK_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "ENUM_HCCL_TRANSPORT_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "ENUM_HCCL_RDMA_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "ENUM_MSTX_EVENT_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "ENUM_MODULE": "id INTEGER PRIMARY KEY, name TEXT",
    "META_DATA": "name TEXT, value TEXT",
    "NPU_INFO": "id INTEGER, name TEXT",
    "HOST_INFO": "hostUid TEXT, hostName TEXT",
    "SESSION_TIME_INFO": "startTimeNs INTEGER, endTimeNs INTEGER",
    "RANK_DEVICE_MAP": "rankId INTEGER, deviceId INTEGER",
    "STEP_TIME": "id INTEGER, startNs INTEGER, endNs INTEGER",
    "PYTORCH_API": "startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, name INTEGER, "
                   "sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER, "
                   "callchainId INTEGER, type INTEGER",
    "CONNECTION_IDS": "id INTEGER, connectionId INTEGER",
    "PYTORCH_CALLCHAINS": "id INTEGER, stack INTEGER, stackDepth INTEGER",
    "CANN_API": "startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER, connectionId INTEGER PRIMARY KEY, "
                "name INTEGER",
    "TASK": "startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER, "
            "globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER, modelId INTEGER",
    "COMPUTE_TASK_INFO": "name INTEGER, globalTaskId INTEGER PRIMARY KEY, blockDim INTEGER, mixBlockDim INTEGER, "
                         "taskType INTEGER, opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER, "
                         "inputShapes INTEGER, outputFormats INTEGER, outputDataTypes INTEGER, outputShapes INTEGER, "
                         "attrInfo INTEGER",
    "TASK_PMU_INFO": "globalTaskId INTEGER, name INTEGER, value NUMERIC",
    "COMMUNICATION_OP": "opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER, groupName INTEGER, "
                        "opId INTEGER PRIMARY KEY, relay INTEGER, retry INTEGER, dataType INTEGER, algType INTEGER, "
                        "count NUMERIC, opType INTEGER",
    "COMMUNICATION_TASK_INFO": "name INTEGER, globalTaskId INTEGER, taskType INTEGER, planeId INTEGER, "
                               "groupName INTEGER, notifyId INTEGER, rdmaType INTEGER, srcRank INTEGER, "
                               "dstRank INTEGER, transportType INTEGER, size INTEGER, dataType INTEGER, "
                               "linkType INTEGER, opId INTEGER",
    "MEMORY_RECORD": "component INTEGER, timestamp INTEGER, totalAllocated INTEGER, totalReserved INTEGER, "
                     "totalActive INTEGER, streamPtr INTEGER, deviceId INTEGER",
    "OP_MEMORY": "name INTEGER, size INTEGER, allocationTime INTEGER, releaseTime INTEGER, activeReleaseTime INTEGER, "
                 "duration INTEGER, activeDuration INTEGER, allocationTotalAllocated INTEGER, "
                 "allocationTotalReserved INTEGER, allocationTotalActive INTEGER, releaseTotalAllocated INTEGER, "
                 "releaseTotalReserved INTEGER, releaseTotalActive INTEGER, streamPtr INTEGER, deviceId INTEGER",
    "NPU_MEM": "type INTEGER, ddr NUMERIC, hbm NUMERIC, timestampNs INTEGER, deviceId INTEGER",
    "NPU_MODULE_MEM": "moduleId INTEGER, timestampNs INTEGER, totalReserved NUMERIC, deviceId INTEGER",
    "NPU_OP_MEM": "operatorName INTEGER, addr INTEGER, type INTEGER, size INTEGER, timestampNs INTEGER, "
                  "globalTid INTEGER, totalAllocate NUMERIC, totalReserve NUMERIC, component INTEGER, deviceId INTEGER",
    "AICORE_FREQ": "deviceId INTEGER, timestampNs NUMERIC, freq INTEGER",
    "HBM": "deviceId INTEGER, timestampNs INTEGER, bandwidth NUMERIC, hbmId INTEGER, type INTEGER",
    "LLC": "deviceId INTEGER, llcId INTEGER, timestampNs INTEGER, hitRate REAL, throughput INTEGER, mode INTEGER",
    "ACC_PMU": "accId INTEGER, readBwLevel INTEGER, writeBwLevel INTEGER, readOstLevel INTEGER, "
               "writeOstLevel INTEGER, timestampNs NUMERIC, deviceId INTEGER",
    "SOC_BANDWIDTH_LEVEL": "l2BufferBwLevel INTEGER, mataBwLevel INTEGER, timestampNs NUMERIC, deviceId INTEGER",
}
OVERLAP_DDL = "id INTEGER PRIMARY KEY AUTOINCREMENT, deviceId integer, startNs integer, endNs integer, type integer"
ANALYSIS_DDL = {
    "StepTraceTime": "step TEXT, computing NUMERIC, communication_not_overlapped NUMERIC, overlapped NUMERIC, "
                     "communication NUMERIC, free NUMERIC, stage NUMERIC, bubble NUMERIC, "
                     "communication_not_overlapped_and_exclude_receive NUMERIC, preparing NUMERIC",
    "CommAnalyzerTime": "hccl_op_name TEXT, group_name TEXT, start_timestamp NUMERIC, elapse_time NUMERIC, "
                        "transit_time NUMERIC, wait_time NUMERIC, synchronization_time NUMERIC, idle_time NUMERIC, "
                        "step TEXT, type TEXT",
    "CommAnalyzerBandwidth": "hccl_op_name TEXT, group_name TEXT, transport_type TEXT, transit_size NUMERIC, "
                             "transit_time NUMERIC, bandwidth NUMERIC, large_packet_ratio NUMERIC, "
                             "package_size NUMERIC, count NUMERIC, total_duration NUMERIC, step TEXT, type TEXT",
    "CommAnalyzerMatrix": "hccl_op_name TEXT, group_name TEXT, src_rank TEXT, dst_rank TEXT, transport_type TEXT, "
                          "transit_size NUMERIC, transit_time NUMERIC, bandwidth NUMERIC, step TEXT, type TEXT, "
                          "op_name TEXT",
}
STEP_COLUMNS = ["Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage", "Bubble",
                "Communication(Not Overlapped and Exclude Receive)", "Preparing"]


def ns(ts):
    """torch_npu's µs text (``"1736…643.212"``, a trailing tab allowed) -> integer ns."""
    return int(Decimal(str(ts).strip()) * 1000)


def _int(text):
    text = (text or "").strip()
    try:
        return int(Decimal(text))
    except ArithmeticError:
        return None


class Strings:
    """STRING_IDS: one id per distinct value, in the range of its writer."""

    def __init__(self):
        self.ids, self.next = {}, {0: 0, FWK_STRINGS: FWK_STRINGS, MEMORY_STRINGS: MEMORY_STRINGS}

    def __call__(self, value, base=0):
        if value is None:
            return None
        key = (base, value)
        if key not in self.ids:
            self.ids[key] = self.next[base]
            self.next[base] += 1
        return self.ids[key]

    def rows(self):
        return [(i, v) for (_, v), i in sorted(self.ids.items(), key=lambda kv: kv[1])]


def _bytes_of(row):
    """A cell in MB of ``row`` as whole bytes (None when empty)."""
    return lambda col: None if not row[col] else round(float(row[col]) * MB)


def _ns_of(row):
    """A µs-text cell of ``row`` as ns (None when empty)."""
    return lambda col: ns(row[col]) if row[col].strip() else None


def _csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def write_db_export(rank_dir, rank, level, group, steps, overlap_table=False):
    """Write the db export of the Level1 text export in ``rank_dir`` (at ``level``) and remove the text files."""
    out = os.path.join(rank_dir, "ASCEND_PROFILER_OUTPUT")
    with open(os.path.join(out, "trace_view.json"), encoding="utf-8") as fh:
        events = json.load(fh)
    db = _ProfilerDb(rank, level, group, events, out)
    db.write(os.path.join(out, f"ascend_pytorch_profiler_{rank}.db"), steps, overlap_table)
    _write_analysis(out, level)
    for name in TEXT_FILES:
        path = os.path.join(out, name)
        if os.path.exists(path):
            os.remove(path)
    meta = os.path.join(rank_dir, "profiler_metadata.json")
    if os.path.exists(meta):  # torch_npu writes it into META_DATA instead
        os.remove(meta)
    for name in os.listdir(rank_dir):
        if name.startswith("profiler_info") and name.endswith(".json"):
            path = os.path.join(rank_dir, name)
            with open(path, encoding="utf-8") as fh:
                info = json.load(fh)
            info["config"]["experimental_config"]["_export_type"] = "db"
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(info, fh, indent=4)


class _ProfilerDb:
    def __init__(self, rank, level, group, events, out):
        self.rank, self.level, self.group, self.events, self.out = rank, level, group, events, out
        self.s = Strings()
        self.procs = {e["pid"]: e["args"]["name"] for e in events
                      if e.get("ph") == "M" and e.get("name") == "process_name"}
        self.threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                        if e.get("ph") == "M" and e.get("name") == "thread_name"}
        self.tables = {name: [] for name in DDL}

    def lane(self, name):
        return [e for e in self.events if e.get("ph") == "X" and self.procs.get(e.get("pid")) == name]

    def write(self, path, steps, overlap_table):
        hw = self.lane("Ascend Hardware")
        self.device = hw[0]["pid"] & 31 if hw else self.rank % 8
        self.os_pid = hw[0]["pid"] >> 10 if hw else 0
        self._tasks(hw)
        self._communication()
        self._python()
        self._cann()
        self._memory()
        self._counters()
        self._info(steps)
        if os.path.exists(path):
            os.remove(path)
        con = sqlite3.connect(path)
        try:
            for table, ddl in DDL.items():
                con.execute(f"CREATE TABLE {table} ({ddl})")
            self.tables["STRING_IDS"] = self.s.rows()
            for table, rows in self.tables.items():
                if rows:
                    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
            if overlap_table:
                con.execute(f"CREATE TABLE OVERLAP_ANALYSIS ({OVERLAP_DDL})")
                kinds = {"Computing": 0, "Communication": 1, "Communication(Not Overlapped)": 2, "Free": 3}
                con.executemany("INSERT INTO OVERLAP_ANALYSIS (deviceId, startNs, endNs, type) VALUES (?, ?, ?, ?)",
                                [(self.device, ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000), kinds[e["name"]])
                                 for e in self.lane("Overlap Analysis") if e["name"] in kinds])
            con.commit()
        finally:
            con.close()

    # ---------------------------------------------------------------------------------------------- device
    def _tasks(self, hw):
        s, level0 = self.s, self.level == "Level0"
        kernels = {(ns(r["Start Time(us)"]), r["Name"]): r for r in _csv(os.path.join(self.out, "kernel_details.csv"))}
        self.task_at = {}  # (stream, start ns) -> global task id, for the communication tasks
        for gid, e in enumerate(sorted(hw, key=lambda e: (ns(e["ts"]), e["tid"]))):
            a = e.get("args") or {}
            start = ns(e["ts"])
            end = start + round(e["dur"] * 1000)
            ttype = a.get("Task Type", "")
            self.tables["TASK"].append((start, end, self.device, a.get("connection_id"), gid, self.os_pid,
                                        s(TASK_TYPES.get(ttype, ttype)), a.get("Subtask Id", 4294967295),
                                        e["tid"], a.get("Task Id"), a.get("Model Id", 4294967295)))
            self.task_at.setdefault((e["tid"], start), gid)
            k = kernels.get((start, e["name"]))
            if k is None:
                continue
            def na(col, k=k):
                return s("N/A" if level0 else k.get(col, "N/A"))

            self.tables["COMPUTE_TASK_INFO"].append((
                s(k["Name"]), gid, _int(k.get("Block Dim")), 0 if level0 else _int(k.get("Mix Block Dim")),
                na("Accelerator Core"), na("Type"), na("Input Formats"), na("Input Data Types"), na("Input Shapes"),
                na("Output Formats"), na("Output Data Types"), na("Output Shapes"), s("")))
            if level0:
                continue
            for col, metric in PMU_COLUMNS.items():
                value = k.get(col)
                if value in (None, "", "N/A"):
                    continue
                number = Decimal(value) * (1000 if metric.endswith("_time") else 1)
                self.tables["TASK_PMU_INFO"].append((gid, s(metric), float(number)))

    def _communication(self):
        s = self.s
        lane = self.lane("HCCL")
        ops = [e for e in lane if not self.threads.get((e["pid"], e["tid"]), "").startswith("Plane")]
        group = s(self.group)
        by_conn = {}
        for op_id, e in enumerate(sorted(ops, key=lambda e: ns(e["ts"])), start=1):
            a = e.get("args") or {}
            start = ns(e["ts"])
            name = e["name"]
            by_conn[a.get("connection_id")] = (op_id, start, start + round(e["dur"] * 1000), name)
            self.tables["COMMUNICATION_OP"].append((
                s(name), start, start + round(e["dur"] * 1000), a.get("connection_id"), group, op_id, 0, 0,
                DATA_TYPES.index(a.get("data_type", "FP32")), s(a.get("alg_type")), a.get("count"),
                s(name.split("__")[0] + "_")))
        if self.level == "Level0":
            return
        starts = sorted((v[1], v[2], v[0], v[3]) for v in by_conn.values())
        for e in lane:
            plane = self.threads.get((e["pid"], e["tid"]), "")
            if not plane.startswith("Plane"):
                continue
            a = e.get("args") or {}
            start = ns(e["ts"])
            op = next((o for o in starts if o[0] <= start < o[1] or o[0] == start), None)
            gid = self.task_at.get((a.get("stream id"), start))
            if op is None or gid is None:
                continue
            dst = a.get("dst rank")
            notify = a.get("notify_id")
            self.tables["COMMUNICATION_TASK_INFO"].append((
                s(op[3]), gid, s(a.get("task type", e["name"])), int(plane.split()[1]), group,
                int(notify) if str(notify).isdigit() and int(notify) < 1 << 63 else 9223372036854775807,
                65535, a.get("src rank"), dst,
                TRANSPORT_TYPES.index(a["transport type"]) if a.get("transport type") in TRANSPORT_TYPES else 65535,
                a.get("size(Byte)", 0),
                DATA_TYPES.index(a["data type"]) if a.get("data type") in DATA_TYPES else 65535,
                LINK_TYPES.index(a["link type"]) if a.get("link type") in LINK_TYPES else 65535, op[2]))

    # ---------------------------------------------------------------------------------------------- host
    def _python(self):
        s = self.s
        py = self.lane("Python")
        # async_npu flows: torch op (pid, tid, ts) -> the device task at the finish end -> its connection id
        conn_at = {}
        for e in self.events:
            if e.get("ph") == "X" and self.procs.get(e.get("pid")) in ("Ascend Hardware", "HCCL"):
                conn_at[(e["pid"], e["tid"], e["ts"])] = (e.get("args") or {}).get("connection_id")
        flows = {}
        for e in self.events:
            if e.get("cat") in ("async_npu", "fwdbwd") and e.get("ph") in ("s", "f"):
                flows.setdefault((e["cat"], str(e["id"])), {})[e["ph"]] = e
        launched, fwdbwd = {}, {}
        for (cat, fid), ends in flows.items():
            src, dst = ends.get("s"), ends.get("f")
            if src is None or dst is None:
                continue
            key = (src["pid"], src["tid"], src["ts"])
            if cat == "async_npu":
                cid = conn_at.get((dst["pid"], dst["tid"], dst["ts"]))
                if cid is not None:
                    launched.setdefault(key, []).append(cid)
            else:
                shared = FWK_CONNECTION + (1 << 20) + int(fid)
                fwdbwd.setdefault(key, []).append(shared)
                fwdbwd.setdefault((dst["pid"], dst["tid"], dst["ts"]), []).append(shared)
        chains, group_id = {}, 0
        for e in sorted(py, key=lambda e: (ns(e["ts"]), -e["dur"])):
            a = e.get("args") or {}
            start = ns(e["ts"])
            end = start + round(e["dur"] * 1000)
            gtid = (e["pid"] << 32) | e["tid"]
            cat = e.get("cat")
            key = (e["pid"], e["tid"], e["ts"])
            if cat in ("enqueue", "dequeue"):
                cids = [FWK_CONNECTION + a["correlation_id"]]
                row = [str(start), str(end), gtid, None, s(e["name"], FWK_STRINGS), None, None, None,
                       None, None, API_TYPES["queue"]]
            elif cat == "python_function":
                cids = []
                row = [str(start), str(end), gtid, None, s(e["name"], FWK_STRINGS), None, None, None,
                       None, None, API_TYPES["trace"]]
            else:
                cids = launched.get(key, []) + fwdbwd.get(key, [])
                stack = a.get("Call stack")
                chain = None
                if stack:
                    chain = chains.setdefault(stack, len(chains))
                row = [str(start), str(end), gtid, None, s(e["name"], FWK_STRINGS), a.get("Sequence number"),
                       a.get("Fwd thread id"), s(a.get("Input type"), FWK_STRINGS),
                       s(a.get("Input Dims"), FWK_STRINGS), chain, API_TYPES["op"]]
            if cids:
                row[3] = group_id
                self.tables["CONNECTION_IDS"] += [(group_id, c) for c in cids]
                group_id += 1
            self.tables["PYTORCH_API"].append(tuple(row))
        for stack, chain in chains.items():
            for depth, frame in enumerate(stack.split(";\r\n")):
                self.tables["PYTORCH_CALLCHAINS"].append((chain, s(frame, FWK_STRINGS), depth))

    def _cann(self):
        s = self.s
        for e in sorted(self.lane("CANN"), key=lambda e: ns(e["ts"])):
            prefix, _, name = e["name"].partition("@")
            start = ns(e["ts"])
            a = e.get("args") or {}
            self.tables["CANN_API"].append((start, start + round(e["dur"] * 1000),
                                            API_TYPES[API_PREFIX.get(prefix, "acl")],
                                            ((e["pid"] >> 10) << 32) | e["tid"], a.get("connection_id"), s(name)))

    # ---------------------------------------------------------------------------------------------- memory
    def _memory(self):
        s, dev = self.s, self.device
        app = s("app")
        for i, r in enumerate(_csv(os.path.join(self.out, "memory_record.csv"))):
            if r["Component"] == "APP":  # the process's NPU memory: NPU_MEM (the NPU MEM counter of a db run)
                t = ns(r["Timestamp(us)"])
                self.tables["NPU_MEM"].append((app, 0, round(float(r["Total Reserved(MB)"]) * MB), t, dev))
                self.tables["HBM"].append((dev, t, 1.5e9 + 1e6 * (i % 7), 0, s("read")))  # a few other counters
                self.tables["LLC"].append((dev, 0, t, 80.0 + i % 10, 2_000_000 + i, s("read")))
                self.tables["ACC_PMU"].append((0, i % 5, i % 3, 1, 0, t, dev))
                self.tables["SOC_BANDWIDTH_LEVEL"].append((i % 4, i % 2, t, dev))
                continue
            mb = _bytes_of(r)
            self.tables["MEMORY_RECORD"].append((s(r["Component"], MEMORY_STRINGS), ns(r["Timestamp(us)"]),
                                                 mb("Total Allocated(MB)"), mb("Total Reserved(MB)"),
                                                 mb("Total Active(MB)"), _int(r["Stream Ptr"]), dev))
        for i, r in enumerate(_csv(os.path.join(self.out, "operator_memory.csv"))):
            ge = r["Name"].startswith("cann::")
            mb, t = _bytes_of(r), _ns_of(r)
            if ge:  # CANN's own record of a GE block: its allocation and release (NPU_OP_MEM)
                for kind, at, total in ((0, "Allocation Time(us)", "Allocation Total Allocated(MB)"),
                                        (1, "Release Time(us)", "Release Total Allocated(MB)")):
                    if r[at].strip():
                        self.tables["NPU_OP_MEM"].append((
                            s(r["Name"].removeprefix("cann::")), 0x124000000000 + 4096 * i, kind,
                            round(float(r["Size(KB)"]) * 1024), t(at), self.os_pid << 32, mb(total),
                            mb(total.replace("Allocated", "Reserved")), s("GE"), dev))
            self.tables["OP_MEMORY"].append((
                s(r["Name"].removeprefix("cann::"), MEMORY_STRINGS), round(float(r["Size(KB)"]) * 1024),
                t("Allocation Time(us)"), t("Release Time(us)"), t("Active Release Time(us)"), t("Duration(us)"),
                t("Active Duration(us)"), mb("Allocation Total Allocated(MB)"), mb("Allocation Total Reserved(MB)"),
                None if ge else mb("Allocation Total Active(MB)"), mb("Release Total Allocated(MB)"),
                mb("Release Total Reserved(MB)"), None if ge else mb("Release Total Active(MB)"),
                None if ge else _int(r["Stream Ptr"]), dev))
        for r in _csv(os.path.join(self.out, "npu_module_mem.csv")):
            if r["Component"] in MODULES:
                self.tables["NPU_MODULE_MEM"].append((MODULES.index(r["Component"]), ns(r["Timestamp(us)"]),
                                                      round(float(r["Total Reserved(MB)"]) * MB), dev))

    def _counters(self):
        for e in self.events:
            if e.get("ph") == "C" and e["name"] == "AI Core Freq":
                t = ns(e["ts"]) if "." in str(e["ts"]) else int(e["ts"]) * 1000
                self.tables["AICORE_FREQ"].append((self.device, t, e["args"]["MHz"]))

    # ---------------------------------------------------------------------------------------------- metadata
    def _info(self, steps):
        t = self.tables
        t["ENUM_API_TYPE"] = [(v, k) for k, v in API_TYPES.items()]
        t["ENUM_HCCL_DATA_TYPE"] = list(enumerate(DATA_TYPES)) + [(NA, "N/A"), (65535, "INVALID_TYPE")]
        t["ENUM_HCCL_LINK_TYPE"] = list(enumerate(LINK_TYPES)) + [(NA, "N/A"), (65535, "INVALID_TYPE")]
        t["ENUM_HCCL_TRANSPORT_TYPE"] = list(enumerate(TRANSPORT_TYPES)) + [(NA, "N/A"), (65535, "INVALID_TYPE")]
        t["ENUM_HCCL_RDMA_TYPE"] = list(enumerate(RDMA_TYPES)) + [(NA, "N/A"), (65535, "INVALID_TYPE")]
        t["ENUM_MSTX_EVENT_TYPE"] = list(enumerate(["marker", "push/pop", "start/end", "marker_ex"]))
        t["ENUM_MODULE"] = list(enumerate(MODULES))
        env = {k: "" for k in ("ASCEND_GLOBAL_LOG_LEVEL", "HCCL_RDMA_TC", "HCCL_RDMA_SL", "ACLNN_CACHE_LIMIT",
                               "HOST_CACHE_CAPACITY", "ASCEND_ENHANCE_ENABLE", "PYTORCH_NPU_ALLOC_CONF",
                               "ASCEND_LAUNCH_BLOCKING")}
        t["META_DATA"] = [("SCHEMA_VERSION_MICRO", "0"), ("SCHEMA_VERSION_MINOR", "0"), ("SCHEMA_VERSION_MAJOR", "1"),
                          ("SCHEMA_VERSION", "1.0.0"), ("ENV_VARIABLES", json.dumps(env))]
        t["NPU_INFO"] = [(self.device, "Ascend910B")]
        t["HOST_INFO"] = [(str(3538958389648580163 + self.rank), "ubuntu")]
        xs = [e for e in self.events if e.get("ph") == "X"]
        first = min(ns(e["ts"]) for e in xs)
        last = max(ns(e["ts"]) + round(e["dur"] * 1000) for e in xs)
        t["SESSION_TIME_INFO"] = [(first - 20_000_000, last + 20_000_000)]
        t["RANK_DEVICE_MAP"] = [(self.rank, self.device)]
        t["STEP_TIME"] = [(st["id"], st["device_start_ns"], st["end_ns"]) for st in steps]


def _write_analysis(out, level):
    path = os.path.join(out, "analysis.db")
    if os.path.exists(path):
        os.remove(path)
    con = sqlite3.connect(path)
    try:
        con.execute(f"CREATE TABLE StepTraceTime ({ANALYSIS_DDL['StepTraceTime']})")
        con.executemany("INSERT INTO StepTraceTime VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [(r["Step"], *(float(r[c]) for c in STEP_COLUMNS))
                         for r in _csv(os.path.join(out, "step_trace_time.csv"))])
        comm_path = os.path.join(out, "communication.json")
        if level != "Level0" and os.path.exists(comm_path):
            for table in ("CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"):
                con.execute(f"CREATE TABLE {table} ({ANALYSIS_DDL[table]})")
            with open(comm_path, encoding="utf-8") as fh:
                comm = json.load(fh)
            with open(os.path.join(out, "communication_matrix.json"), encoding="utf-8") as fh:
                matrix = json.load(fh)
            _comm_rows(con, comm, matrix)
        con.commit()
    finally:
        con.close()


def _comm_rows(con, comm, matrix):
    times, bands, links = [], [], []
    for step, kinds in comm.items():
        for kind, ops in kinds.items():
            for key, op in (ops or {}).items():
                if key == "Total Op Info":
                    continue
                name, _, group = key.partition("@")
                t = op["Communication Time Info"]
                times.append((name, group, t["Start Timestamp(us)"], t["Elapse Time(ms)"], t["Transit Time(ms)"],
                              t["Wait Time(ms)"], t["Synchronization Time(ms)"], t["Idle Time(ms)"], step, kind))
                for transport, b in op["Communication Bandwidth Info"].items():
                    if not b.get("Transit Size(MB)"):
                        continue  # analysis.db keeps only the transports that carried data
                    dist = b.get("Size Distribution") or {"0": [0, 0]}
                    for size, (count, dur) in dist.items():
                        bands.append((name, group, transport, b["Transit Size(MB)"], b["Transit Time(ms)"],
                                      b["Bandwidth(GB/s)"], b.get("Large Packet Ratio", 0), float(size), count, dur,
                                      step, kind))
    for step, kinds in matrix.items():
        for kind, slots in kinds.items():
            for key, cells in (slots or {}).items():
                slot, _, group = key.partition("@")
                for link, v in cells.items():
                    src, _, dst = link.partition("-")
                    links.append((slot, group, src, dst, v.get("Transport Type"), v.get("Transit Size(MB)"),
                                  v.get("Transit Time(ms)"), v.get("Bandwidth(GB/s)"), step, kind,
                                  v.get("Op Name", "")))
    con.executemany("INSERT INTO CommAnalyzerTime VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", times)
    con.executemany("INSERT INTO CommAnalyzerBandwidth VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", bands)
    con.executemany("INSERT INTO CommAnalyzerMatrix VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", links)
