"""Trace plumbing for the generator: timestamp strings, chunked segment files, the incremental Overlap Analysis
computation, metadata events and the final assembly of trace_view.json in torch_npu's event order."""
import gzip
import json
import shutil
from collections import deque

OV_NAMES = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")


def ts_str(ns):
    """Integer epoch ns -> torch_npu's exact epoch-us string with 3 decimals (ns must have >= 4 digits)."""
    s = str(ns)
    return s[:-3] + "." + s[-3:]


class Segment:
    """A run of event strings, written to its own file as ', '-joined chunks."""

    def __init__(self, path):
        self.path = path
        self.fh = open(path, "w", encoding="utf-8", newline="")
        self.buf = []
        self.count = 0

    def flush(self):
        if self.buf:
            if self.count:
                self.fh.write(", ")
            self.fh.write(", ".join(self.buf))
            self.count += len(self.buf)
            self.buf.clear()

    def close(self):
        self.flush()
        self.fh.close()


class OverlapSweep:
    """Incremental Overlap Analysis (FORMATS.md 6.1).

    ``src[i]`` collects the (start, end) intervals of source ``i`` (one per stream) in increasing, non-overlapping
    order; sources listed in ``comm_sources`` are communication, the others compute. Free spans the gaps between
    the first and the last busy (compute or communication) interval, as in the real samples (msprof does not
    stretch it to place-holder tasks). ``flush(horizon)`` finalizes everything before a cut that lies in a gap of
    compute U comm and before ``horizon`` (no later interval may start before it), so the chunked result equals the
    whole-run one, and each interval is handled about once.
    ``emit(kind, start, end)`` receives kind 0 Computing, 1 Communication, 2 Communication(Not Overlapped), 3 Free.
    """

    def __init__(self, emit, nsources, comm_sources):
        self.emit = emit
        self.src = [deque() for _ in range(nsources)]
        self.is_comm = [i in comm_sources for i in range(nsources)]
        self.first = self.last = None
        self.busy_end = None

    def note(self, start, end):
        if self.first is None or start < self.first:
            self.first = start
        if self.last is None or end > self.last:
            self.last = end

    @staticmethod
    def merge(ivs):
        ivs.sort()
        res = []
        for s, e in ivs:
            if res and s <= res[-1][1]:
                if e > res[-1][1]:
                    res[-1][1] = e
            else:
                res.append([s, e])
        return res

    @staticmethod
    def subtract(a, b):
        res, j, nb = [], 0, len(b)
        for s, e in a:
            cur = s
            while j < nb and b[j][1] <= cur:
                j += 1
            k = j
            while k < nb and b[k][0] < e and cur < e:
                bs, be = b[k]
                if bs > cur:
                    res.append((cur, bs))
                if be > cur:
                    cur = be
                k += 1
            if cur < e:
                res.append((cur, e))
        return res

    def flush(self, horizon, final=False):
        cands = []
        for dq in self.src:
            c = []
            while dq and (final or dq[0][0] < horizon):
                c.append(dq.popleft())
            cands.append(c)
        busy = self.merge([iv for c in cands for iv in c])
        if not final:
            k = 0
            while k < len(busy) and busy[k][1] < horizon:
                k += 1
            busy = busy[:k]
        cut = busy[-1][1] if busy else None
        comp, comm = [], []
        for i, c in enumerate(cands):
            n = 0
            while n < len(c) and cut is not None and c[n][1] <= cut:
                n += 1
            (comm if self.is_comm[i] else comp).extend(c[:n])
            if n < len(c):                      # part of a busy segment that crosses the horizon: keep
                self.src[i].extendleft(reversed(c[n:]))
        if busy:
            emit = self.emit
            cu, mu = self.merge(comp), self.merge(comm)
            for s, e in cu:
                emit(0, s, e)
            for s, e in mu:
                emit(1, s, e)
            for s, e in self.subtract(mu, cu):
                emit(2, s, e)
            prev = self.busy_end if self.busy_end is not None else busy[0][0]
            for s, e in busy:
                if s > prev:
                    emit(3, prev, s)
                prev = e
            self.busy_end = prev


def python_meta(pid, tid_main, tid_bwd, tid_deq):
    ev = [f'{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, "args": {{"name": "Python"}}}}',
          f'{{"ph": "M", "name": "process_labels", "pid": {pid}, "tid": 0, "args": {{"labels": "CPU"}}}}',
          f'{{"ph": "M", "name": "process_sort_index", "pid": {pid}, "tid": 0, "args": {{"sort_index": 0}}}}']
    for tid in (tid_main, tid_bwd, tid_deq):
        # torch_npu puts the task-queue (dequeue) thread last: sort index max(tid) + 1
        sort = tid if tid != tid_deq else max(tid_main, tid_bwd) + 1
        ev.append(f'{{"ph": "M", "name": "thread_name", "pid": {pid}, "tid": {tid}, '
                  f'"args": {{"name": "Thread {tid}"}}}}')
        ev.append(f'{{"ph": "M", "name": "thread_sort_index", "pid": {pid}, "tid": {tid}, '
                  f'"args": {{"sort_index": {sort}}}}}')
    return ev


def _m(name, pid, tid, key, val):
    return f'{{"name": "{name}", "pid": {pid}, "tid": {tid}, "args": {{"{key}": {json.dumps(val)}}}, "ph": "M"}}'


def cann_process_meta(pid, pname, label, sort, threads=(), grouped=False, thread_sort=True):
    """Metadata of one CANN-written lane, in msprof's key order. ``grouped`` lists all thread names first."""
    ev = [_m("process_name", pid, 0, "name", pname)]
    if grouped:
        ev += [_m("thread_name", pid, tid, "name", tname) for tid, tname in threads]
        ev += [_m("thread_sort_index", pid, tid, "sort_index", tid) for tid, _ in threads]
    else:
        for tid, tname in threads:
            ev.append(_m("thread_name", pid, tid, "name", tname))
            if thread_sort:
                ev.append(_m("thread_sort_index", pid, tid, "sort_index", tid))
    return ev + [_m("process_labels", pid, 0, "labels", label), _m("process_sort_index", pid, 0, "sort_index", sort)]


def assemble(path, fmt, framework_parts, cann_parts):
    """Write the trace: framework parts as "[a, b, ..." then the CANN parts appended as ",x, y, ...]" (torch_npu
    appends its CANN timeline to the unterminated framework array). Parts are Segments or lists of strings."""
    fh = gzip.open(path, "wt", encoding="utf-8", compresslevel=3) if fmt == "gz" \
        else open(path, "w", encoding="utf-8", newline="")
    with fh:
        fh.write('{"traceEvents": [' if fmt == "object" else "[")

        def write(parts):
            first = True
            for p in parts:
                if not (p if isinstance(p, list) else p.count):
                    continue
                if not first:
                    fh.write(", ")
                first = False
                if isinstance(p, list):
                    fh.write(", ".join(p))
                else:
                    with open(p.path, encoding="utf-8", newline="") as src:
                        shutil.copyfileobj(src, fh, 1 << 20)

        write(framework_parts)
        fh.write(",")
        write(cann_parts)
        fh.write("]" if fmt != "object" else '], "displayTimeUnit": "ns"}')
