"""analysis.db of a db export (FORMATS.md §7.3) -> ``step_trace`` and the communication rows.

    StepTraceTime          -> step_trace (µs -> exact ns), as step_trace_time.csv gives it
    CommAnalyzerTime       -> comm_ops (one row per operator; ms -> ns, start µs -> ns)
    CommAnalyzerBandwidth  -> comm_bandwidth (one row per operator and transport) and comm_size_distribution (one
                              per packet size; the db's all-zero row of a transport without traffic is no entry)
    CommAnalyzerMatrix     -> comm_matrix

The db holds no "Total Op Info" rows (communication.json has them), so none are made. The wait and
synchronization ratios are not stored either; they follow communication.json's definition
(wait / (wait + transit), sync / (sync + transit), 4 decimals). The tables are small: they are read as Python
values and converted through ``decimal`` (never through a float product).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from ..columns import insert_columns
from . import sqlitedb
from .dbsource import ANALYSIS_TABLES

_SLOT = re.compile(r"^(?P<op>.*?)-(?P<slot>top1|middle|bottom1|bottom2|bottom3|total)$")
STEP_COLUMNS = ("computing", "communication_not_overlapped", "overlapped", "communication", "free", "stage",
                "bubble", "communication_not_overlapped_and_exclude_receive", "preparing")


def _scaled(value, factor: int) -> int | None:
    """A number (or numeric text) in µs (factor 1000) or ms (10**6) as whole ns, rounded once."""
    if value is None or value == "" or isinstance(value, bytes):
        return None
    try:
        return int((Decimal(repr(value) if isinstance(value, float) else str(value).strip()) * factor)
                   .to_integral_value())
    except (InvalidOperation, ValueError):
        return None


def _num(value) -> float | None:
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


def _int(value) -> int | None:
    number = _num(value)
    return int(number) if number is not None and number.is_integer() else None


def _step_id(step) -> int | None:
    m = re.search(r"(-?\d+)$", str(step or ""))
    return int(m.group(1)) if m else None


def _ratio(part: int | None, transit: int | None) -> float | None:
    if part is None or transit is None or part + transit == 0:
        return None
    return round(part / (part + transit), 4)


def read(con, present: dict[str, str], rank: int) -> tuple[dict[str, list[dict]], dict[str, sqlitedb.Copied]]:
    """Rows of ``step_trace`` and of the comm tables, keyed by table; and what was read of each source table."""
    raw, copied = {}, {}
    for key, (table, spec) in ANALYSIS_TABLES.items():
        raw[key], copied[key] = sqlitedb.read_rows(con, present, table, spec)
    out = {"step_trace": [], "comm_ops": [], "comm_bandwidth": [], "comm_size_distribution": [], "comm_matrix": []}
    for i, r in enumerate(raw["step_trace_time"], start=1):
        row = {"rank": rank, "src_row": i, "device_id": _int(r["device_id"]), "step": _int(r["step"])}
        row.update({f"{c}_ns": _scaled(r[c], 1000) for c in STEP_COLUMNS})
        out["step_trace"].append(row)
    for r in raw["comm_time"]:
        times = {k: _scaled(r[k], 1_000_000) for k in ("elapse_time", "transit_time", "wait_time",
                                                        "synchronization_time", "idle_time")}
        out["comm_ops"].append({
            **_op_key(r, rank), "start_ns": _scaled(r["start_timestamp"], 1000),
            **{f"{k}_ns": v for k, v in times.items()},
            "wait_time_ratio": _ratio(times["wait_time"], times["transit_time"]),
            "synchronization_time_ratio": _ratio(times["synchronization_time"], times["transit_time"])})
    groups: dict[tuple, dict] = {}
    for r in raw["comm_bandwidth"]:
        key = (r["step"], r["type"], r["hccl_op_name"], r["group_name"], r["transport_type"])
        bw = groups.get(key)
        if bw is None:
            bw = groups[key] = {
                **_op_key(r, rank), "transport": r["transport_type"], "transit_size_mb": _num(r["transit_size"]),
                "transit_time_ns": _scaled(r["transit_time"], 1_000_000), "bandwidth_gbps": _num(r["bandwidth"]),
                "bandwidth_computed": False, "large_packet_ratio": _num(r["large_packet_ratio"]),
                "size_distribution": {}}
            out["comm_bandwidth"].append(bw)
        size, count = _num(r["package_size"]), _num(r["count"])
        if not size and not count:
            continue
        bw["size_distribution"][repr(size)] = [_int(r["count"]), _num(r["total_duration"])]
        out["comm_size_distribution"].append({
            "rank": rank, "step": r["step"], "comm_type": r["type"], "op_key": bw["op_key"], "is_total": False,
            "transport": r["transport_type"], "package_size_mb": size, "count": _int(r["count"]),
            "total_duration_ns": _scaled(r["total_duration"], 1_000_000)})
    for r in raw["comm_matrix"]:
        m = _SLOT.match(r["hccl_op_name"] or "")
        out["comm_matrix"].append({
            "rank": rank, "step": r["step"], "step_id": _step_id(r["step"]), "comm_type": r["type"],
            "matrix_key": f"{r['hccl_op_name']}@{r['group_name']}",
            "op_type": m.group("op") if m else r["hccl_op_name"], "slot": m.group("slot") if m else None,
            "group_id": r["group_name"], "src_rank": _int(r["src_rank"]), "dst_rank": _int(r["dst_rank"]),
            "transport_type": r["transport_type"], "transit_size_mb": _num(r["transit_size"]),
            "transit_time_ns": _scaled(r["transit_time"], 1_000_000), "bandwidth_gbps": _num(r["bandwidth"]),
            "op_name": r["op_name"] or None})
    return out, copied


def _op_key(r: dict, rank: int) -> dict:
    return {"rank": rank, "step": r["step"], "step_id": _step_id(r["step"]), "comm_type": r["type"],
            "op_key": f"{r['hccl_op_name']}@{r['group_name']}", "op_name": r["hccl_op_name"],
            "group_id": r["group_name"], "is_total": False}


STEP_TRACE_TYPES = {"rank": "INTEGER", "src_row": "INTEGER", "device_id": "BIGINT", "step": "BIGINT",
                    **{f"{c}_ns": "BIGINT" for c in STEP_COLUMNS}}


def create_step_trace(cur, out: str, ranks: list[list[dict]]) -> None:
    """``{out}step_trace`` from the rows of each rank (the device_id column only when a rank's db has it, as with
    the CSV: in the place a union of the ranks' own tables by name would give it)."""
    names: list[str] = []
    for rows in ranks:
        have = [n for n in STEP_TRACE_TYPES if n != "device_id" or any(r["device_id"] is not None for r in rows)]
        names += [n for n in have if n not in names]
    cur.execute(f"CREATE OR REPLACE TABLE {out}step_trace ({', '.join(f'{n} {STEP_TRACE_TYPES[n]}' for n in names)})")
    insert_columns(cur, f"{out}step_trace", [[r.get(n) for rows in ranks for r in rows] for n in names])
