"""Compare view: two sides (a run, one of its ranks and one step, or the whole rank) side by side.

Contract: every number of a side is what the Summary, Operator and Communication queries answer for that rank and
step — they are called here, not re-derived: the step breakdown is :func:`server.queries.summary.breakdown`'s row,
kernel groups are :func:`server.queries.operators.groups`, host torch ops :func:`server.queries.operators.torch_ops`,
and the communication total :func:`server.queries.communication.rank_totals`. Communication per op type sums the
same ``comm_ops`` rows the Communication view lists (the type is the op name before ``__``).

Rows of the two sides are aligned by key (a kernel group's key, a torch op's name, an HCCL op type); a row present
on one side only says so (``only``: ``"a"`` or ``"b"``). A delta is B − A (None when a side lacks the value) and its
percent is of A (None when A is 0 or missing). Each side reads at most :data:`MAX_SIDE_ROWS` rows of a table, and a
table answers at most :data:`MAX_TABLE_ROWS` aligned rows, largest first; both cuts are flagged ``truncated``.

A side's step: ``None`` is the whole rank (the breakdown summed over its steps, tables unfiltered); otherwise a
step number the rank has. A rank without kernel rows (a GPU Kineto trace has no kernel_details.csv) gets its kernel
table from the slices of its device lanes instead, flagged ``source: "trace"``.

The step-aligned timeline draws, per side, the rank's device lanes (:func:`timeline_lanes`) on a time axis that
starts at the step's start (:func:`anchor`): the ProfilerStep's host start, or its first device task with
``align="device"``; a rank without steps (or "whole rank") is aligned on its trace start.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ascendscope.server.queries import NotFound, Page, QueryError, Where, ratio, sources, table_columns
from ascendscope.server.queries import communication as cq
from ascendscope.server.queries import operators as oq
from ascendscope.server.queries import summary as sq

MAX_SIDE_ROWS = 5_000
MAX_TABLE_ROWS = 500
MAX_LANES = 32
ALIGNS = ("host", "device")
SORTS = ("total", "delta", "name")

BREAKDOWN_FIELDS = (
    ("computing_ns", "Computing"),
    ("communication_ns", "Communication"),
    ("communication_not_overlapped_ns", "Exposed communication (not overlapped)"),
    ("overlapped_ns", "Overlapped (computing ∥ communication)"),
    ("computing_not_overlapped_ns", "Computing (not overlapped)"),
    ("free_ns", "Free"),
    ("preparing_ns", "Preparing"),
    ("e2e_ns", "Step time (step trace: computing + exposed communication + free)"),
    ("stage_ns", "Stage"),
    ("bubble_ns", "Bubble"),
)
BREAKDOWN_RATIOS = (("computing_ratio", "Computing ratio"), ("communication_ratio", "Communication ratio"),
                    ("free_ratio", "Free ratio"))
KERNEL_FIELDS = ("count", "total_ns", "avg_ns")
TORCH_FIELDS = ("count", "host_self_duration_ns", "host_total_duration_ns", "device_self_duration_ns",
                "device_total_duration_ns")
COMM_FIELDS = ("count", "elapse_time_ns", "transit_time_ns", "wait_time_ns", "synchronization_time_ns",
               "idle_time_ns")
SIZE_FIELD = {"kernels": "total_ns", "torch": "device_self_duration_ns", "communication": "elapse_time_ns"}

STEPS_SQL = """
SELECT step FROM steps WHERE rank = ? AND step IS NOT NULL
UNION SELECT step FROM step_trace WHERE rank = ? AND step IS NOT NULL
ORDER BY step
"""
STEP_SQL = "SELECT host_start_ns, host_end_ns, device_start_ns, device_end_ns FROM steps WHERE rank = ? AND step = ?"
COMM_STEP_KEYS_SQL = "SELECT DISTINCT step FROM comm_ops WHERE rank = ? AND step_id = ? ORDER BY step"
COMM_TYPES_SQL = """
SELECT split_part(op_name, '__', 1) AS op_type, count(*) AS count, sum(elapse_time_ns) AS elapse_time_ns,
       sum(transit_time_ns) AS transit_time_ns, sum(wait_time_ns) AS wait_time_ns,
       sum(synchronization_time_ns) AS synchronization_time_ns, sum(idle_time_ns) AS idle_time_ns
FROM comm_ops WHERE {where} GROUP BY op_type ORDER BY elapse_time_ns DESC NULLS LAST, op_type LIMIT ?
"""
# the kernels of a rank without kernel_details.csv: the slices of its device lanes, by name (cat as the type)
TRACE_KERNELS_SQL = """
SELECT s.name, s.cat AS type, NULL::VARCHAR AS accelerator_core, count(*) AS count, sum(s.dur_ns) AS total_ns,
       avg(s.dur_ns) AS avg_ns
FROM slices s JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = ? AND t.kind = 'hardware' AND s.ts_ns >= ? AND s.ts_ns < ?
GROUP BY ALL ORDER BY total_ns DESC NULLS LAST, s.name LIMIT ?
"""
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
DEVICE_LABEL = re.compile(r"\bGPU\b|^stream\b", re.IGNORECASE)


@dataclass
class Side:
    """One side of a comparison: a rank of a run's database and a step of it (None: the whole rank)."""

    db: object
    rank: int
    step: int | None
    ranks: list[int]
    steps: list[int]


def side(db, ranks: list[int], rank: int | None, step: str | None, label: str) -> Side:
    """Resolve a side's rank (default: its run's first rank) and step (default: the rank's first step, else the
    whole rank; ``"all"``: the whole rank; a number: that step, which the rank must have)."""
    if rank is None:
        if not ranks:
            raise NotFound("rank_not_found", f"run {label} has no ranks")
        rank = ranks[0]
    elif rank not in ranks:
        raise NotFound("rank_not_found", f"run {label} has no rank {rank}; its ranks are "
                                         f"{', '.join(map(str, ranks)) or 'none'}")
    steps = [int(r[0]) for r in db.rows(STEPS_SQL, [rank, rank])]
    if step is None:
        chosen = steps[0] if steps else None
    elif step == "all":
        chosen = None
    else:
        chosen = int(step)
        if chosen not in steps:
            raise NotFound("step_not_found", f"rank {rank} of run {label} has no step {chosen}; its steps are "
                                             f"{', '.join(map(str, steps)) or 'none'}")
    return Side(db=db, rank=rank, step=chosen, ranks=list(ranks), steps=steps)


# --------------------------------------------------------------------------------------------------- deltas


def delta(a, b):
    return None if a is None or b is None else b - a


def delta_pct(a, b):
    d = delta(a, b)
    return None if d is None or not a else d / a


def align_rows(a_rows: list[dict], b_rows: list[dict], key, fields: tuple[str, ...], size: str,
               sort: str = "total") -> list[dict]:
    """Rows of both sides matched on ``key(row)``: ``{"key", "a", "b", "delta", "delta_pct", "only"}`` where
    ``a``/``b`` hold ``fields`` of that side's row (None when it has none). Sorted by ``sort``: the larger side's
    ``size`` (default), the largest |delta| of ``size``, or the key."""
    if sort not in SORTS:
        raise QueryError("bad_sort", f"sort must be one of {', '.join(SORTS)}")
    merged: dict = {}
    for which, rows in (("a", a_rows), ("b", b_rows)):
        for r in rows:
            merged.setdefault(key(r), {"a": None, "b": None})[which] = {f: r.get(f) for f in fields}
    out = []
    for k, pair in merged.items():
        a, b = pair["a"], pair["b"]
        only = "a" if b is None else "b" if a is None else None
        out.append({"key": k, "a": a, "b": b, "only": only,
                    "delta": {f: delta((a or {}).get(f), (b or {}).get(f)) if not only else None for f in fields},
                    "delta_pct": {f: delta_pct((a or {}).get(f), (b or {}).get(f)) if not only else None
                                  for f in fields}})

    def biggest(r):
        return max((r["a"] or {}).get(size) or 0, (r["b"] or {}).get(size) or 0)

    if sort == "name":
        out.sort(key=lambda r: str(r["key"]))
    elif sort == "delta":
        out.sort(key=lambda r: (-abs(delta((r["a"] or {}).get(size) or 0, (r["b"] or {}).get(size) or 0)),
                                str(r["key"])))
    else:
        out.sort(key=lambda r: (-biggest(r), str(r["key"])))
    return out


def _table(rows: list[dict], side_truncated: bool) -> dict:
    return {"rows": rows[:MAX_TABLE_ROWS], "total": len(rows),
            "truncated": side_truncated or len(rows) > MAX_TABLE_ROWS,
            "only_a": sum(1 for r in rows if r["only"] == "a"), "only_b": sum(1 for r in rows if r["only"] == "b")}


# --------------------------------------------------------------------------------------------------- breakdown


def side_breakdown(s: Side) -> dict | None:
    """The Summary view's breakdown row of the side's (rank, step); for the whole rank, its rows summed and the
    ratios taken again over the sum (as the Summary view's "All (summed)" does). None: no breakdown."""
    rows = [r for r in sq.breakdown(s.db, "auto") if r["rank"] == s.rank and (s.step is None or r["step"] == s.step)]
    if not rows:
        return None
    if len(rows) == 1:
        return rows[0]
    fields = [f for f, _ in BREAKDOWN_FIELDS]
    out = {"rank": s.rank, "step": None, "source": "+".join(sorted({r["source"] for r in rows})), "steps": len(rows)}
    for f in fields:
        values = [r[f] for r in rows if r.get(f) is not None]
        out[f] = sum(values) if values else None
    out["computing_ratio"] = ratio(out["computing_ns"], out["e2e_ns"])
    out["communication_ratio"] = ratio(out["communication_not_overlapped_ns"], out["e2e_ns"])
    out["free_ratio"] = ratio(out["free_ns"], out["e2e_ns"])
    return out


def breakdown(a: Side, b: Side) -> dict:
    ra, rb = side_breakdown(a), side_breakdown(b)
    rows = []
    for field, label in BREAKDOWN_FIELDS + BREAKDOWN_RATIOS:
        va, vb = (ra or {}).get(field), (rb or {}).get(field)
        rows.append({"key": field, "label": label, "ratio": field.endswith("_ratio"), "a": va, "b": vb,
                     "delta": delta(va, vb), "delta_pct": None if field.endswith("_ratio") else delta_pct(va, vb)})
    return {"rows": rows, "source": {"a": (ra or {}).get("source"), "b": (rb or {}).get("source")},
            "source_name": {"a": _breakdown_source(a, ra), "b": _breakdown_source(b, rb)}}


def _breakdown_source(s: Side, row: dict | None) -> str | None:
    """Where a side's breakdown came from, named in its rank's format (analysis.db StepTraceTime for a db run)."""
    if not row:
        return None
    names = []
    for src in row["source"].split("+"):
        names.append(sources.source_names(s.db, "step_trace").get(s.rank, "step_trace_time.csv")
                     if src == "step_trace" else "the Overlap Analysis lane")
    return " and ".join(names)


# --------------------------------------------------------------------------------------------------- operators


def side_kernels(s: Side, group_by: str, kind: str) -> dict:
    """Kernel groups of the side (the Operator view's groups), or, for a rank without kernel rows, its device
    lanes' slices by name."""
    has_kernels = bool(s.db.rows("SELECT 1 FROM kernels WHERE rank = ? LIMIT 1", [s.rank]))
    if has_kernels:
        columns = table_columns(s.db, "kernels")
        step = s.step if "step_id" in columns else None
        got = oq.groups(s.db, s.rank, group_by, kind, step, None, None, "total", "desc", Page(0, MAX_SIDE_ROWS))
        return {"rows": got["rows"], "truncated": got["truncated"], "source": "kernel_details",
                "step_filtered": s.step is not None and step is not None}
    if group_by not in oq.GROUP_KEYS:
        raise QueryError("bad_group_by", f"group_by must be one of {', '.join(oq.GROUP_KEYS)}")
    lo, hi = _device_range(s)
    rows = s.db.dicts(TRACE_KERNELS_SQL, [s.rank, lo, hi, MAX_SIDE_ROWS + 1])
    if not rows:
        return {"rows": [], "truncated": False, "source": None, "step_filtered": False}
    keys = oq.GROUP_KEYS[group_by]
    groups: dict[tuple, dict] = {}
    for r in rows[:MAX_SIDE_ROWS]:  # re-grouped on the asked keys (the query grouped by name and type)
        k = tuple(r.get(c) for c in keys)
        g = groups.setdefault(k, {**{c: r.get(c) for c in keys}, "count": 0, "total_ns": 0})
        g["count"] += int(r["count"])
        g["total_ns"] += int(r["total_ns"] or 0)
    out = []
    for k, g in groups.items():
        g["avg_ns"] = g["total_ns"] / g["count"] if g["count"] else None
        g["group_key"] = json.dumps(list(k))
        out.append(g)
    out.sort(key=lambda g: -g["total_ns"])
    return {"rows": out, "truncated": len(rows) > MAX_SIDE_ROWS, "source": "trace",
            "step_filtered": s.step is not None}


def _kernel_source(s: Side, source: str | None) -> str | None:
    if source == "kernel_details":
        return sources.source_names(s.db, "kernels").get(s.rank)
    return "the trace's device lanes (no kernel table)" if source == "trace" else None


def _device_range(s: Side) -> tuple[int, int]:
    """The side's step on the device ([device start, device end) of the ProfilerStep), else everything."""
    if s.step is not None:
        row = s.db.rows(STEP_SQL, [s.rank, s.step])
        if row and row[0][2] is not None and row[0][3] is not None:
            return int(row[0][2]), int(row[0][3])
    return INT64_MIN, INT64_MAX


def kernels(a: Side, b: Side, group_by: str = "name", kind: str = "all", sort: str = "total") -> dict:
    ka, kb = side_kernels(a, group_by, kind), side_kernels(b, group_by, kind)
    keys = oq.GROUP_KEYS[group_by]
    rows = align_rows(ka["rows"], kb["rows"], lambda r: r["group_key"], KERNEL_FIELDS, SIZE_FIELD["kernels"], sort)
    for r in rows:
        r.update(dict(zip(keys, json.loads(r["key"]))))
    return _table(rows, ka["truncated"] or kb["truncated"]) | {
        "group_by": group_by, "kind": kind, "keys": list(keys),
        "source": {"a": ka["source"], "b": kb["source"]},
        "source_name": {"a": _kernel_source(a, ka["source"]), "b": _kernel_source(b, kb["source"])},
        "step_filtered": {"a": ka["step_filtered"], "b": kb["step_filtered"]}}


def torch_ops(a: Side, b: Side, sort: str = "total") -> dict:
    """Host torch ops per name (operator_details.csv has no step: always the whole rank)."""
    sides = []
    for s in (a, b):
        got = oq.torch_ops(s.db, s.rank, "name", None, "device_self", "desc", Page(0, MAX_SIDE_ROWS))
        sides.append(got)
    rows = align_rows(sides[0]["rows"], sides[1]["rows"], lambda r: r["name"], TORCH_FIELDS, SIZE_FIELD["torch"],
                      sort)
    for r in rows:
        r["name"] = r["key"]
    return _table(rows, sides[0]["truncated"] or sides[1]["truncated"])


# --------------------------------------------------------------------------------------------------- communication


def _comm_step_key(s: Side) -> tuple[bool, str | None]:
    """(whether the side has communication rows of its step, the Communication view's step key for it)."""
    if s.step is None:
        return True, None
    keys = [r[0] for r in s.db.rows(COMM_STEP_KEYS_SQL, [s.rank, s.step])]
    return (bool(keys), keys[0] if len(keys) == 1 else None)


def side_communication(s: Side) -> dict:
    has_step, key = _comm_step_key(s)
    if not has_step:
        return {"rows": [], "total": None, "truncated": False}
    w = Where().add("rank = ?", s.rank).add("NOT is_total")
    if s.step is not None:
        w.add("step_id = ?", s.step)
    rows = s.db.dicts(COMM_TYPES_SQL.format(where=w.sql()), w.params + [MAX_SIDE_ROWS + 1])
    for r in rows:
        for f in COMM_FIELDS:
            r[f] = None if r[f] is None else int(r[f])
    total = None
    if s.step is None or key is not None:
        total = next((r for r in cq.rank_totals(s.db, key)["rows"] if r["rank"] == s.rank), None)
    return {"rows": rows[:MAX_SIDE_ROWS], "total": total, "truncated": len(rows) > MAX_SIDE_ROWS}


def communication(a: Side, b: Side, sort: str = "total") -> dict:
    ca, cb = side_communication(a), side_communication(b)
    rows = align_rows(ca["rows"], cb["rows"], lambda r: r["op_type"], COMM_FIELDS, SIZE_FIELD["communication"],
                      sort)
    for r in rows:
        r["op_type"] = r["key"]
    total = align_rows([ca["total"]] if ca["total"] else [], [cb["total"]] if cb["total"] else [],
                       lambda r: "total", COMM_FIELDS[1:] + ("ops",), SIZE_FIELD["communication"])
    return _table(rows, ca["truncated"] or cb["truncated"]) | {"total_row": total[0] if total else None}


# --------------------------------------------------------------------------------------------------- timeline


def is_device_lane(row: dict) -> bool:
    """Overlap Analysis rows, Ascend Hardware (or GPU) streams and the communication op lane (not its planes)."""
    kind = row["kind"]
    if kind in ("overlap", "hardware"):
        return True
    if kind == "communication":
        return not (row.get("thread_name") or "").startswith("Plane")
    if kind == "other":  # a trace reader that labels GPU streams without a lane kind of their own
        return any(DEVICE_LABEL.search(row.get(c) or "") for c in ("label", "process_name", "thread_name"))
    return False


LANE_ORDER = {"overlap": 0, "hardware": 1, "other": 1, "communication": 2}


def timeline_lanes(track_rows: list[dict], rank: int) -> tuple[list[dict], bool]:
    """The rank's device lanes with slices, Overlap Analysis first, then streams, then communication (at most
    :data:`MAX_LANES`), and whether some were left out."""
    lanes = [r for r in track_rows if r["rank"] == rank and is_device_lane(r) and (r["slice_count"] or 0) > 0]
    lanes.sort(key=lambda r: (LANE_ORDER.get(r["kind"], 3), r["sort_index"] or 0, r["track_id"]))
    return lanes[:MAX_LANES], len(lanes) > MAX_LANES


def anchor(s: Side, track_rows: list[dict], align: str = "host") -> dict:
    """Where the side's time axis starts (absolute ``align_ns``) and the extent it is drawn over: the step's host
    start (or its first device task with ``align="device"``), else the rank's trace start."""
    if align not in ALIGNS:
        raise QueryError("bad_align", f"align must be one of {', '.join(ALIGNS)}")
    if s.step is not None:
        row = s.db.rows(STEP_SQL, [s.rank, s.step])
        if row:
            hs, he, ds, de = (None if v is None else int(v) for v in row[0])
            on_device = align == "device" and ds is not None
            at = ds if on_device else hs
            ends = [v for v in (he, de) if v is not None]
            starts = [v for v in (hs, ds) if v is not None]
            return {"align_on": "device" if on_device else "step", "align_ns": at,
                    "start_ns": min(starts), "end_ns": max(ends) if ends else at,
                    "marks": {"host_start": hs, "host_end": he, "device_start": ds, "device_end": de}}
    mine = [r for r in track_rows if r["rank"] == s.rank and r["min_ts_ns"] is not None]
    if not mine:
        return {"align_on": None, "align_ns": None, "start_ns": None, "end_ns": None, "marks": {}}
    start = min(int(r["min_ts_ns"]) for r in mine)
    end = max(int(r["max_end_ns"]) for r in mine if r["max_end_ns"] is not None)
    return {"align_on": "trace", "align_ns": start, "start_ns": start, "end_ns": end, "marks": {}}
