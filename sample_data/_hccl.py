"""One HCCL collective on a rank's communication stream: the op slice on "Group <id> Communication", task slices
on "Plane 0..3" (lower-case args as in FORMATS.md 3.4) mirrored on the HCCL hardware stream, its flows, its
kernel_details row and the numbers behind communication.json / communication_matrix.json.

Task sequence (sequential on the stream): a Notify_Wait (the synchronization wait for the peers), then two rounds of
(Memcpy, Notify_Record, Notify_Wait) on every plane, then a Reduce_Inline. The op slice spans exactly the tasks.
Plane p talks to rank (rank + 1 + p) % ranks (LOCAL / ON_CHIP when that is the rank itself, HCCS otherwise).
"""
from ._csvs import HCCL_NA
from ._trace import ts_str

PLANES = 4
ROUNDS = 2
UINT32_MAX = 4294967295


def run_collective(sim, kind, rt_s, cid, op_ts, th):
    """Place the collective launched at ``rt_s`` (Runtime@ start) and emit it. Returns its duration in ns."""
    rnd = sim.rnd
    ci = sim.nstreams
    count = sim._comm_arg[1]
    st = sim._place(ci, rt_s, 500, 1500)
    if sim.sfree[0] > st:                       # wait for the gradients already queued on the main stream
        st = sim.sfree[0] + 300 + int(700 * rnd())
    st += (ci - st) % sim.mod
    name = f"hcom_{kind}__{sim.tag}_{sim.comm_index}_1"
    sim.comm_index += 1
    sid, hw, hc, rank = sim.sids[ci], sim.hw_pid, sim.hccl_pid, sim.rank
    task_id = sim.task_ids[ci]
    sim.task_ids[ci] = task_id + 1
    peers = [(rank + 1 + p) % sim.cfg["ranks"] for p in range(PLANES)]
    total = count * 4
    chunk = max(512, total // (PLANES * ROUNDS))
    E = sim.cann_chunk
    state = {"t": st, "ctx": 0}
    links, dist = {}, {}
    acc = {"transit": 0, "wait": 0, "hccs_b": 0, "hccs_ns": 0}

    def task(plane, pname, d, dst, transport, link, size, dtype, est, notify):
        t, ctx = state["t"], state["ctx"]
        tss = ts_str(t)
        bw = size / d if d else 0.0
        E.append((t, f'{{"name": "{pname}", "pid": {hc}, "tid": {1 + plane}, "ts": "{tss}", "dur": {d / 1000}, '
                     f'"args": {{"notify_id": "{notify}", "duration estimated(us)": {est}, "stream id": {sid}, '
                     f'"task id": {task_id}, "context id": {ctx}, "task type": "{pname}", "src rank": {rank}, '
                     f'"dst rank": {dst}, "transport type": "{transport}", "size(Byte)": {size}, '
                     f'"data type": "{dtype}", "link type": "{link}", "bandwidth(GB/s)": {bw}, '
                     f'"model id": 4294967295}}, "ph": "X"}}'))
        hwname = "SDMA" if size else ("Notify Wait" if pname == "Notify_Wait" else "Write Value")
        E.append((t, f'{{"name": "{hwname}", "pid": {hw}, "tid": {sid}, "ts": "{tss}", "dur": {d / 1000}, '
                     f'"args": {{"Model Id": 4294967295, "Task Type": "{hwname}", "Physic Stream Id": {sid}, '
                     f'"Task Id": {task_id}, "Batch Id": 0, "Subtask Id": {ctx}, "connection_id": {cid}}}, '
                     f'"ph": "X"}}'))
        state["ctx"] = ctx + 1
        state["t"] = t + d + 100 + int(800 * rnd())
        return t + d

    def transfer(dst, size, d, transport):
        acc["transit"] += d
        lk = links.setdefault(f"{rank}-{dst}", [transport, 0, 0])
        lk[1] += size
        lk[2] += d
        if transport == "HCCS":
            acc["hccs_b"] += size
            acc["hccs_ns"] += d
            dd = dist.setdefault(size, [0, 0])
            dd[0] += 1
            dd[1] += d

    sync = 300 + int(rnd() * rnd() * 60000)
    task(0, "Notify_Wait", sync, peers[0], "LOCAL", "INVALID_TYPE", 0, "INVALID_TYPE", 0.02, 60 + rank)
    acc["wait"] += sync
    for _ in range(ROUNDS):
        for p in range(PLANES):
            dst = peers[p]
            local = dst == rank
            bw = (250 + 250 * rnd()) if local else (15 + 6 * rnd())     # GB/s == bytes/ns
            d = int(chunk / bw)
            task(p, "Memcpy", d, dst, "SDMA", "ON_CHIP" if local else "HCCS", chunk, "INVALID_TYPE",
                 round(chunk / (bw * 1000) * 1.1, 6), "18446744073709551615")
            transfer(dst, chunk, d, "LOCAL" if local else "HCCS")
            task(p, "Notify_Record", 600 + int(200 * rnd()), dst, "SDMA", "INVALID_TYPE", 0, "INVALID_TYPE", 1,
                 (dst << 32) + 68 + p)
            wd = 20 + int(rnd() ** 3 * 20000)
            task(p, "Notify_Wait", wd, dst, "LOCAL", "INVALID_TYPE", 0, "INVALID_TYPE", 0.02, 76 + 8 * p)
            acc["wait"] += wd
    red = max(512, total // PLANES)
    d = int(red / (120 + 80 * rnd()))
    end = task(0, "Reduce_Inline", d, UINT32_MAX, "SDMA", "ON_CHIP", red, "FP32", round(d / 1000 * 0.9, 6), "0")
    transfer(rank, red, d, "LOCAL")
    dur = end - st
    tss = ts_str(st)
    E.append((st, f'{{"name": "{name}", "pid": {hc}, "tid": 0, "ts": "{tss}", "dur": {dur / 1000}, '
                  f'"args": {{"connection_id": {cid}, "model id": 4294967295, "data_type": "FP32", '
                  f'"alg_type": "MESH-RING", "count": {count}}}, "ph": "X"}}'))
    sim.nE["X"] += 2 * state["ctx"] + 1
    if sim.cann:
        E.append((st, f'{{"name": "HostToDevice{cid}", "ph": "f", "id": "{cid}", "ts": "{tss}", '
                      f'"cat": "HostToDevice", "pid": {hc}, "tid": 0, "bp": "e"}}'))
        sim.nE["f"] += 1
    F = sim.segF.buf
    F.append(f'{{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": {st}{th.at}{op_ts}", "cat": "async_npu"}}')
    F.append(f'{{"ph": "f", "bp": "e", "name": "torch_to_npu", "id": {st}, "pid": {hc}, "tid": 0, '
             f'"ts": "{tss}", "cat": "async_npu"}}')
    sim.sfree[ci] = end
    sim._note_task(st, end)
    sim.ov.src[ci].append((st, end))
    sim.krows.append((st, end, f"{sim.step_id},4294967295,N/A,N/A,{name},hcom_{kind}_,N/A,HCCL,{tss}\t,{dur / 1000},",
                      f",0,{HCCL_NA}\r\n"))
    sim.comm_ops.append({"step": sim.step_id, "name": name, "start_ns": st, "elapse_ns": dur,
                         "transit_ns": acc["transit"], "wait_ns": acc["wait"], "sync_ns": sync,
                         "hccs_bytes": acc["hccs_b"], "hccs_ns": acc["hccs_ns"], "hccs_dist": dist, "links": links})
    return dur
