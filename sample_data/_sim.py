"""Streaming simulation of one rank: host threads, task queue, CANN APIs, NPU streams and HCCL.

All times are integer epoch ns. The host side walks compiled op trees (``CNode``); every launching leaf records an
Enqueue, the task-queue thread dequeues it and calls AscendCL/Runtime, and the device places the tasks on its
streams. Events are rendered straight to JSON text from pre-built fragments into ``Segment`` files; CSV rows are
rendered to text as well (byte-identical to csv.writer). ``_flush`` runs every ``CHUNK`` launches.
"""
import os
import random
import shutil

from . import _catalog as cat
from . import _csvs as out
from ._compile import NA, TemplateCompiler, Thread
from ._finish import finish_rank
from ._hccl import run_collective
from ._memory import MemoryModel
from ._trace import OV_NAMES, OverlapSweep, Segment, ts_str

FIRST_STEP = 10
LAT_LO, LAT_SPAN = 3000, 5000          # runtime launch -> task start latency, ns
CHUNK = 256                            # launches between flushes
COUNTER_NS = 100_000                   # counter sampling period
PY_OUTER_GAP_NS = 1_500                # a step's outer python_function frames start 1.5 µs apart
PY_INNER_GAP_NS = 40                   # an op's frames 40 ns apart (ops on the main thread are >= 1 µs apart)
APP_EVERY = 200                        # one APP memory row / module-mem sample every 200 counter samples (20 ms)
#                                        by default (generate_run's memory_every_ms)
_r = random.Random(7).random
METRICS_NA = ",".join([NA] * out.N_METRICS)
RATIOS = [(f"{a},{round(_r() * 0.5, 3)},{round(_r(), 3)}", round(a * 100, 3))       # pipe ratios, cube util
          for a in (round(_r(), 3) for _ in range(64))]


class RankSim(TemplateCompiler):
    def __init__(self, rank, cfg, plan, rank_dir, group):
        self.rank, self.cfg, self.plan, self.group = rank, cfg, plan, group
        # another collection of the same script: the same model, other timings
        collection = f"-{cfg['collection']}" if cfg.get("collection") else ""
        self.rnd = random.Random(f"{cfg['seed']}-timing-{rank}{collection}").random
        self.dir = os.path.join(rank_dir, "ASCEND_PROFILER_OUTPUT")
        if os.path.isdir(self.dir):          # like torch_npu: the output folder is recreated on every parse
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        self.pid = pid = 3000000 + rank
        self.dev = dev = rank % 8
        self.tid_main, self.tid_deq, self.tid_bwd = pid, pid + 3198, pid + 8571
        self.cann_pid, self.hw_pid, self.freq_pid, self.hccl_pid, self.mem_pid, self.ov_pid = (
            (pid << 10) | (sort << 5) | dev for sort in (7, 13, 14, 15, 19, 23))
        self.cann, self.hccl, self.overlap = cfg["cann_lane"], cfg["hccl"], cfg["overlap_lane"]
        self.py_stack = bool(cfg.get("python_stack"))
        self.py_id = 0
        every_ms = cfg.get("memory_every_ms")
        self.app_every = max(1, round(every_ms * 1e6 / COUNTER_NS)) if every_ms else APP_EVERY
        self.nstreams = n = max(1, int(cfg["streams"]))
        self.mod = n + 1                     # task starts on stream index i are = i (mod n+1): unique async ids
        self.sids = [2 + i for i in range(n + 1)]          # compute streams, then the HCCL stream
        self.sfree = [0] * (n + 1)
        self.task_ids = [11000 + 37 * i for i in range(n + 1)]
        self.sec_rr = 0
        self.main, self.bwd = Thread(pid, self.tid_main), Thread(pid, self.tid_bwd)
        self.tag = 100 + cfg["seed"] % 900
        self.kcache, self.kstats, self.apistats = {}, {}, {}
        self.stream_frags = [(f'", "cat": "HostToDevice", "pid": {self.hw_pid}, "tid": {sid}, "bp": "e"}}',
                              f', "pid": {self.hw_pid}, "tid": {sid}, "ts": "') for sid in self.sids]
        self._compile_all()
        self.t = cfg["t0"] + rank * 1_000_003 + int(self.rnd() * 500_000)
        self.corr, self.cid, self.seq_base = 8000, 900, 1300
        self.deq_free = self.comm_index = self.launches = self.flushed_at = 0
        self.fwd_src_ts = {}
        self.step_id = self.cur_dev_start = self._comm_arg = None
        self.step_ranges, self.step_stats, self.comm_ops = [], {}, []
        self.nE = {"X": 0, "C": 0, "s": 0, "f": 0}
        self.min_x, self.max_x_end = None, 0
        self.next_ctr, self.ctr_n, self.app_rows, self.freq = None, 0, [], 1800
        self.tmp = lambda name: os.path.join(self.dir, f".gen_{name}.tmp")
        # trace segments, concatenated in this order: A cpu_op slices, B Enqueue + s, C Dequeue + f, D fwdbwd,
        # E the CANN timeline (sorted by ts within each flush), F async_npu s/f pairs
        self.segA, self.segB, self.segC, self.segD, self.segE, self.segF = (Segment(self.tmp(c)) for c in "ABCDEF")
        self.cann_chunk, self.op_rows, self.krows, self.l2rows = [], [], [], []
        self.kd_prev_end = None
        j = os.path.join
        self.kernel_csv = out.CsvOut(j(self.dir, "kernel_details.csv"), out.KERNEL_HEADER)
        self.opdet_csv = out.CsvOut(j(self.dir, "operator_details.csv"), out.OPERATOR_DETAILS_HEADER)
        self.l2_csv = out.CsvOut(j(self.dir, "l2_cache.csv"), out.L2_CACHE_HEADER)
        self.opmem_csv = out.CsvOut(j(self.dir, "operator_memory.csv"), out.OPERATOR_MEMORY_HEADER)
        self.memtmp_fh = open(self.tmp("mem"), "w", newline="", encoding="utf-8")
        self.mem = MemoryModel(dev, 897357296 + 4096 * rank, self.memtmp_fh, self.opmem_csv)
        self.ov = OverlapSweep(self._ov_emit if self.overlap else (lambda *a: None), n + 1, {n})

    # ------------------------------------------------------------------ host side
    def _node(self, n, t, seq):
        rnd = self.rnd
        start = t
        if n.fwd_src:
            self.fwd_src_ts[seq] = start
        elif n.bwd_dst:
            src = self.fwd_src_ts.pop(seq, None)
            if src is not None:
                D = self.segD.buf
                D.append(f'{{"ph": "s", "bp": "e", "name": "fwdbwd", "id": {seq}{self.main.at}{ts_str(src)}", '
                         f'"cat": "fwdbwd"}}')
                D.append(f'{{"ph": "f", "bp": "e", "name": "fwdbwd", "id": {seq}{n.th.at}{ts_str(start)}", '
                         f'"cat": "fwdbwd"}}')
        t += n.pre_lo + int(n.pre_span * rnd())
        rows = self.op_rows
        idx = len(rows)
        rows.append(None)
        kid_host = dev = aic = 0
        for k in n.kids:
            ks = t
            t, kd, ka = self._node(k, t, seq)
            kid_host += t - ks
            dev += kd
            aic += ka
            t += 1000 + int(5000 * rnd())
        sdev = saic = 0
        if n.launch is not None:
            t, sdev, saic = self._launch(n, start, t)
        elif n.sync:
            t = self._sync(t)
        t += n.post_lo + int(n.post_span * rnd())
        dur = t - start
        ds = str(dur / 1000)
        s = str(start)
        self.segA.buf.append(f'{n.head}{s[:-3]}.{s[-3:]}", "dur": {ds}, "cat": "cpu_op", '
                             f'"args": {{"Sequence number": {seq if n.seq_mode else -1}{n.tail}')
        dev += sdev
        aic += saic
        host = f"{n.csv_prefix}{(dur - kid_host) / 1000 if kid_host else ds},{ds},"
        if dev:
            rows[idx] = f"{host}{sdev / 1000},{dev / 1000},{saic / 1000},{aic / 1000}\r\n"
        else:
            rows[idx] = host + "0.0,0.0,0.0,0.0\r\n"
        return t, dev, aic

    def _cann_x(self, frag, start, dur, cid):
        head, mid, st = frag
        s = str(start)
        d_us = dur / 1000
        self.cann_chunk.append((start, f'{head}{s[:-3]}.{s[-3:]}", "dur": {d_us}{mid}{cid}}}, "ph": "X"}}'))
        self.nE["X"] += 1
        st[0] += 1
        st[1] += dur
        if dur < st[2]:
            st[2] = dur
        if dur > st[3]:
            st[3] = dur
        st[4] += d_us * d_us

    def _htod_s(self, cid, ts):
        self.cann_chunk.append((ts, f'{{"name": "HostToDevice{cid}", "ph": "s", "cat": "HostToDevice", "id": "{cid}", '
                                    f'"pid": {self.cann_pid}, "tid": {self.tid_deq}, "ts": "{ts_str(ts)}"}}'))
        self.nE["s"] += 1

    def _launch(self, n, op_start, t):
        """Enqueue at ``t`` inside leaf op ``n``; dequeue, CANN calls and device tasks. Returns (host time after
        the Enqueue, device ns of the linked tasks, AI_CORE part of it)."""
        rnd = self.rnd
        L, th = n.launch, n.th
        corr = self.corr
        self.corr = corr + 1
        enq_dur = 2000 + int(8000 * rnd())
        ts = ts_str(t)
        B = self.segB.buf
        B.append(f'{th.enq}{ts}", "dur": {enq_dur / 1000}, "cat": "enqueue", "args": {{"correlation_id": {corr}}}}}')
        B.append(f'{th.enq_s}{corr}{th.at}{ts}", "cat": "async_task_queue"}}')
        if L.hccl is None and rnd() < 0.4:
            free_t = None if rnd() < 0.03 else t + 50_000 + int(rnd() ** 2 * 20_000_000)
            self.mem.alloc_pta(t - 1, n.mem_name, 512 * (1 + int(2 ** (rnd() * 16))), free_t)
        dq = t + enq_dur + 1500 + int(6000 * rnd())
        if dq < self.deq_free:
            dq = self.deq_free
        acl_s = dq + 800 + int(1700 * rnd())
        rt_s = acl_s + 600 + int(2400 * rnd())
        rt_d = 1500 + int(4500 * rnd())
        acl_e = rt_s + rt_d + 300 + int(2200 * rnd())
        cid = self.cid
        self.cid = cid + 2
        op_ts = ts_str(op_start)
        sdev = saic = 0
        sec_end = None
        if L.hccl is not None:
            sdev = self._comm(L.hccl, rt_s, cid + 1, op_ts, th)
        else:
            for k in L.kernels:
                si = 0
                if k.secondary and L.secondary:
                    si = 1 + self.sec_rr % (self.nstreams - 1)
                    self.sec_rr += 1
                st, d = self._task(k, si, rt_s, cid + 1, op_ts, th)
                if si:
                    sec_end = st + d
                sdev += d
                if k.aicore:
                    saic += d
        if self.cann:
            self._cann_x(L.acl, acl_s, acl_e - acl_s, cid)
            self._cann_x(L.rt, rt_s, rt_d, cid + 1)
            self._htod_s(cid + 1, rt_s)
        if sec_end is not None:
            # the main stream waits for the secondary one: aclrtStreamWaitEvent -> EVENT_WAIT_SQE task
            a2 = acl_e + 300 + int(700 * rnd())
            r2 = a2 + 500 + int(1000 * rnd())
            r2d = 800 + int(1500 * rnd())
            a2e = r2 + r2d + 300 + int(800 * rnd())
            cid2 = self.cid
            self.cid = cid2 + 2
            st, d = self._task(self._kernel("EVENT_WAIT", 0), 0, r2, cid2 + 1, op_ts, th, 0 if rnd() < 0.5 else 20)
            sdev += d
            self.sfree[0] = max(self.sfree[0], sec_end)
            if self.cann:
                self._cann_x(self.wait_frags[0], a2, a2e - a2, cid2)
                self._cann_x(self.wait_frags[1], r2, r2d, cid2 + 1)
                self._htod_s(cid2 + 1, r2)
            acl_e = a2e
        if L.kernels and rnd() < 0.03:
            self.mem.alloc_ge(dq + 300, "cann::" + L.kernels[-1].kname, 1024 * (8 + int(rnd() * 50000)),
                              dq + 30_300 + int(rnd() * 120_000))
        dq_e = acl_e + 300 + int(1200 * rnd())
        self.deq_free = dq_e + 200 + int(1300 * rnd())
        dts = ts_str(dq)
        C = self.segC.buf
        C.append(f'{L.deq}{dts}", "dur": {(dq_e - dq) / 1000}, "cat": "dequeue", '
                 f'"args": {{"correlation_id": {corr}}}}}')
        C.append(f'{{"ph": "f", "bp": "e", "name": "enqueue_to_dequeue", "id": {corr}, "pid": {self.pid}, '
                 f'"tid": {self.tid_deq}, "ts": "{dts}", "cat": "async_task_queue"}}')
        self.launches += 1
        return t + enq_dur + 1000 + int(3000 * rnd()), sdev, saic

    def _sync(self, t):
        """aten::_local_scalar_dense: the host waits until every stream and the task queue are idle."""
        rnd = self.rnd
        s = t + 1000 + int(2000 * rnd())
        done = max(max(self.sfree), self.deq_free, s + 5000) + 2000 + int(6000 * rnd())
        if self.cann:
            cid = self.cid
            self.cid = cid + 2
            self._cann_x(self.sync_frags[0], s, done - s, cid)
            self._cann_x(self.sync_frags[1], s + 500, done - s - 1000, cid + 1)
        return done + 1000 + int(2000 * rnd())

    # ------------------------------------------------------------------ device side
    def _place(self, si, rt_s, gap_lo, gap_span):
        """Start time of the next task on stream index ``si`` for a launch at ``rt_s``."""
        rnd = self.rnd
        st = rt_s + LAT_LO + int(LAT_SPAN * rnd())
        g = self.sfree[si] + gap_lo + int(gap_span * rnd())
        return g if g > st else st

    def _task(self, k, si, rt_s, cid, op_ts, th, fixed_dur=None):
        """One device task of kernel ``k`` on compute stream index ``si``: trace events, flows, CSV rows."""
        rnd = self.rnd
        free = self.sfree[si]
        st = rt_s + LAT_LO + int(LAT_SPAN * rnd())
        g = free + 200 + int(1300 * rnd())
        if g > st:
            st = g
        st += (si - st) % self.mod
        d = k.lo + int(k.span * rnd()) if fixed_dur is None else fixed_dur
        end = self.sfree[si] = st + d
        task_id = self.task_ids[si]
        self.task_ids[si] = task_id + 1
        s = str(st)
        tss = s[:-3] + "." + s[-3:]
        frag = k.frags.get(si) or self._kernel_frags(k, si)
        E = self.cann_chunk
        E.append((st, f'{frag[0]}{tss}", "dur": {d / 1000}{frag[1]}{task_id}{frag[2]}{cid}}}, "ph": "X"}}'))
        nE = self.nE
        nE["X"] += 1
        sf = self.stream_frags[si]
        if self.cann:
            E.append((st, f'{{"name": "HostToDevice{cid}", "ph": "f", "id": "{cid}", "ts": "{tss}{sf[0]}'))
            nE["f"] += 1
        F = self.segF.buf
        F.append(f'{{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": {st}{th.at}{op_ts}", "cat": "async_npu"}}')
        F.append(f'{{"ph": "f", "bp": "e", "name": "torch_to_npu", "id": {st}{sf[1]}{tss}", "cat": "async_npu"}}')
        ov = self.ov
        if ov.first is None or st < ov.first:
            ov.first = st
        if ov.last is None or end > ov.last:
            ov.last = end
        if self.cur_dev_start is None:
            self.cur_dev_start = st
        if k.compute:
            ov.src[si].append((st, end))
        if k.in_kd:
            du = d / 1000
            mk = k.metrics_kind
            if mk == 0:
                met = METRICS_NA
            else:
                ratios, cube = RATIOS[int(rnd() * len(RATIOS))]
                c = f"{round(du * 0.97, 3)},{int(du * 1746 * k.block)},{ratios}" if mk != 2 else "0.0,0,0,0,0"
                v = f"{round(du * 0.95, 3)},{int(du * 1710 * k.block)},{ratios}" if mk != 1 else "0.0,0,0,0,0"
                met = f"{c},{v},{cube if mk != 2 else 0}"
            self.krows.append((st, st + d, f"{self.step_id},4294967295,{task_id},{frag[3]},{tss}\t,{du},",
                               f",{k.csv_b},{met}\r\n"))
            ks = k.stats
            ks[0] += 1
            ks[1] += d
            if d < ks[2]:
                ks[2] = d
            if d > ks[3]:
                ks[3] = d
            if k.l2:
                hit = NA if rnd() < 0.6 else round(rnd(), 6)
                self.l2rows.append(f"{frag[4]}{task_id},{hit},{round(rnd() * 0.3, 6)},{k.kname}\r\n")
        return st, d

    def _note_task(self, st, end):
        self.ov.note(st, end)
        if self.cur_dev_start is None:
            self.cur_dev_start = st

    def _comm(self, kind, rt_s, cid, op_ts, th):
        return run_collective(self, kind, rt_s, cid, op_ts, th)

    # ------------------------------------------------------------------ overlap lane, steps, flushing
    def _ov_emit(self, kind, s, e):
        d = e - s
        name = OV_NAMES[kind]
        self.cann_chunk.append((s, f'{{"name": "{name}", "pid": {self.ov_pid}, "tid": {kind}, "ts": "{ts_str(s)}", '
                                   f'"dur": {d / 1000}, "ph": "X"}}'))
        self.nE["X"] += 1
        sid = self._step_of(s)
        if sid is None:
            return
        st = self.step_stats.get(sid)
        if st is None:
            st = self.step_stats[sid] = dict.fromkeys(OV_NAMES, 0)
            st.update(e2e_start=s, e2e_end=e, first_task=None)
        st[name] += d
        st["e2e_start"] = min(st["e2e_start"], s)
        st["e2e_end"] = max(st["e2e_end"], e)
        if kind < 2 and (st["first_task"] is None or s < st["first_task"]):
            st["first_task"] = s

    def _step_of(self, ts):
        """torch_npu's step assignment: the step whose [device start, end) holds ``ts``."""
        if self.step_id is not None and self.cur_dev_start is not None and ts >= self.cur_dev_start:
            return self.step_id
        for sid, dstart, end, _ in reversed(self.step_ranges):
            if dstart <= ts < end:
                return sid
        return None

    def _comm_node(self, c, t):
        self._comm_arg = c
        return self._node(self.comm_nodes[c[0]], t, -1)[0] + 2000 + int(8000 * self.rnd())

    def _maybe_flush(self, t):
        if self.launches - self.flushed_at >= CHUNK:
            self._flush(t)

    def step(self, index):
        rnd, plan = self.rnd, self.plan
        sid = FIRST_STEP + index
        self.step_id, self.cur_dev_start = sid, None
        ps = self.t
        if self.next_ctr is None:
            self.next_ctr = ps - 40_000
        t = self._py_node(self.dataloader, ps + 5000 + int(20000 * rnd()), -1, cat.DATALOADER_STACK)
        t += 2000 + int(8000 * rnd())
        for i, (key, v) in enumerate(plan.fwd):
            stack = cat.call_stack(cat.FORWARD[key][1], v) if self.py_stack else None
            t = self._py_node(self.fwd_nodes[key, v], t, self.seq_base + i, stack) + 1000 + int(8000 * rnd())
            self._maybe_flush(t)
        tb = t + 20000 + int(60000 * rnd())
        for c in plan.comm_after.get(-1, ()):
            tb = self._comm_node(c, tb)
        for pos, fi in enumerate(plan.bwd):
            key, v = plan.fwd[fi]
            tb = self._node(self.bwd_nodes[key, v], tb, self.seq_base + fi)[0] + 2000 + int(10000 * rnd())
            for c in plan.comm_after.get(pos, ()):
                tb = self._comm_node(c, tb)
            self._maybe_flush(tb)
        t = tb + 20000 + int(60000 * rnd())
        # the optimizer needs the reduced gradients: its kernels wait for the HCCL stream
        self.sfree[0] = max(self.sfree[0], self.sfree[-1])
        for _ in range(plan.n_opt):
            t = self._py_node(self.optimizer, t, -1, cat.OPTIMIZER_STACK) + 3000 + int(10000 * rnd())
        t = self._node(self.step_end, t, -1)[0]
        end = t + 3000 + int(10000 * rnd())
        self.segA.buf.append(f'{self.ps_head}{sid}{self.ps_mid}{ts_str(ps)}", "dur": {(end - ps) / 1000}, '
                             f'"cat": "cpu_op", "args": {{"Sequence number": -1, "Fwd thread id": 0}}}}')
        lo, hi = self._py_frames(cat.PY_OUTER_FRAMES, ps, end, PY_OUTER_GAP_NS) if self.py_stack else (ps, end)
        self.seq_base += len(plan.fwd)
        self.step_ranges.append((sid, self.cur_dev_start if self.cur_dev_start is not None else ps, end, ps))
        self.step_id = self.cur_dev_start = None
        if self.min_x is None:
            self.min_x = lo
        self.max_x_end = hi
        self._flush(end, horizon=end)
        self.t = end + 50_000 + int(250_000 * rnd())

    def _py_node(self, node, t, seq, stack):
        """Run a top-level main-thread op from ``t``, inside its call stack's python_function frames when
        ``python_stack``; return its end."""
        end = self._node(node, t, seq)[0]
        if self.py_stack:
            self._py_frames(cat.py_frames(stack), t, end, PY_INNER_GAP_NS)
        return end

    def _py_frames(self, frames, start, end, gap):
        """python_function slices (outermost first) enclosing [start, end], each ``gap`` ns wider than the next;
        returns the outermost one's range."""
        n = len(frames)
        parent = None
        for j, name in enumerate(frames):
            s, e = start - (n - j) * gap, end + (n - j) * gap
            self.py_id += 1
            up = f', "Python parent id": {parent}' if parent is not None else ""
            self.cann_chunk.append((s, f'{{"ph": "X", "name": "{name}", "pid": {self.pid}, "tid": {self.tid_main}, '
                                       f'"ts": "{ts_str(s)}", "dur": {(e - s) / 1000}, "cat": "python_function", '
                                       f'"args": {{"Python id": {self.py_id}{up}}}}}'))
            parent = self.py_id
            self.nE["X"] += 1
        return (start - n * gap, end + n * gap) if n else (start, end)

    def _counters(self, upto):
        rnd, E = self.rnd, self.cann_chunk
        while self.next_ctr is not None and self.next_ctr < upto:
            t = self.next_ctr
            ts = ts_str(t)
            if self.ctr_n % 50 == 0:
                self.freq = 1800 if rnd() < 0.8 else 1650
            kb = float(2_100_000 + self.mem.reserved_bytes // 16384)
            E.append((t, f'{{"name": "AI Core Freq", "ts": "{ts}", "pid": {self.freq_pid}, "tid": 0, '
                         f'"args": {{"MHz": {self.freq}}}, "ph": "C"}}'))
            E.append((t, f'{{"name": "APP/HBM", "ts": "{ts}", "pid": {self.mem_pid}, "tid": 0, '
                         f'"args": {{"KB": {kb}}}, "ph": "C"}}'))
            self.nE["C"] += 2
            if self.ctr_n % self.app_every == 0:
                self.app_rows.append(["APP", ts + "\t", "", kb / 1024, "", "", f"NPU:{self.dev}"])
            self.ctr_n += 1
            self.next_ctr = t + COUNTER_NS

    def _flush(self, host_t, horizon=None, final=False):
        """Write out everything that is final. Only called between top-level ops (no open op rows)."""
        self.flushed_at = self.launches
        self._counters(host_t)
        if horizon is None:
            # no future task can start before this: every stream is busy until then or nothing is launched yet
            horizon = max(min(self.sfree), self.deq_free + LAT_LO)
        self.ov.flush(horizon, final)
        self.mem.flush(None if final else min(host_t, self.deq_free), run_end=host_t if final else None)
        ch = self.cann_chunk
        if ch:
            ch.sort(key=lambda e: e[0])
            self.segE.buf.extend([e[1] for e in ch])
            ch.clear()
        for seg in (self.segA, self.segB, self.segC, self.segD, self.segE, self.segF):
            seg.flush()
        if self.krows:
            self.krows.sort(key=lambda r: r[0])
            # Wait Time(us): the start minus the end of the previous row in start order, over all streams
            # (FORMATS.md 4.1); rows are final only up to the horizon, so later ones wait for the next flush
            cut = len(self.krows) if final else sum(1 for r in self.krows if r[0] < horizon)
            lines, prev = [], self.kd_prev_end
            for st, end, head, tail in self.krows[:cut]:
                lines.append(f"{head}{max(0, st - prev) / 1000 if prev is not None else 0}{tail}")
                prev = end
            self.kd_prev_end = prev
            self.kernel_csv.write_lines(lines)
            del self.krows[:cut]
        for rows, dst in ((self.l2rows, self.l2_csv), (self.op_rows, self.opdet_csv)):
            if rows:
                dst.write_lines(rows)
                rows.clear()

    # ------------------------------------------------------------------ finish
    def finish(self):
        """Final flush, trace assembly, aggregated CSV/JSON files; returns the rank's ground truth."""
        return finish_rank(self)
