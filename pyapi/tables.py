"""The views' tables, whole, as rows: what ``Run.steps()``/``kernels()``/… return as DataFrames and what the views'
*Export* buttons download as CSV or Parquet (``server/api/export.py``).

Every table is computed by the same function of ``server.queries`` that answers the view (a Summary breakdown row
here is a row of ``/api/runs/{id}/summary``, a kernel group a row of ``/operators/groups``, …), with the same
filters, but asked for all rows at once instead of a page. ``rank=None`` means every rank that has the data (each
row then says its rank); a view asks for one rank at a time. Absolute times are integers (epoch ns) here, where the
JSON API writes them as decimal strings.

Each function takes a *runner* (``server.queries.Runner``: the server's ``RunDb`` or a ``DuckRunner``) and the
run's id (for the timeline links some rows carry). Only DuckDB and the query modules: no web stack, no pandas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ascendscope.server.queries import Page, QueryError
from ascendscope.server.queries import advice as aq
from ascendscope.server.queries import communication as cq
from ascendscope.server.queries import memory as mq
from ascendscope.server.queries import operators as oq
from ascendscope.server.queries import summary as sq

ALL_ROWS = Page(0, 2 ** 62)  # one "page" holding every row
STEP_COLUMNS = ("rank", "step", "source", *sq.CATEGORIES, "computing_not_overlapped_ns", "e2e_ns",
                "computing_ratio", "communication_ratio", "free_ratio")
KERNEL_GROUP_VALUES = ("count", "total_ns", "avg_ns", "min_ns", "max_ns", "wait_ns", "share")
MEMORY_COLUMNS = ("rank", "component", "points", "start_ns", "end_ns", "peak_allocated_mb", "peak_allocated_ns",
                  "peak_reserved_mb", "peak_reserved_ns", "peak_active_mb")
COMM_RANK_COLUMNS = ("rank", "ops", "elapse_time_ns", "transit_time_ns", "wait_time_ns", "synchronization_time_ns",
                     "idle_time_ns", "wait_time_ratio", "synchronization_time_ratio")
ADVICE_COLUMNS = ("rank", "category", "severity", "title", "text", "step", "metrics", "source", "instance_count",
                  "id")


@dataclass
class Table:
    """Rows (dicts) and the order of their columns."""

    columns: list[str]
    rows: list[dict] = field(default_factory=list)


def _ints(rows: list[dict], names) -> list[dict]:
    """Decimal-string epoch times (the JSON API's spelling) back to integers."""
    for r in rows:
        for n in names:
            if isinstance(r.get(n), str):
                r[n] = int(r[n])
    return rows


def _per_rank(ranks: list[int], rank: int | None, one: Callable[[int], list[dict]]) -> list[dict]:
    out = []
    for r in ranks if rank is None else [rank]:
        out += [{"rank": r, **row} for row in one(r)]
    return out


def steps(db, run_id: str, source: str = "auto", rank: int | None = None) -> Table:
    """The Summary view's step breakdown: one row per (rank, step), times in ns and the three ratios."""
    rows = [r for r in sq.breakdown(db, source) if rank is None or r["rank"] == rank]
    return Table(list(STEP_COLUMNS), [{c: r.get(c) for c in STEP_COLUMNS} for r in rows])


def kernels(db, run_id: str, rank: int | None = None, group_by: str = "name", kind: str = "all",
            step: int | None = None, core: str | None = None, q: str | None = None, sort: str | None = None,
            order: str | None = None) -> Table:
    """The Operator view's kernel groups (count, total, avg, min, max, wait, share of the rank's device time)."""
    oq.parse_group_key(group_by, None)  # an unknown grouping is refused, as the view refuses it
    keys = list(oq.GROUP_KEYS[group_by])
    ranks = [r["rank"] for r in oq.ranks(db) if r["kernels"]]
    rows = _per_rank(ranks, rank, lambda r: oq.groups(db, r, group_by, kind, step, core, q, sort, order,
                                                       ALL_ROWS)["rows"])
    return Table(["rank", *keys, *KERNEL_GROUP_VALUES, "group_key"], rows)


def kernel_instances(db, run_id: str, rank: int | None = None, group_by: str = "type", group_key: str | None = None,
                     kind: str = "all", step: int | None = None, sort: str | None = None,
                     order: str | None = None) -> Table:
    """The Operator view's kernel instances (of one group, or all), each with its timeline slice when traced."""
    columns = [c for c, _ in oq.INSTANCE_COLUMNS]
    ranks = [r["rank"] for r in oq.ranks(db) if r["kernels"]]

    def one(r: int) -> list[dict]:
        rows = oq.instances(db, run_id, r, group_by, group_key, kind, step, sort, order, ALL_ROWS)["rows"]
        return _ints(rows, ("start_ns",))

    return Table(["rank", *columns, "slice_id", "timeline_url"], _per_rank(ranks, rank, one))


def operators(db, run_id: str, rank: int | None = None, group_by: str = "name", q: str | None = None,
              sort: str | None = None, order: str | None = None) -> Table:
    """The Operator view's host torch ops (operator_details.csv), summed per name (or name + shapes, or raw)."""
    if group_by not in oq.TORCH_GROUPS:
        raise QueryError("bad_group_by", f"group_by must be one of {', '.join(oq.TORCH_GROUPS)}")
    keys = list(oq.TORCH_GROUPS[group_by])
    columns = [*keys, "count", *oq.TORCH_TIMES] if keys else ["src_row", "name", "input_shapes", *oq.TORCH_TIMES]
    ranks = [r["rank"] for r in oq.ranks(db) if r["operators"]]
    rows = _per_rank(ranks, rank, lambda r: oq.torch_ops(db, r, group_by, q, sort, order, ALL_ROWS)["rows"])
    return Table(["rank", *columns], rows)


def memory(db, run_id: str, rank: int | None = None) -> Table:
    """The Memory view's components per rank: their peaks of allocated, reserved and active MB and when."""
    ranks = [r["rank"] for r in mq.ranks(db) if r["records"]]
    rows = _per_rank(ranks, rank, lambda r: _ints(mq.overview(db, r)["components"],
                                                  ("start_ns", "end_ns", "peak_allocated_ns", "peak_reserved_ns")))
    return Table(list(MEMORY_COLUMNS), rows)


def memory_allocations(db, run_id: str, rank: int | None = None, q: str | None = None, start_ns: int | None = None,
                       end_ns: int | None = None, at_ns: int | None = None, sort: str | None = None,
                       order: str | None = None) -> Table:
    """The Memory view's operator allocations (operator_memory.csv); ``is_peak`` marks the peak row."""
    columns = [c for c, _ in mq.ALLOCATION_COLUMNS]
    ranks = [r["rank"] for r in mq.ranks(db) if r["allocations"]]

    def one(r: int) -> list[dict]:
        rows = mq.allocations(db, run_id, r, q, sort, order, ALL_ROWS, start_ns, end_ns, at_ns)["rows"]
        return _ints(rows, mq.ALLOCATION_TIMES)

    return Table(["rank", *columns, "is_peak", "timeline_url"], _per_rank(ranks, rank, one))


def communication(db, run_id: str, rank: int | None = None, step: str | None = None, group: str | None = None,
                  op: str | None = None) -> Table:
    """The Communication view's per-rank totals (elapse, transit, wait, synchronization, idle, both ratios) and
    bandwidth per transport (``<transport>_gbps``, ``<transport>_size_mb``)."""
    result = cq.rank_totals(db, step, group, op)
    transports = sorted({t for r in result["rows"] for t in r["bandwidth"]})
    rows = []
    for r in result["rows"]:
        if rank is not None and r["rank"] != rank:
            continue
        row = {c: r.get(c) for c in COMM_RANK_COLUMNS}
        for t in transports:
            bw = r["bandwidth"].get(t) or {}
            row[f"{t.lower()}_gbps"] = bw.get("bandwidth_gbps")
            row[f"{t.lower()}_size_mb"] = bw.get("transit_size_mb")
        rows.append(row)
    extra = [f"{t.lower()}_{m}" for t in transports for m in ("gbps", "size_mb")]
    return Table([*COMM_RANK_COLUMNS, *extra], rows)


def communication_ops(db, run_id: str, rank: int | None = None, step: str | None = None, group: str | None = None,
                      comm_type: str | None = None, q: str | None = None, sort: str | None = None,
                      order: str | None = None) -> Table:
    """The Communication view's op table (every op of every rank, or of one), linked to the timeline."""
    rows = cq.ops(db, run_id, rank, step, group, comm_type, q, sort, order, ALL_ROWS)["rows"]
    return Table([*cq.OP_COLUMNS, "slice_id", "timeline_url"], _ints(rows, ("start_ns",)))


def advice(db, run_id: str, rank: int | None = None) -> Table:
    """The Advice view's findings: of one rank, or of every rank, with the cross-rank ones (``rank`` empty) once.
    ``metrics`` (the numbers a finding rests on) and ``source`` (the table and file they come from) are dicts."""
    first = aq.advice(db, run_id, rank if rank is not None else None)
    findings = list(first["findings"])
    if rank is None:
        for r in first["ranks"]:
            if r != first["rank"]:
                findings += [f for f in aq.advice(db, run_id, r)["findings"] if f["rank"] is not None]
    findings.sort(key=lambda f: (-1 if f["rank"] is None else f["rank"]))
    return Table(list(ADVICE_COLUMNS), [{c: f.get(c) for c in ADVICE_COLUMNS} for f in findings])


# name → (function, its filters and their types): what the export route accepts
TABLES: dict[str, tuple[Callable[..., Table], dict[str, type]]] = {
    "steps": (steps, {"source": str, "rank": int}),
    "kernels": (kernels, {"rank": int, "group_by": str, "kind": str, "step": int, "core": str, "q": str, "sort": str,
                          "order": str}),
    "kernel_instances": (kernel_instances, {"rank": int, "group_by": str, "group_key": str, "kind": str, "step": int,
                                            "sort": str, "order": str}),
    "operators": (operators, {"rank": int, "group_by": str, "q": str, "sort": str, "order": str}),
    "memory": (memory, {"rank": int}),
    "memory_allocations": (memory_allocations, {"rank": int, "q": str, "start_ns": int, "end_ns": int, "at_ns": int,
                                                "sort": str, "order": str}),
    "communication": (communication, {"rank": int, "step": str, "group": str, "op": str}),
    "communication_ops": (communication_ops, {"rank": int, "step": str, "group": str, "comm_type": str, "q": str,
                                              "sort": str, "order": str}),
    "advice": (advice, {"rank": int}),
}
