"""Small constructed runs whose late rank, critical path and what-if answers are known by construction.

``write_wait_run(out_dir, ranks=4, late_rank=2, extra_us=300, steps=1, cann=True, wait_tasks=True, big_us=0,
late_kernel="MatMul", others_extra_us=0) -> dict`` writes one ``rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/
trace_view.json`` per rank (no Overlap Analysis lane: ingest derives it). Every rank runs, in each step ``k`` (times
in µs from the step's start ``k * STEP_US``):

* host (Python main thread): ``ProfilerStep#<k+1>`` from 0 to the end; torch ops ``aten::mm`` [10, 20],
  ``aten::add`` [20, 24], ``HcclAllreduce`` [24, 28], ``aten::mul`` [28, 32], each with an ``async_npu`` flow to
  what it launched; with ``cann``: the CANN calls ``aclnnMm`` [12, 18], ``aclnnAdd`` [21, 23], ``HcclAllreduce``
  [25, 27], ``aclnnMul`` [29, 31] (``HostToDevice`` flows) and ``aclrtSynchronizeStream`` from 40 until 3 µs
  after the last kernel ends; the step ends 2 µs after the synchronize; with ``big_us``, also ``aten::_softmax``
  [4, 9] (``aclnnSoftmax`` [5, 8]);
* stream 2 (compute): with ``big_us``, ``SoftmaxV2`` [30, 30 + big_us] on every rank alike; ``MatMul`` (mm = 100),
  ``Add`` (50), an ``EVENT_WAIT`` until the collective ends, ``Mul`` (80) 5 µs after it. The late rank's
  ``late_kernel`` (MatMul or Add) lasts ``extra_us`` longer; every other rank's other kernel of the two lasts
  ``others_extra_us`` longer (so the late rank leads by ``extra_us − others_extra_us``);
* stream 3 (communication): an ``EVENT_WAIT`` from 30 until ``Add`` ends, then the collective's tasks;
* ``Group 0 Communication``: ``hcom_allReduce__123_<k>_1`` starting 10 µs after ``Add`` ends (the rank's
  arrival) and ending ``TRANSFER_US`` after the last rank's arrival (a ``Notify Wait`` until then, then ``SDMA``).
* ``wait_tasks=False`` leaves out the ``EVENT_WAIT`` and ``Notify Wait`` tasks (a trimmed trace, or a producer
  that does not export them): only the launch order shows that the collective waited for ``Add`` and ``Mul`` for
  the collective.

By default every rank but the late one arrives at 190 µs, the late one at 190 + ``extra_us``; each other rank waits
``extra_us``; every step lasts 480 + ``extra_us`` µs on every rank. The returned truth holds these numbers and the
what-if answers (MatMul of the late rank sped up by 2, 4, 8; its ``late_kernel`` by 1000).

``fill_synthetic_collectives(con, ranks, steps)`` fills a ``cluster_collectives`` table of any size by SQL, whose
late ranks are :func:`synthetic_late_rank` (for the 1,000-rank tests and ``ascendscope bench insights``).
"""

from __future__ import annotations

import json
from pathlib import Path

T0_US = 1_736_408_883_000_000
STEP_US = 5_000
BASE_MM_US = 100
ADD_US, MUL_US, TRANSFER_US = 50, 80, 200
GROUP = "0"
PY_TID = 4242


def _pids(rank: int) -> dict[str, int]:
    pid = 4000 + rank
    return {"py": pid, "cann": (pid << 10) | (7 << 5), "hw": (pid << 10) | (13 << 5), "hccl": (pid << 10) | (15 << 5)}


def _ts(us: float) -> str:
    ns = round(us * 1000)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(name, pid, tid, start_us, dur_us, cat=None, **args) -> dict:
    e = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": _ts(T0_US + start_us), "dur": dur_us, "args": args}
    if cat:
        e["cat"] = cat
    return e


def _flow(cat, fid, src, dst) -> list[dict]:
    """s at the source slice's start, f at the destination's (pid, tid, ts)."""
    return [{"ph": "s", "bp": "e", "name": cat, "cat": cat, "id": fid, "pid": src["pid"], "tid": src["tid"],
             "ts": src["ts"]},
            {"ph": "f", "bp": "e", "name": cat, "cat": cat, "id": fid, "pid": dst["pid"], "tid": dst["tid"],
             "ts": dst["ts"]}]


def _meta(p: dict[str, int], cann: bool) -> list[dict]:
    def m(pid, name, tid=None, thread=None):
        out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
        if thread is not None:
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
        return out

    events = m(p["py"], "Python", PY_TID, f"Thread {PY_TID}")
    if cann:
        events += m(p["cann"], "CANN", PY_TID, f"Thread {PY_TID}")
    events += m(p["hw"], "Ascend Hardware", 2, "Stream 2")
    events.append({"ph": "M", "name": "thread_name", "pid": p["hw"], "tid": 3, "args": {"name": "Stream 3"}})
    events += m(p["hccl"], "HCCL", 0, f"Group {GROUP} Communication")
    return events


def _step(rank: int, k: int, dur: dict[str, int], arrivals: list[float], cann: bool, wait_tasks: bool,
          big_us: int) -> list[dict]:
    p = _pids(rank)
    base = k * STEP_US
    last = max(arrivals)
    mm_start = 30 + big_us
    mm_end = mm_start + dur["MatMul"]
    add_end = mm_end + dur["Add"]
    arrive = add_end + 10
    coll_end = last + TRANSFER_US
    mul_start = coll_end + 5
    mul_end = mul_start + MUL_US
    sync_end = mul_end + 3
    step_end = sync_end + 2
    b = base
    ev = [_x(f"ProfilerStep#{k + 1}", p["py"], PY_TID, b + 0, step_end, "cpu_op")]
    host_ops = (("aten::_softmax", 4, 9),) if big_us else ()
    host_ops += (("aten::mm", 10, 20), ("aten::add", 20, 24), ("HcclAllreduce", 24, 28), ("aten::mul", 28, 32))
    ops = {name: _x(name, p["py"], PY_TID, b + s, e - s, "cpu_op") for name, s, e in host_ops}
    ev += ops.values()
    dev = {
        "MatMul": _x("MatMul", p["hw"], 2, b + mm_start, dur["MatMul"], **{"Task Type": "AI_CORE"}),
        "Add": _x("Add", p["hw"], 2, b + mm_end, dur["Add"], **{"Task Type": "AI_VECTOR_CORE"}),
        "Mul": _x("Mul", p["hw"], 2, b + mul_start, MUL_US, **{"Task Type": "AI_VECTOR_CORE"}),
        "coll": _x(f"hcom_allReduce__123_{k}_1", p["hccl"], 0, b + arrive, coll_end - arrive, count=1024),
    }
    if big_us:
        dev["SoftmaxV2"] = _x("SoftmaxV2", p["hw"], 2, b + 30, big_us, **{"Task Type": "AI_VECTOR_CORE"})
    ev += dev.values()
    if wait_tasks:
        ev.append(_x("EVENT_WAIT", p["hw"], 2, b + add_end, coll_end - add_end, **{"Task Type": "EVENT_WAIT_SQE"}))
        ev.append(_x("EVENT_WAIT", p["hw"], 3, b + 30, add_end - 30, **{"Task Type": "EVENT_WAIT_SQE"}))
        ev.append(_x("Notify Wait", p["hw"], 3, b + arrive, last - arrive, **{"Task Type": "Notify Wait"}))
    ev.append(_x("SDMA", p["hw"], 3, b + last, TRANSFER_US, **{"Task Type": "SDMA"}))
    targets = (("aten::mm", "MatMul"), ("aten::add", "Add"), ("HcclAllreduce", "coll"), ("aten::mul", "Mul"))
    if big_us:
        targets = (("aten::_softmax", "SoftmaxV2"),) + targets
    for i, (op, d) in enumerate(targets):
        ev += _flow("async_npu", f"{rank}{k}{i}1", ops[op], dev[d])
    if cann:
        host_calls = (("aclnnSoftmax", 5, 8),) if big_us else ()
        host_calls += (("aclnnMm", 12, 18), ("aclnnAdd", 21, 23), ("HcclAllreduce", 25, 27), ("aclnnMul", 29, 31))
        calls = {name: _x(f"AscendCL@{name}", p["cann"], PY_TID, b + s, e - s) for name, s, e in host_calls}
        ev += calls.values()
        ev.append(_x("AscendCL@aclrtSynchronizeStream", p["cann"], PY_TID, b + 40, sync_end - 40))
        for i, (call, (_, d)) in enumerate(zip(calls, targets)):
            ev += _flow("HostToDevice", f"{rank}{k}{i}2", calls[call], dev[d])
    return ev


def write_wait_run(out_dir, *, ranks: int = 4, late_rank: int = 2, extra_us: int = 300, steps: int = 1,
                   cann: bool = True, wait_tasks: bool = True, big_us: int = 0, late_kernel: str = "MatMul",
                   others_extra_us: int = 0) -> dict:
    """Write the run (see the module note) and return its truth."""
    if not 0 <= late_rank < ranks or ranks < 2:
        raise ValueError("need two ranks or more and a late rank among them")
    if late_kernel not in ("MatMul", "Add") or not 0 <= others_extra_us < extra_us:
        raise ValueError("late_kernel is MatMul or Add, and the others' extra time is below the late rank's")
    other = "Add" if late_kernel == "MatMul" else "MatMul"
    base = {"MatMul": BASE_MM_US, "Add": ADD_US}
    durs = [{**base, late_kernel: base[late_kernel] + extra_us} if r == late_rank
            else {**base, other: base[other] + others_extra_us} for r in range(ranks)]
    mm = [d["MatMul"] for d in durs]
    arrivals = [30 + big_us + d["MatMul"] + d["Add"] + 10 for d in durs]
    out = Path(out_dir)
    for r in range(ranks):
        events = _meta(_pids(r), cann)
        for k in range(steps):
            events += _step(r, k, durs[r], arrivals, cann, wait_tasks, big_us)
        folder = out / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        folder.mkdir(parents=True, exist_ok=True)
        (folder.parent / f"profiler_info_{r}.json").write_text(json.dumps({"rank_id": r}), encoding="utf-8")
        (folder / "trace_view.json").write_text(json.dumps(events), encoding="utf-8")
    last, early = max(arrivals), min(arrivals)
    lead = last - sorted(arrivals)[-2]
    step_us = last + TRANSFER_US + 5 + MUL_US + 5
    late = durs[late_rank]
    sized = sorted((v, n) for n, v in {**late, **({"SoftmaxV2": big_us} if big_us else {})}.items())
    return {
        "ranks": ranks, "late_rank": late_rank, "steps": steps, "extra_us": extra_us, "t0_us": T0_US,
        "step_us": step_us, "arrival_us": arrivals, "wait_caused_us": extra_us * (ranks - 1), "lead_us": lead,
        "group": GROUP, "op_names": [f"hcom_allReduce__123_{k}_1" for k in range(steps)],
        # the late rank's window, from the step start to its arrival: its kernels computing, idle otherwise
        "late_computing_us": big_us + late["MatMul"] + late["Add"],
        # the kernel that made it late (its excess over any other rank) and the one with the most time
        "late_kernel": late_kernel, "late_kernel_excess_us": extra_us, "most_time_kernel": sized[-1][1],
        "most_time_kernel_us": sized[-1][0],
        # what-if on the late rank: MatMul sped up by a factor saves min(its saving, the late rank's lead)
        "whatif_late_us": {f: min(mm[late_rank] - mm[late_rank] / f, last - early) for f in (2, 4, 8)},
        # its late_kernel × 1000: the kernel's time less a thousandth of it, at most the lead (in ns)
        "whatif_1000_ns": min(late[late_kernel] * 1000 - late[late_kernel], lead * 1000),
    }


# --- a cluster_collectives table of any size -------------------------------------------------------------------
T0_NS = T0_US * 1000
BASE_ARRIVAL_NS = 1_000_000
STEP_NS = 10_000_000
LEAD_NS = 400_000  # the late rank of each instance arrives this much after the others

# group g holds the ranks r with r % 2 = g; at step s its one collective's late rank is (37 s + 101 g + 5) % ranks
# when that rank is in the group, else the group's first rank (g). Every rank's window starts 900 µs before its
# base arrival (base + (r % 7) µs); the late rank computes LEAD_NS longer and arrives LEAD_NS after its base
SYNTHETIC_SQL = f"""
INSERT INTO cluster_collectives
SELECT r, 'g' || g, 'hcom_allReduce__00' || g || '_' || s || '_1', 'hcom_allReduce_', 0, s, 'communication',
       NULL, NULL, base_ns + CASE WHEN late THEN {LEAD_NS} ELSE 0 END, base_ns + 2000000, base_ns - 900000,
       600000 + CASE WHEN late THEN {LEAD_NS} ELSE 0 END, 0, 0, 300000, 0, NULL, NULL, NULL, NULL
FROM (
  SELECT r, g, s, late, {T0_NS} + s * {STEP_NS} + {BASE_ARRIVAL_NS} + (r % 7) * 1000 AS base_ns
  FROM (SELECT r, r % 2 AS g, s,
               r = CASE WHEN (s * 37 + (r % 2) * 101 + 5) % ? % 2 = r % 2 THEN (s * 37 + (r % 2) * 101 + 5) % ?
                        ELSE r % 2 END AS late
        FROM range(?) a(r), range(?) b(s)))
"""




def synthetic_late_rank(step: int, group: int, ranks: int) -> int:
    """The late rank of group ``group``'s collective at ``step`` in :func:`fill_synthetic_collectives`'s table."""
    candidate = (step * 37 + group * 101 + 5) % ranks
    return candidate if candidate % 2 == group else group


def fill_synthetic_collectives(con, ranks: int, steps: int) -> None:
    """(Re)create ``cluster_collectives`` in ``con`` with ``ranks × steps`` rows (see SYNTHETIC_SQL)."""
    from ascendscope.ingest import collectives

    con.execute(collectives.DDL)
    con.execute(SYNTHETIC_SQL, [ranks, ranks, ranks, steps])
