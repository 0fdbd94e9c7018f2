"""Compute an Overlap Analysis lane for a rank whose trace has none (FORMATS.md §6.1).

    Computing                       = union of the intervals of device compute tasks (Ascend Hardware X events
                                      whose "Task Type" is a compute core; a GPU trace's kernels but NCCL's)
    Communication                   = union of the communication op intervals (op-level HCCL lanes, not planes;
                                      a GPU trace's NCCL kernels)
    Communication(Not Overlapped)   = Communication minus Computing
    Free                            = [first busy start, last busy end] minus (Computing ∪ Communication)

Compute task types include DSA_SQE, and Free is bounded by the busy extremes (not by place-holder tasks): with
these two choices the derived lane equals the profiler's own on the real samples to within a few ns per step.

The result is appended to the staging event table as ordinary X events on a synthetic "Overlap Analysis"
process (pid ``DERIVED_PID``), so every later step treats it like the profiler's own lane.
"""

from __future__ import annotations

import json

import numpy as np

from .columns import arrow_table

DERIVED_PID = -2
LANES = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]
COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE")
# a Kineto GPU trace's device events (the older Kineto's category names too): kernels compute, but NCCL's
# kernels (``ncclKernel_…``, ``ncclDevKernel_…``), which communicate; copies and memsets are other device work
GPU_KERNEL_CATS = ("kernel", "Kernel")
GPU_OTHER_CATS = ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset")

# the ranks of the stage, and those with their own Overlap Analysis lane (a metadata event names it)
RANKS = "SELECT DISTINCT rank FROM {p}ev ORDER BY rank"
HAS_OVERLAP = """
SELECT DISTINCT rank FROM {p}ev WHERE ph = 'M' AND name = 'process_name' AND args->>'name' = 'Overlap Analysis'
"""

INTERVALS = """
WITH procs AS (SELECT rank, pid, args->>'name' AS pname FROM {p}ev WHERE ph = 'M' AND name = 'process_name'),
     threads AS (SELECT rank, pid, tid, args->>'name' AS tname FROM {p}ev WHERE ph = 'M' AND name = 'thread_name')
SELECT e.rank, CASE WHEN p.pname = 'Ascend Hardware' AND e.args->>'Task Type' IN {compute} THEN 0
            WHEN p.pname = 'Ascend Hardware' THEN 2
            WHEN e.cat IN {gpu_kernel} AND NOT starts_with(lower(e.name), 'nccl') THEN 0
            WHEN e.cat IN {gpu_other} THEN 2
            ELSE 1 END AS what,
       e.ts_ns, e.ts_ns + greatest(coalesce(e.dur_ns, 0), 0) AS end_ns
FROM {p}ev e JOIN procs p USING (rank, pid) LEFT JOIN threads t ON t.rank = e.rank AND t.pid = e.pid AND t.tid = e.tid
WHERE e.ph = 'X' AND e.ts_ns IS NOT NULL AND list_contains(?, e.rank)
  AND (p.pname = 'Ascend Hardware'
       OR (p.pname IN ('HCCL', 'Communication') AND coalesce(t.tname, '') NOT LIKE 'Plane%')
       OR e.cat IN {gpu_kernel} OR e.cat IN {gpu_other})
"""


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted ones (touching intervals merge)."""
    if len(starts) == 0:
        return starts, ends
    order = np.lexsort((ends, starts))
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    out_e = np.maximum.reduceat(e, idx)
    return s[idx], out_e


def subtract(a_s, a_e, b_s, b_e) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals A minus disjoint sorted intervals B: A cut by B's gaps (before B, between its
    intervals, after it), each interval of A with the gaps that overlap it, pieces that touch merged."""
    if len(a_s) == 0 or len(b_s) == 0:
        return a_s, a_e
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    gap_s = np.concatenate(([lo], b_e)).astype(np.int64)
    gap_e = np.concatenate((b_s, [hi])).astype(np.int64)
    first = np.searchsorted(gap_e, a_s, side="right")  # the first gap ending after the interval starts
    last = np.searchsorted(gap_s, a_e, side="left") - 1  # the last gap starting before it ends
    count = np.maximum(last - first + 1, 0)
    row = np.repeat(np.arange(len(a_s)), count)
    gap = np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    s, e = np.maximum(a_s[row], gap_s[gap]), np.minimum(a_e[row], gap_e[gap])
    keep = s < e
    s, e = s[keep], e[keep]
    if len(s) < 2:
        return s, e
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def derive(cur, prefix: str, rank: int | None = None) -> int:
    """Append a derived Overlap Analysis lane to the events (``{prefix}ev_t``) of the ranks without one; return
    the number of slices added. ``rank``: the events staged without a rank are this rank's."""
    return sum(derive_ranks(cur, prefix, rank).values())


def derive_ranks(cur, prefix: str, rank: int | None = None) -> dict[int, int]:
    """:func:`derive`, with the slices added per rank (ranks that have their own lane are left out)."""
    if rank is not None:
        from .trace import fill_rank

        fill_rank(cur, prefix, rank)
    own = {r for (r,) in cur.execute(HAS_OVERLAP.format(p=prefix)).fetchall()}
    missing = [r for (r,) in cur.execute(RANKS.format(p=prefix)).fetchall() if r not in own]
    if not missing:
        return {}
    sql = INTERVALS.format(p=prefix, compute=str(COMPUTE_TASK_TYPES), gpu_kernel=str(GPU_KERNEL_CATS),
                           gpu_other=str(GPU_OTHER_CATS))
    cols = cur.execute(sql, [missing]).fetchnumpy()
    ranks = np.asarray(cols["rank"])
    what, ts, end = (np.asarray(cols[c]) for c in ("what", "ts_ns", "end_ns"))
    return append_ranks(cur, prefix, [(r, what[ranks == r], ts[ranks == r].astype(np.int64),
                                       end[ranks == r].astype(np.int64)) for r in missing])


def append_lanes(cur, prefix: str, what: np.ndarray, ts: np.ndarray, end: np.ndarray, rank: int | None = None) -> int:
    """Append the lane computed from device intervals (``what``: 0 compute task, 1 communication op, 2 other
    device task) of ``rank`` to ``{prefix}ev_t``; return the number of slices added (0 when there are no device
    tasks)."""
    return sum(append_ranks(cur, prefix, [(rank, what, ts, end)]).values())


META = [("process_name", 0, {"name": "Overlap Analysis"}), ("process_labels", 0, {"labels": "NPU"}),
        ("process_sort_index", 0, {"sort_index": 1000}),
        *(("thread_name", i, {"name": n}) for i, n in enumerate(LANES)),
        *(("thread_sort_index", i, {"sort_index": i}) for i in range(len(LANES)))]
META_VALUES = ", ".join(f"({i}, '{name}', {tid}, '{json.dumps(args)}'::JSON)"
                        for i, (name, tid, args) in enumerate(META))


def append_ranks(cur, prefix: str, lanes: list[tuple]) -> dict:
    """:func:`append_lanes` of several ranks (``lanes``: rank, what, ts, end) in two statements, each rank's events
    in the order it would append them alone; rank -> slices added (ranks without device tasks left out)."""
    parts, ranks = [], []
    for rank, what, ts, end in lanes:
        rows = _lane_rows(what, ts, end)
        if rows is None:
            continue
        rows["k"] = np.full(len(rows["tid"]), len(ranks), dtype=np.int64)
        parts.append(rows)
        ranks.append(rank)
    if not parts:
        return {}
    table = arrow_table({c: np.concatenate([rows[c] for rows in parts]) for c in ("k", "tid", "ts_ns", "dur_ns")})
    cur.register("_overlap_rows", table)
    try:
        cur.execute(f"""
            INSERT INTO {prefix}ev_t (ph, name, cat, pid, tid, ts_ns, dur_ns, args, rank)
            SELECT 'X', list_extract(?, tid + 1), 'overlap_derived', {DERIVED_PID}, tid, ts_ns, dur_ns, NULL,
                   list_extract(?::INTEGER[], k + 1)
            FROM _overlap_rows ORDER BY k, tid, ts_ns""", [LANES, ranks])
        cur.execute(f"""INSERT INTO {prefix}ev_t (ph, name, pid, tid, args, rank)
                        SELECT 'M', v.name, {DERIVED_PID}, v.tid, v.args, list_extract(?::INTEGER[], r.k + 1)
                        FROM (VALUES {META_VALUES}) v(i, name, tid, args), (SELECT unnest(range(?)) AS k) r
                        ORDER BY r.k, v.i""", [ranks, len(ranks)])
    finally:
        cur.unregister("_overlap_rows")
    return {rank: len(rows["tid"]) for rank, rows in zip(ranks, parts)}


def _lane_rows(what: np.ndarray, ts: np.ndarray, end: np.ndarray) -> dict | None:
    """The lane's slices (tid: its thread, ts_ns, dur_ns), or None when there are no device tasks."""
    hw = what != 1
    if not hw.any():
        return None
    comp = union(ts[what == 0], end[what == 0])
    comm = union(ts[what == 1], end[what == 1])
    comm_only = subtract(*comm, *comp)
    busy = union(np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]]))
    if not len(busy[0]):
        return None
    lo, hi = int(busy[0][0]), int(busy[1][-1])
    free = subtract(np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64), *busy)
    rows = {"tid": [], "ts_ns": [], "dur_ns": []}
    for tid, (s, e) in enumerate([comp, comm, comm_only, free]):
        rows["tid"].append(np.full(len(s), tid, dtype=np.int64))
        rows["ts_ns"].append(s)
        rows["dur_ns"].append(e - s)
    return {k: np.concatenate(v) for k, v in rows.items()}
