"""``cluster_collectives``: one row per collective op instance per rank, with what the rank did before it.

Contract: :func:`build` ``(con)`` creates (or replaces) ``cluster_collectives`` in the connection's default
database from the run tables there (one rank or several). Every row comes from one rank's own rows, so the tables
of per-rank shards put end to end equal the table built over the whole run, and ``cluster.duckdb`` gathers it
like the other ``cluster_*`` tables: the late-arrival analysis of 1,000 ranks reads it alone
(``server/queries/late_arrivals.py`` matches the instances across ranks).

Instances of a rank:

* with a trace: the slices of its op-level communication lanes (``Group <name> Communication``, not ``Plane``),
  ns-exact, ``source`` = ``trace``, with their ``slice_id`` / ``track_id``;
* else: the op rows of ``comm_ops`` (communication.json, or analysis.db), ``source`` = ``communication`` (their
  start is µs-exact only).

Point-to-point ops (``hcom_send…``, ``hcom_receive…``, ``hcom_batchSendRecv…``) are left out: their peer is one
rank, not a group that waits for its last member.

* ``group_id``: the op's group in ``comm_ops`` — the k-th trace op named N on a rank is the k-th ``comm_ops`` row
  named N of that rank, both in start order (their starts differ by µs between the two sources, the names and
  their order do not) when that row names one — else the lane's group name (the text between ``Group`` and
  ``Communication``, or the whole lane name: msprof's older timeline has one ``Communication Kernel`` lane), else
  ``(no group id)``. Ops of the same group id match across ranks by name and occurrence.
* ``seq``: the occurrence of (``group_id``, ``op_name``) on the rank, in start order, from 0. An instance across
  ranks is (``group_id``, ``op_name``, ``seq``).
* ``step``: the ``comm_ops`` step, else the rank's step whose host range (host start to the later of host and
  device end) holds the op's start.
* The *window* of an instance is ``[window_start_ns, start_ns]``: from the end of the previous instance of the
  same group on the rank in the same step, else from the host start of the step holding the op, else from the end
  of the previous instance (a rank without steps), else from the rank's first event
  (NULL when none is known: a rank without a trace, before its first op of the group).
  It is split, from the rank's Overlap Analysis lane, into ``computing_ns`` (Computing), ``other_comm_ns``
  (Communication(Not Overlapped): collectives of other groups, p2p), ``launch_bound_ns`` (Free while the host
  was inside a CANN API call that is not a synchronize: the device waited for a launch), ``free_ns`` (the rest of
  Free: the host had queued nothing) and ``preparing_ns`` (the rest of the window, not covered by the lane:
  before the lane's first compute or communication task). The five add up to the window. NULL for a rank
  without the lane (no trace); ``launch_bound_ns`` is NULL (and Free all ``free_ns``) for a rank without a CANN
  lane (Level0).
* ``top_kernel`` / ``top_kernel_ns``: the compute task name (Ascend Hardware lanes) with the most time inside
  the window.
* ``window_kernels``: the compute tasks inside the window by name, as JSON ``[[name, type, ns], …]``, most time
  first, at most :data:`MAX_WINDOW_KERNELS` names (more: the rest left out, ``window_kernel_names`` says how many
  there were). ``type`` is kernel_details' Type of that name, else its Task Type. The late-arrival analysis
  compares the late rank's list with the reference rank's, kernel by kernel.
"""

from __future__ import annotations

import json
import re

import numpy as np

from .columns import insert_columns
from .overlap import COMPUTE_TASK_TYPES, subtract, union

P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")
SYNC_MARKER = "Synchronize"  # aclrtSynchronizeStream / Device / Event: the host waits, it does not launch
GROUP_LANE = re.compile(r"^Group (.*) Communication$")
NO_GROUP = "(no group id)"  # msprof's older timeline names no group: its ops match across ranks by name alone
TYPE_SUFFIX = re.compile(r"(_\d+)+$")  # hcom_allReduce__586_0_1 -> hcom_allReduce_ (as the views group them)
# a window's kernels kept by name: enough for a segment's distinct kernels between two collectives, and bounded
# (the table holds a row per collective per rank)
MAX_WINDOW_KERNELS = 32

COLUMNS = (
    ("rank", "INTEGER"), ("group_id", "VARCHAR"), ("op_name", "VARCHAR"), ("op_type", "VARCHAR"),
    ("seq", "INTEGER"), ("step", "BIGINT"), ("source", "VARCHAR"), ("slice_id", "BIGINT"), ("track_id", "INTEGER"),
    ("start_ns", "BIGINT"), ("end_ns", "BIGINT"), ("window_start_ns", "BIGINT"), ("computing_ns", "BIGINT"),
    ("other_comm_ns", "BIGINT"), ("launch_bound_ns", "BIGINT"), ("free_ns", "BIGINT"), ("preparing_ns", "BIGINT"),
    ("top_kernel", "VARCHAR"), ("top_kernel_ns", "BIGINT"), ("window_kernels", "VARCHAR"),
    ("window_kernel_names", "INTEGER"),
)
DDL = ("CREATE OR REPLACE TABLE cluster_collectives ("
       + ", ".join(f"{name} {sql_type}" for name, sql_type in COLUMNS) + ")")

TRACE_OPS_SQL = """
SELECT s.rank, s.slice_id, s.track_id, s.name, s.ts_ns, s.ts_ns + s.dur_ns AS end_ns, t.thread_name
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE t.kind = 'communication' AND NOT starts_with(coalesce(t.thread_name, ''), 'Plane') AND s.depth = 0
ORDER BY s.rank, s.ts_ns, s.slice_id
"""
COMM_OPS_SQL = """
SELECT rank, op_name, group_id, step_id, start_ns, start_ns + coalesce(elapse_time_ns, 0) AS end_ns
FROM comm_ops
WHERE NOT coalesce(is_total, false) AND op_name IS NOT NULL AND start_ns IS NOT NULL
ORDER BY rank, start_ns, op_name
"""
STEPS_SQL = """
SELECT rank, step, host_start_ns, greatest(host_end_ns, coalesce(device_end_ns, host_end_ns)) AS end_ns
FROM steps WHERE host_start_ns IS NOT NULL AND host_end_ns IS NOT NULL ORDER BY rank, host_start_ns
"""
RANK_START_SQL = "SELECT rank, start_ns FROM ranks"
# (each lane's slices fetched on their own, the host's busy time merged in SQL and the kernels' names as numbers:
# a big trace's millions of slices never sit in memory all at once, nor as Python strings)
OVERLAP_SQL = """
SELECT s.rank, s.ts_ns, s.ts_ns + s.dur_ns AS end_ns
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE t.kind = 'overlap' AND s.name = ? AND s.dur_ns > 0
ORDER BY s.rank
"""
LANE_RANKS_SQL = """
SELECT DISTINCT s.rank FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE t.kind = 'overlap' AND s.name IN ('Computing', 'Communication(Not Overlapped)', 'Free') AND s.dur_ns > 0
"""
CANN_FROM = """
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE t.kind = 'cann' AND s.depth = 0 AND s.dur_ns > 0
"""
HOST_RANKS_SQL = "SELECT DISTINCT t.rank" + CANN_FROM
# the host's launching API calls per rank (their union is taken in numpy: overlap.union)
BUSY_SQL = ("SELECT t.rank, s.ts_ns, s.ts_ns + s.dur_ns AS end_ns" + CANN_FROM
            + " AND NOT contains(s.name, ?) ORDER BY t.rank")
# the compute tasks, each task type read from its args once: the kernels' rows and their names are made from them
KERNELS_TABLE = "_collective_kernels"
COMPUTE_TASKS_SQL = """
CREATE OR REPLACE TEMP TABLE {table} AS
SELECT * FROM (
    SELECT s.rank, s.name, s.ts_ns, s.ts_ns + s.dur_ns AS end_ns,
           json_extract_string(s.args, '$."Task Type"') AS task_type
    FROM slices s JOIN tracks t ON t.track_id = s.track_id
    WHERE t.kind = 'hardware' AND s.dur_ns > 0)
WHERE {compute}
"""
# each task with its name as the name's index in the names' sorted order
KERNELS_SQL = """
SELECT k.rank, n.name_id, k.ts_ns, k.end_ns
FROM {table} k JOIN (SELECT name, (row_number() OVER (ORDER BY name) - 1)::INTEGER AS name_id
                     FROM (SELECT DISTINCT name FROM {table})) n ON k.name IS NOT DISTINCT FROM n.name
ORDER BY k.rank, k.ts_ns
"""
KERNEL_NAMES_SQL = "SELECT name, min(task_type) AS task_type FROM {table} GROUP BY name ORDER BY name"
KERNEL_TYPES_SQL = "SELECT name, min(type) FROM kernels WHERE type IS NOT NULL AND type <> '' GROUP BY name"
# a compute task: a compute core's Task Type (text export), or the db export's KERNEL_* task types
IS_COMPUTE_TYPE_SQL = ("list_contains({types}, {{task_type}}) OR starts_with({{task_type}}, 'KERNEL_')"
                       ).format(types="[" + ", ".join(f"'{t}'" for t in COMPUTE_TASK_TYPES) + "]")
IS_COMPUTE_SQL = IS_COMPUTE_TYPE_SQL.format(task_type="json_extract_string(s.args, '$.\"Task Type\"')")
TABLES_SQL = "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"


def is_p2p(name: str) -> bool:
    return name.lower().startswith(P2P_PREFIXES)


def op_type(name: str) -> str:
    return TYPE_SUFFIX.sub("", name)


def lane_group(thread_name: str | None) -> str:
    m = GROUP_LANE.match(thread_name or "")
    return m.group(1) if m else (thread_name or "")


class Cover:
    """Time covered by a set of intervals (merged into disjoint sorted ones) inside windows, in O(log n) each."""

    def __init__(self, starts, ends):
        s, e = union(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
        self.s, self.e = s, e
        self.cum = np.concatenate([[0], np.cumsum(e - s)])

    def _upto(self, t: np.ndarray) -> np.ndarray:
        if len(self.s) == 0:
            return np.zeros(len(t), dtype=np.int64)
        k = np.searchsorted(self.s, t, side="right") - 1
        inside = np.clip(np.minimum(t, self.e[np.clip(k, 0, None)]) - self.s[np.clip(k, 0, None)], 0, None)
        return np.where(k >= 0, self.cum[np.clip(k, 0, None)] + inside, 0)

    def within(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._upto(b) - self._upto(a)


def _rows_by_rank(con, sql: str, params=()) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for row in con.execute(sql, list(params)).fetchall():
        out.setdefault(int(row[0]), []).append(row[1:])
    return out


def _instances(con, have: set[str]) -> list[dict]:
    """Every rank's collective instances with group, seq, step and window start (no breakdown yet)."""
    trace = _rows_by_rank(con, TRACE_OPS_SQL) if {"slices", "tracks"} <= have else {}
    comm = _rows_by_rank(con, COMM_OPS_SQL) if "comm_ops" in have else {}
    steps = _rows_by_rank(con, STEPS_SQL) if "steps" in have else {}
    first = dict(con.execute(RANK_START_SQL).fetchall()) if "ranks" in have else {}
    out = []
    for rank in sorted(set(trace) | set(comm)):
        by_name: dict[str, list[tuple]] = {}
        for op, group, step_id, start, end in comm.get(rank, []):
            by_name.setdefault(op, []).append((group, step_id, start, end))
        ops = []
        if trace.get(rank):
            taken: dict[str, int] = {}
            for slice_id, track_id, name, start, end, thread in trace[rank]:
                k = taken.get(name, 0)
                taken[name] = k + 1
                match = by_name.get(name, [])
                group, step_id = (match[k][0], match[k][1]) if k < len(match) else (None, None)
                group = group or lane_group(thread)  # communication.json of msprof --analyze names no group
                ops.append({"slice_id": slice_id, "track_id": track_id, "op_name": name, "start_ns": start,
                            "end_ns": end, "group_id": group, "step": step_id, "source": "trace"})
        else:
            for name, rows in by_name.items():
                for group, step_id, start, end in rows:
                    ops.append({"slice_id": None, "track_id": None, "op_name": name, "start_ns": start,
                                "end_ns": end, "group_id": group, "step": step_id, "source": "communication"})
        ops = [o for o in ops if not is_p2p(o["op_name"])]
        for o in ops:
            if not o["group_id"]:  # the same op name and occurrence on two ranks is still one instance
                o["group_id"] = NO_GROUP
        ops.sort(key=lambda o: (o["start_ns"], o["op_name"]))
        seqs: dict[tuple, int] = {}
        last_end: dict[str, int] = {}
        rank_steps = steps.get(rank, [])
        for o in ops:
            key = (o["group_id"], o["op_name"])
            o["seq"] = seqs.get(key, 0)
            seqs[key] = o["seq"] + 1
            held = next((s for s in rank_steps if s[1] <= o["start_ns"] < s[2]), None)
            if o["step"] is None and held is not None:
                o["step"] = held[0]
            prev = last_end.get(o["group_id"])
            step_start = held[1] if held is not None else None
            if prev is not None and step_start is not None:
                start = max(prev, step_start)  # a previous collective of an earlier step: from this step's start
            else:
                start = prev if prev is not None else (step_start if step_start is not None else first.get(rank))
            o["window_start_ns"] = min(o["start_ns"], start) if start is not None else None
            last_end[o["group_id"]] = max(o["end_ns"], prev or o["end_ns"])
            o["rank"] = rank
            o["op_type"] = op_type(o["op_name"])
        out.extend(ops)
    return out


def _arrays_by_rank(con, sql: str, params=()) -> dict[int, dict[str, np.ndarray]]:
    """The columns of a query (its first one the rank, rows ordered by rank) as numpy arrays, split by rank
    (views of the query's arrays, not copies)."""
    cols = con.execute(sql, list(params)).fetchnumpy()
    names = list(cols)
    ranks = np.asarray(cols[names[0]])
    out: dict[int, dict[str, np.ndarray]] = {}
    if len(ranks) == 0:
        return out
    if (ranks[1:] < ranks[:-1]).any():
        raise ValueError("rows not ordered by rank")
    starts = np.concatenate(([0], np.flatnonzero(ranks[1:] != ranks[:-1]) + 1))
    bounds = list(starts[1:]) + [len(ranks)]
    for lo, hi in zip(starts.tolist(), bounds):
        out[int(ranks[lo])] = {n: np.asarray(cols[n])[lo:hi] for n in names[1:]}
    return out


def _breakdown(con, rank_ops: dict[int, list[dict]], have: set[str]) -> None:
    """Fill the window breakdown and top kernel of the instances of ranks with an Overlap Analysis lane (one lane
    at a time, for every rank, so only one lane's slices are held at once)."""
    if not {"slices", "tracks"} <= have:
        return
    with_lane = {int(r[0]) for r in con.execute(LANE_RANKS_SQL).fetchall()}
    ranks = [r for r in rank_ops if r in with_lane]
    if not ranks:
        return
    windows = {}
    for rank in ranks:
        ops = rank_ops[rank]
        windows[rank] = (np.array([o["window_start_ns"] if o["window_start_ns"] is not None else o["start_ns"]
                                   for o in ops], dtype=np.int64),
                         np.array([o["start_ns"] for o in ops], dtype=np.int64))
    empty = np.array([], dtype=np.int64)

    def lane(name: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        cols = _arrays_by_rank(con, OVERLAP_SQL, [name])
        return {r: (c["ts_ns"].astype(np.int64), c["end_ns"].astype(np.int64)) for r, c in cols.items()}

    hosts = {int(r[0]) for r in con.execute(HOST_RANKS_SQL).fetchall()}
    free = lane("Free")
    busy = {r: union(c["ts_ns"].astype(np.int64), c["end_ns"].astype(np.int64))
            for r, c in _arrays_by_rank(con, BUSY_SQL, [SYNC_MARKER]).items()}
    free_all, launch = {}, {}
    for rank in ranks:
        free_s, free_e = union(*free.pop(rank, (empty, empty)))
        launch_s = launch_e = empty
        host = busy.pop(rank, None)
        if host is not None:
            busy_s, busy_e = host
            idle_s, idle_e = subtract(free_s, free_e, busy_s, busy_e)
            launch_s, launch_e = subtract(free_s, free_e, idle_s, idle_e)
        free_all[rank] = Cover(free_s, free_e).within(*windows[rank])
        launch[rank] = Cover(launch_s, launch_e).within(*windows[rank])
    del free, busy
    computing = {r: Cover(*c).within(*windows[r]) for r, c in lane("Computing").items() if r in windows}
    other = {r: Cover(*c).within(*windows[r]) for r, c in lane("Communication(Not Overlapped)").items()
             if r in windows}
    con.execute(COMPUTE_TASKS_SQL.format(table=KERNELS_TABLE,
                                         compute=IS_COMPUTE_TYPE_SQL.format(task_type="task_type")))
    try:
        kernels = _arrays_by_rank(con, KERNELS_SQL.format(table=KERNELS_TABLE))
        kernel_names = con.execute(KERNEL_NAMES_SQL.format(table=KERNELS_TABLE)).fetchall() if kernels else []
    finally:
        con.execute(f"DROP TABLE IF EXISTS {KERNELS_TABLE}")
    types = dict(con.execute(KERNEL_TYPES_SQL).fetchall()) if kernels and "kernels" in have else {}
    kernel_names = [(name, types.get(name) or task_type) for name, task_type in kernel_names]
    for rank in ranks:
        a, b = windows[rank]
        zero = np.zeros(len(a), dtype=np.int64)
        comp, oth, fr, ln = computing.get(rank, zero), other.get(rank, zero), free_all[rank], launch[rank]
        top = _top_kernels(kernels.get(rank), kernel_names, a, b)
        for i, o in enumerate(rank_ops[rank]):
            o["computing_ns"], o["other_comm_ns"] = int(comp[i]), int(oth[i])
            o["launch_bound_ns"] = int(ln[i]) if rank in hosts else None
            o["free_ns"] = int(fr[i] - ln[i])
            o["preparing_ns"] = int((b[i] - a[i]) - comp[i] - oth[i] - fr[i])
            listed, count = top[i]
            o["top_kernel"], o["top_kernel_ns"] = (listed[0][0], listed[0][2]) if listed else (None, None)
            o["window_kernels"] = json.dumps(listed, ensure_ascii=False) if listed else None
            o["window_kernel_names"] = count


def _top_kernels(k: dict[str, np.ndarray] | None, names: list[tuple], a: np.ndarray, b: np.ndarray) -> list[tuple]:
    """Per window, its kernels by name with their time inside it (clipped to the window), most first, at most
    :data:`MAX_WINDOW_KERNELS` ``[name, type, ns]``, and how many names it had; ``k`` holds the rank's kernels
    ordered by start, each name as its index in ``names`` (``(name, type)`` pairs)."""
    if k is None or len(k["ts_ns"]) == 0:
        return [([], 0)] * len(a)
    ts, end, name_id = k["ts_ns"].astype(np.int64), k["end_ns"].astype(np.int64), k["name_id"].astype(np.int64)
    longest = int((end - ts).max())
    out = []
    for lo, hi in zip(a.tolist(), b.tolist()):
        i0, i1 = np.searchsorted(ts, lo - longest, side="left"), np.searchsorted(ts, hi, side="left")
        inside = np.minimum(end[i0:i1], hi) - np.maximum(ts[i0:i1], lo)
        keep = inside > 0
        if not keep.any():
            out.append(([], 0))
            continue
        sums = np.bincount(name_id[i0:i1][keep], weights=inside[keep], minlength=len(names)).astype(np.int64)
        present = np.flatnonzero(sums > 0)
        # most time first, ties by name (the ids are the names' sorted order)
        ranked = present[np.lexsort((present, -sums[present]))][:MAX_WINDOW_KERNELS]
        out.append(([[str(names[j][0]), names[j][1], int(sums[j])] for j in ranked.tolist()], len(present)))
    return out


def build(con) -> None:
    """Create ``cluster_collectives`` from the run tables of ``con``."""
    have = {r[0] for r in con.execute(TABLES_SQL).fetchall()}
    ops = _instances(con, have)
    by_rank: dict[int, list[dict]] = {}
    for o in ops:
        by_rank.setdefault(o["rank"], []).append(o)
    _breakdown(con, {r: v for r, v in by_rank.items() if v[0]["source"] == "trace"}, have)
    con.execute(DDL)
    if not ops:
        return
    insert_columns(con, "cluster_collectives", [[o.get(name) for o in ops] for name, _ in COLUMNS])
