"""Flatten communication.json and communication_matrix.json into rows (FORMATS.md §5).

These files are small (one entry per HCCL op), so they are parsed with the json module; the rows of every rank
reach DuckDB as one newline-delimited JSON file per table, read with the declared column types (pyarrow's
row builders would import pandas, ~0.4 s of every ingest). Millisecond values become exact integer ns through
``decimal`` (never through a float product).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path

import orjson

from . import jsonfile

_SLOT = re.compile(r"^(?P<op>.*?)-(?P<slot>top1|middle|bottom1|bottom2|bottom3|total)@(?P<group>.*)$")
_TIME_KEYS = {
    "Elapse Time(ms)": "elapse_time_ns", "Transit Time(ms)": "transit_time_ns", "Wait Time(ms)": "wait_time_ns",
    "Synchronization Time(ms)": "synchronization_time_ns", "Idle Time(ms)": "idle_time_ns",
}
TOTAL_KEY = "Total Op Info"


_PLAIN = re.compile(r"(-?)(\d+)(?:\.(\d*))?")
_FAST_DIGITS = 20  # Decimal's context keeps 28 significant digits: up to this many the exact sum agrees with it


def _scaled(value, digits: int) -> int | None:
    """``value`` (a JSON number or numeric text) × 10**digits as an integer, exactly as
    ``int((Decimal(str(value)) * 10**digits).to_integral_value())`` gives it (half to even), or None. Plain decimal
    text is shifted as digits (a thousand ranks' files hold ~10^5 such values); anything else takes Decimal."""
    if value is None or value == "":
        return None
    if type(value) is int and abs(value) < 10 ** _FAST_DIGITS:
        return value * 10 ** digits
    text = repr(value) if type(value) is float else str(value)
    m = _PLAIN.fullmatch(text)
    if m is None or len(m.group(2)) + len(m.group(3) or "") > _FAST_DIGITS:
        try:
            return int((Decimal(text) * 10 ** digits).to_integral_value())
        except (InvalidOperation, ValueError, OverflowError):  # not a number, NaN, Infinity
            return None
    sign, whole, frac = m.group(1), m.group(2), m.group(3) or ""
    n = int(whole + frac[:digits].ljust(digits, "0"))
    rest = frac[digits:].rstrip("0")
    if rest and (rest[0] > "5" or (rest[0] == "5" and (len(rest) > 1 or n % 2))):
        n += 1
    return -n if sign else n


def _ms_to_ns(value) -> int | None:
    return _scaled(value, 6)


def _us_to_ns(value) -> int | None:
    return _scaled(value, 3)


def _num(value) -> float | None:
    try:
        return float(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


@lru_cache(maxsize=4096)
def _step_id(step: str) -> int | None:  # (the same few step names, in every row)
    m = re.search(r"(-?\d+)$", step)
    return int(m.group(1)) if m else None


def _split_key(op_key: str) -> tuple[str, str | None]:
    name, sep, group = op_key.rpartition("@")
    return (name, group) if sep else (op_key, None)


def _load(path: Path | dict) -> dict:
    data = jsonfile.load(path) if isinstance(path, Path) else path
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object keyed by step")
    return data


def communication_rows(path: Path | dict, rank: int) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows for comm_ops, comm_bandwidth and comm_size_distribution, from the file or its parsed content."""
    ops, bws, dists = [], [], []
    for step, by_type in _load(path).items():
        if not isinstance(by_type, dict):
            continue
        for comm_type, entries in by_type.items():
            if not isinstance(entries, dict):  # an empty p2p may be a list
                continue
            for op_key, info in entries.items():
                if not isinstance(info, dict):
                    continue
                is_total = op_key == TOTAL_KEY
                op_name, group = (None, None) if is_total else _split_key(op_key)
                t = info.get("Communication Time Info") or {}
                row = {"rank": rank, "step": step, "step_id": _step_id(step), "comm_type": comm_type,
                       "op_key": op_key, "op_name": op_name, "group_id": group, "is_total": is_total,
                       "start_ns": _us_to_ns(t.get("Start Timestamp(us)"))}
                for src, dst in _TIME_KEYS.items():
                    row[dst] = _ms_to_ns(t.get(src))
                row["wait_time_ratio"] = _num(t.get("Wait Time Ratio"))
                row["synchronization_time_ratio"] = _num(t.get("Synchronization Time Ratio"))
                ops.append(row)
                for transport, bw in (info.get("Communication Bandwidth Info") or {}).items():
                    if not isinstance(bw, dict):
                        continue
                    size, ttime = _num(bw.get("Transit Size(MB)")), _num(bw.get("Transit Time(ms)"))
                    bandwidth, computed = _num(bw.get("Bandwidth(GB/s)")), False
                    if bandwidth is None and size is not None and ttime:
                        bandwidth, computed = round(size / ttime, 4), True
                    dist = bw.get("Size Distribution") or {}
                    bws.append({"rank": rank, "step": step, "step_id": _step_id(step), "comm_type": comm_type,
                                "op_key": op_key, "op_name": op_name, "group_id": group, "is_total": is_total,
                                "transport": transport, "transit_size_mb": size,
                                "transit_time_ns": _ms_to_ns(bw.get("Transit Time(ms)")),
                                "bandwidth_gbps": bandwidth, "bandwidth_computed": computed,
                                "large_packet_ratio": _num(bw.get("Large Packet Ratio")),
                                "size_distribution": dist})
                    for size_key, value in dist.items():
                        count, dur = (value + [None, None])[:2] if isinstance(value, list) else (None, None)
                        dists.append({"rank": rank, "step": step, "comm_type": comm_type, "op_key": op_key,
                                      "is_total": is_total, "transport": transport,
                                      "package_size_mb": _num(size_key),
                                      "count": int(count) if _num(count) is not None else None,
                                      "total_duration_ns": _ms_to_ns(dur)})
    return ops, bws, dists


def matrix_rows(path: Path | dict, rank: int) -> list[dict]:
    rows = []
    for step, by_type in _load(path).items():
        if not isinstance(by_type, dict):
            continue
        for comm_type, entries in by_type.items():
            if not isinstance(entries, dict):
                continue
            for key, links in entries.items():
                if not isinstance(links, dict):
                    continue
                m = _SLOT.match(key)
                op_type, slot, group = (m.group("op"), m.group("slot"), m.group("group")) if m else \
                    (_split_key(key)[0], None, _split_key(key)[1])
                for link, v in links.items():
                    if not isinstance(v, dict):
                        continue
                    src, _, dst = link.partition("-")
                    rows.append({"rank": rank, "step": step, "step_id": _step_id(step), "comm_type": comm_type,
                                 "matrix_key": key, "op_type": op_type, "slot": slot, "group_id": group,
                                 "src_rank": int(src) if src.strip().isdigit() else None,
                                 "dst_rank": int(dst) if dst.strip().isdigit() else None,
                                 "transport_type": v.get("Transport Type"),
                                 "transit_size_mb": _num(v.get("Transit Size(MB)")),
                                 "transit_time_ns": _ms_to_ns(v.get("Transit Time(ms)")),
                                 "bandwidth_gbps": _num(v.get("Bandwidth(GB/s)")),
                                 "op_name": v.get("Op Name")})
    return rows


_COMMON = [("rank", "INTEGER"), ("step", "VARCHAR"), ("step_id", "BIGINT"), ("comm_type", "VARCHAR")]
COLUMNS = {
    "comm_ops": _COMMON + [
        ("op_key", "VARCHAR"), ("op_name", "VARCHAR"), ("group_id", "VARCHAR"), ("is_total", "BOOLEAN"),
        ("start_ns", "BIGINT"), ("elapse_time_ns", "BIGINT"), ("transit_time_ns", "BIGINT"),
        ("wait_time_ns", "BIGINT"), ("synchronization_time_ns", "BIGINT"), ("idle_time_ns", "BIGINT"),
        ("wait_time_ratio", "DOUBLE"), ("synchronization_time_ratio", "DOUBLE")],
    "comm_bandwidth": _COMMON + [
        ("op_key", "VARCHAR"), ("op_name", "VARCHAR"), ("group_id", "VARCHAR"), ("is_total", "BOOLEAN"),
        ("transport", "VARCHAR"), ("transit_size_mb", "DOUBLE"), ("transit_time_ns", "BIGINT"),
        ("bandwidth_gbps", "DOUBLE"), ("bandwidth_computed", "BOOLEAN"), ("large_packet_ratio", "DOUBLE"),
        ("size_distribution", "JSON")],
    "comm_size_distribution": [
        ("rank", "INTEGER"), ("step", "VARCHAR"), ("comm_type", "VARCHAR"), ("op_key", "VARCHAR"),
        ("is_total", "BOOLEAN"), ("transport", "VARCHAR"), ("package_size_mb", "DOUBLE"), ("count", "BIGINT"),
        ("total_duration_ns", "BIGINT")],
    "comm_matrix": _COMMON + [
        ("matrix_key", "VARCHAR"), ("op_type", "VARCHAR"), ("slot", "VARCHAR"), ("group_id", "VARCHAR"),
        ("src_rank", "INTEGER"), ("dst_rank", "INTEGER"), ("transport_type", "VARCHAR"),
        ("transit_size_mb", "DOUBLE"), ("transit_time_ns", "BIGINT"), ("bandwidth_gbps", "DOUBLE"),
        ("op_name", "VARCHAR")],
}


def create_table(cur, name: str, rows: list[dict], workdir: Path | None) -> None:
    """Create table ``name`` (of ``COLUMNS``) holding ``rows``, in order."""
    cols = COLUMNS[name]
    if not rows:
        cur.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})")
        return
    path = workdir / f"{name}.ndjson"
    with open(path, "wb") as fh:
        fh.writelines(orjson.dumps(row) + b"\n" for row in rows)
    spec = "{" + ", ".join(f"{c}: '{t}'" for c, t in cols) + "}"
    cur.execute(f"CREATE TABLE {name} AS SELECT {', '.join(c for c, _ in cols)} "
                f"FROM read_json(?, format = 'newline_delimited', columns = {spec})", [str(path)])
