"""End of a rank: last flush, metadata, trace assembly, aggregated CSV / JSON files and the ground truth."""
import os
import shutil

from . import _csvs as out
from ._trace import OV_NAMES, assemble, cann_process_meta, python_meta


def finish_rank(sim):
    run_end = sim.max_x_end
    sim._flush(run_end, final=True)
    # the last AI Core Freq sample has an integer-us ts string without decimals, a quirk seen in real data
    last = run_end // 1000 + 1
    sim.segE.buf.append(f'{{"name": "AI Core Freq", "ts": "{last}", "pid": {sim.freq_pid}, "tid": 0, '
                        f'"args": {{"MHz": {sim.freq}}}, "ph": "C"}}')
    sim.nE["C"] += 1
    segs = (sim.segA, sim.segB, sim.segC, sim.segD, sim.segE, sim.segF)
    for seg in segs:
        seg.close()
    py_meta = python_meta(sim.pid, sim.tid_main, sim.tid_bwd, sim.tid_deq)
    streams = sim.sids if sim.hccl else sim.sids[:-1]
    cann_meta = cann_process_meta(sim.hw_pid, "Ascend Hardware", "NPU", 13, [(s, f"Stream {s}") for s in streams])
    cann_meta += cann_process_meta(sim.mem_pid, "NPU MEM", "NPU", 19)
    if sim.hccl:
        cann_meta += cann_process_meta(sim.hccl_pid, "HCCL", "NPU", 15, [(0, f"Group {sim.group} Communication")]
                                       + [(1 + p, f"Plane {p}") for p in range(4)], grouped=True)
    if sim.cann:
        cann_meta += cann_process_meta(sim.cann_pid, "CANN", "CPU", 7,
                                       [(t, f"Thread {t}") for t in (sim.tid_main, sim.tid_deq)], grouped=True)
    if sim.overlap:
        cann_meta += cann_process_meta(sim.ov_pid, "Overlap Analysis", "NPU", 23, list(enumerate(OV_NAMES)),
                                       thread_sort=False)
    cann_meta += cann_process_meta(sim.freq_pid, "AI Core Freq", "NPU", 14)
    fmt = sim.cfg["trace_format"]
    trace_name = "trace_view.json.gz" if fmt == "gz" else "trace_view.json"
    assemble(os.path.join(sim.dir, trace_name), fmt, [sim.segA, sim.segB, sim.segC, py_meta, sim.segD],
             [cann_meta, sim.segE, sim.segF])

    j = os.path.join
    csv_rows = {}
    for c in (sim.kernel_csv, sim.opdet_csv, sim.l2_csv, sim.opmem_csv):
        c.close()
        csv_rows[os.path.basename(c.path)] = c.rows
    sim.memtmp_fh.close()
    mem_path = j(sim.dir, "memory_record.csv")
    head = out.CsvOut(mem_path, out.MEMORY_RECORD_HEADER)
    head.write(sim.app_rows)                  # APP rows first, then the PTA / GE stream
    head.close()
    with open(mem_path, "a", newline="", encoding="utf-8") as dst, \
            open(sim.tmp("mem"), encoding="utf-8", newline="") as src:
        shutil.copyfileobj(src, dst, 1 << 20)
    csv_rows["memory_record.csv"] = len(sim.app_rows) + sim.mem.record_rows
    mod_rows = [[name, r[1], val, r[6]] for name, val in out.MODULES for r in sim.app_rows]
    csv_rows["npu_module_mem.csv"] = out.write_csv(j(sim.dir, "npu_module_mem.csv"), out.NPU_MODULE_MEM_HEADER,
                                                   mod_rows)
    csv_rows["op_statistic.csv"] = out.write_csv(j(sim.dir, "op_statistic.csv"), out.OP_STATISTIC_HEADER,
                                                 out.op_statistic_rows(sim.kstats))
    if sim.apistats:
        csv_rows["api_statistic.csv"] = out.write_csv(j(sim.dir, "api_statistic.csv"), out.API_STATISTIC_HEADER,
                                                      out.api_statistic_rows(sim.apistats))
    if sim.overlap:
        csv_rows["step_trace_time.csv"] = out.write_csv(j(sim.dir, "step_trace_time.csv"), out.STEP_TRACE_HEADER,
                                                        out.step_trace_rows(sim.step_ranges, sim.step_stats))
    for name in list(csv_rows):              # torch_npu does not create a CSV that has no rows
        if csv_rows[name] == 0:
            os.remove(j(sim.dir, name))
            del csv_rows[name]
    if sim.hccl and sim.comm_ops:
        comm, matrix = out.communication_json(sim.comm_ops, sim.group)
        out.write_json(j(sim.dir, "communication.json"), comm)
        out.write_json(j(sim.dir, "communication_matrix.json"), matrix)
    for p in ("A", "B", "C", "D", "E", "F", "mem"):
        os.remove(sim.tmp(p))

    nE = sim.nE
    segA, segB, segC, segD, segE, segF = segs
    n_meta = len(py_meta) + len(cann_meta)
    return {
        "rank": sim.rank, "pid": sim.pid, "device_id": sim.dev, "trace_file": trace_name,
        "x_events": segA.count + segB.count // 2 + segC.count // 2 + nE["X"],
        "c_events": nE["C"], "m_events": n_meta,
        "total_events": sum(s.count for s in segs) + n_meta,
        "cpu_op_events": segA.count, "min_x_ts_ns": sim.min_x, "max_x_end_ns": sim.max_x_end,
        "flows": {"async_task_queue": {"s": segB.count // 2, "f": segC.count // 2},
                  "async_npu": {"s": segF.count // 2, "f": segF.count // 2},
                  "HostToDevice": {"s": nE["s"], "f": nE["f"]},
                  "fwdbwd": {"s": segD.count // 2, "f": segD.count // 2}},
        "steps": [{"id": s[0], "device_start_ns": s[1], "end_ns": s[2], "host_start_ns": s[3]}
                  for s in sim.step_ranges],
        "hccl_ops": len(sim.comm_ops),
        "csv_rows": csv_rows,
    }
