"""The rest of msServiceProfiler's parsed output: forward passes, queue sizes, PD disaggregation, the coordinator's
routing, and ``profiler.db``'s latency curves (``ingest.readers.serving`` reads requests, batches and KV cache).

Each file fills one list of ``Serving.more`` (the ``serving_*`` table of the same name, columns in docs/schema.md;
source columns and units in docs/formats.md):

* ``forward.csv`` → ``forward``: one model forward pass per row and card (``prof_id``), its DP rank and host;
* ``request_status.csv`` → ``request_status``: a queue's size (``waiting``, ``running``, ``swapped``) at a time;
* ``pd_split_communication.csv`` → ``pd_requests``: a request's path through a prefill and a decode instance;
* ``pd_split_kvcache.csv`` → ``pd_kvcache``: a KV-cache transfer from the prefill to the decode instance;
* ``coordinator.csv`` → ``coordinator``: requests routed to each instance per 5 s window;
* ``profiler.db``'s ``first_token_latency``, ``req_latency``, ``prefill_gen_speed``, ``decode_gen_speed`` →
  ``curves`` (the profiler's own running avg / p50 / p90 / p99, for comparison with ours).

Each CSV is preferred to ``profiler.db``'s table of the same rows. Some columns hold a wall clock written as local
time without a zone (``start_datetime``, coordinator's ``time``, the curve tables' ``timestamp``): they become epoch
ns with the zone offset read from a row that has both a wall clock and a numeric time (``local_offset_ns``); with no
such row they are read as UTC, and a warning says so.
"""

from __future__ import annotations

import csv
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from .serving import (
    NS_PER,
    Serving,
    _columns,
    _csv_rows,
    _db_rows,
    _float,
    _int,
    _num,
    _pick,
    _Rows,
    _time,
    derive,
    read_main,
)

FILES = {"forward": "forward.csv", "request_status": "request_status.csv", "pd_requests": "pd_split_communication.csv",
         "pd_kvcache": "pd_split_kvcache.csv", "coordinator": "coordinator.csv"}
DB_TABLES = {"forward": "forward", "request_status": "request_status", "pd_requests": "pd_split_communication",
             "pd_kvcache": "pd_split_kvcache", "coordinator": "coordinator"}
CURVE_TABLES = ("first_token_latency", "req_latency", "prefill_gen_speed", "decode_gen_speed")
QUEUES = ("waiting", "running", "swapped", "pending")
_CLOCK = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.:](\d{1,9}))?$")
ZONE_STEP_NS = 15 * 60 * 1_000_000_000  # zone offsets are whole quarter hours


def wall_ns(text) -> int | None:
    """A wall clock ``YYYY-MM-DD HH:MM:SS[.:]ffffff`` read as UTC, in ns; None when it is not one."""
    m = _CLOCK.match(str(text or "").strip())
    if not m:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    base = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=UTC)
    return int(base.timestamp()) * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])


def local_offset_ns(folder: Path) -> int | None:
    """Epoch minus wall clock (the zone the profiler wrote its wall clocks in), from the first row of a file that
    has both (``request.csv``'s or ``request_status.csv``'s ``start_datetime`` beside ``start_time(ms)`` /
    ``timestamp(ms)``, ``forward.csv``'s beside ``start_time(ms)``), rounded to a quarter hour."""
    for name, numeric in (("request.csv", ("start_time",)), ("request_status.csv", ("timestamp",)),
                          ("forward.csv", ("start_time",))):
        path = folder / name
        if not path.is_file():
            continue
        try:
            header, rows = _csv_rows(path)
        except (OSError, csv.Error):
            continue
        cols = _columns(header, None)
        for row in rows[:50]:
            try:
                epoch = _time(row, cols, *numeric)
            except ValueError:
                continue
            wall = wall_ns(row.get("start_datetime"))
            if epoch is not None and wall is not None:
                return round((epoch - wall) / ZONE_STEP_NS) * ZONE_STEP_NS
    return None


class _Clock:
    """Turns wall clocks into epoch ns with the folder's offset, warning once per file when none was found."""

    def __init__(self, offset: int | None):
        self.offset, self.warned = offset, set()

    def ns(self, text, log: _Rows) -> int | None:
        wall = wall_ns(text)
        if wall is None:
            return None
        if self.offset is None and log.display not in self.warned:
            self.warned.add(log.display)
            log.data.warnings.append((log.display, "wall-clock times read as UTC: no file of the folder has a "
                                      "numeric time beside its start_datetime to tell the zone"))
        return wall + (self.offset or 0)


def _text(row: dict, key: str) -> str | None:
    v = row.get(key)
    return None if v in (None, "", "<NA>", "nan", "None") else str(v).strip()


def _each(rows, one, cols, log: _Rows, clock: _Clock) -> list[dict]:
    """``one(row, cols, log, clock)`` over the rows (a record, or a list of them), numbered from 1 in ``src_row``;
    a row it cannot read is left out with a warning naming it."""
    out = []
    for i, row in enumerate(rows, 1):
        try:
            got = one(row, cols, log, clock)
        except (ValueError, TypeError) as exc:
            log.warn(f"row {i} left out: {exc}")
            continue
        out.extend({"src_row": i, **rec} for rec in (got if isinstance(got, list) else [got]))
    return out


def _forward(row, cols, log: _Rows, clock: _Clock) -> dict:
    # an older exporter writes the wall clock as start_time / end_time, without a unit
    start, end = _numeric_time(row, cols, "start_time"), _numeric_time(row, cols, "end_time")
    if start is None:
        start = clock.ns(row.get("start_datetime") or row.get("start_time"), log)
    if end is None:
        end = clock.ns(row.get("end_datetime") or row.get("end_time"), log)
    dur = _time(row, cols, "during_time")
    if start is None:
        raise ValueError("no start time")
    if end is None and dur is not None:
        end = start + dur
    return {"name": _text(row, "name"), "start_ns": start, "end_ns": end,
            "dur_ns": dur if dur is not None else (end - start if end is not None else None),
            "bubble_ns": _time(row, cols, "bubble_time"), "batch_size": _num(row, cols, "batch_size"),
            "batch_type": _text(row, "batch_type"), "forward_iter": _num(row, cols, "forward_iter"),
            "dp_rank": _text(row, "dp_rank"), "prof_id": _text(row, "prof_id"), "hostname": _text(row, "hostname")}


def _numeric_time(row: dict, cols: dict, name: str) -> int | None:
    """A time column with a unit, or None when it is absent, unit-less or a wall clock (read by ``_Clock``)."""
    got = _pick(row, cols, name)
    if got is None or not got[1] or wall_ns(got[0]) is not None:
        return None
    return _time(row, cols, name)


def _request_status(row, cols, log: _Rows, clock: _Clock) -> list[dict]:
    """One record per queue size: the exporter writes one of ``waiting`` / ``running`` / ``swapped`` per row (the
    others empty); the database's older shapes hold ``WAITING`` / ``RUNNING`` / ``PENDING`` columns together."""
    ts = _numeric_time(row, cols, "timestamp")
    if ts is None:
        ts = clock.ns(row.get("start_datetime") or row.get("timestamp"), log)
    if ts is None:
        raise ValueError("no time")
    sizes = [(q, _num(row, cols, q)) for q in QUEUES]
    if _text(row, "status") and "QueueSize=" in row:  # the database's newer shape: one status per row
        sizes = [(str(row["status"]).strip().lower(), _int(row["QueueSize="]))]
    return [{"ts_ns": ts, "hostuid": _text(row, "hostuid"), "pid": _text(row, "pid"), "queue": queue, "size": size}
            for queue, size in sizes if size is not None]


def _pd_requests(row, cols, log: _Rows, clock: _Clock) -> dict:
    rid = _text(row, "rid")
    if rid is None:
        raise ValueError("no rid")
    return {"rid": rid, "http_req_ns": _time(row, cols, "http_req_time"),
            "send_ns": _time(row, cols, "send_request_time"),
            "send_succ_ns": _time(row, cols, "send_request_succ_time"),
            "prefill_res_ns": _time(row, cols, "prefill_res_time"),
            # the exporter's own spelling ``requset_end_time`` in some versions
            "end_ns": _time(row, cols, "request_end_time", "requset_end_time")}


def _pd_kvcache(row, cols, log: _Rows, clock: _Clock) -> dict:
    start, end = _time(row, cols, "start_time"), _time(row, cols, "end_time")
    dur = _time(row, cols, "during_time")
    if start is None:
        raise ValueError("no start time")
    return {"rid": _text(row, "rid"), "rank": _text(row, "rank"), "seq_len": _num(row, cols, "seq_len"),
            "start_ns": start, "end_ns": end if end is not None else (start + dur if dur is not None else None),
            "dur_ns": dur if dur is not None else (end - start if end is not None else None)}


def _coordinator(row, cols, log: _Rows, clock: _Clock) -> dict:
    ts = clock.ns(row.get("time"), log)
    if ts is None:
        raise ValueError(f"time is not a wall clock: {str(row.get('time'))[:30]!r}")
    return {"ts_ns": ts, "address": _text(row, "address"), "node_type": _text(row, "node_type"),
            **{k: _num(row, cols, k) for k in ("add_count", "end_count", "running_count")}}


def _curve_row(row, cols, log: _Rows, clock: _Clock) -> dict:
    return {"ts_ns": clock.ns(row.get("timestamp"), log), "ts_text": _text(row, "timestamp"),
            **{k: _num(row, cols, k, kind=_float) for k in ("avg", "p50", "p90", "p99")}}


READERS = {"forward": _forward, "request_status": _request_status, "pd_requests": _pd_requests,
           "pd_kvcache": _pd_kvcache, "coordinator": _coordinator}


def read(folder: Path, source: str) -> Serving:
    """Every serving table of one output folder (each from its CSV, else from ``profiler.db``), derived."""
    data, db_tables = read_main(folder, source)
    read_more(folder, data, db_tables)
    derive(data)
    return data


def read_more(folder: Path, data: Serving, db_tables: set[str]) -> None:
    """Fill ``data.more`` from the folder's other files (each from its CSV, else from ``profiler.db``)."""
    source, db = data.source, folder / "profiler.db"
    clock = _Clock(local_offset_ns(folder))
    prefix = f"{source}/" if source != "." else ""
    for kind, fill in READERS.items():
        path, table = folder / FILES[kind], DB_TABLES.get(kind)
        display = prefix + path.name
        try:
            if path.is_file():
                header, rows = _csv_rows(path)
                cols, size = _columns(header, None), path.stat().st_size
            elif table and table in db_tables:
                header, rows = _db_rows(db, table)
                cols, size, display = _columns(header, NS_PER["ms"]), 0, f"{prefix}profiler.db:{table}"
            else:
                continue
        except (OSError, sqlite3.Error, csv.Error) as exc:
            data.warnings.append((display, f"not loaded: {exc}"))
            continue
        data.more[kind] = _each(rows, fill, cols, _Rows(data, display), clock)
        data.files.append((display, f"serving_{kind}", size or db.stat().st_size, len(rows)))
    for curve in CURVE_TABLES:
        if curve not in db_tables:
            continue
        display = f"{prefix}profiler.db:{curve}"
        try:
            header, rows = _db_rows(db, curve)
        except sqlite3.Error as exc:
            data.warnings.append((display, f"not loaded: {exc}"))
            continue
        recs = _each(rows, _curve_row, _columns(header, None), _Rows(data, display), clock)
        data.more.setdefault("curves", []).extend({"curve": curve, **rec} for rec in recs)
        data.files.append((display, "serving_curves", db.stat().st_size, len(rows)))

