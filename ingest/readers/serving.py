"""msServiceProfiler's parsed output (``ms_service_profiler.parse``): a serving run's requests, batches and KV cache.

Not a rank's files: a folder holding ``request.csv``, ``batch.csv``, ``kvcache.csv`` and/or ``profiler.db``
(alone, or beside the ``*_ascend_pt`` folders of the same run) describes the whole service, so its rows go to the
run-level ``serving_*`` tables (``ingest.serving`` writes them; columns in docs/schema.md, source columns and units
in docs/formats.md). Its ``chrome_tracing.json`` is a plain Chrome trace, read by the ``chrome`` reader when the
folder is opened alone; its other files (forward passes, queues, PD disaggregation) by ``serving_more``, whose
``read`` is the entry point.

Times: a CSV column's unit is read from its header (``(ms)``, ``(microsecond)``, ``(us)``, ``(ns)``) and converted
exactly to integer ns; ``profiler.db``'s tables keep the source names without units and hold ms (the exporter
divides its µs by 1000 before writing both). A CSV is preferred to the database's table of the same rows. A row
that cannot be read is left out with a warning naming the file and the row.
"""

from __future__ import annotations

import ast
import csv
import re
import sqlite3
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

CSV_FILES = ("request.csv", "batch.csv", "kvcache.csv")
DB_FILE = "profiler.db"
TRACE_FILE = "chrome_tracing.json"
# the output's other files (``serving_more`` reads all but spec_decode.csv; kept out of "unsupported" warnings)
OTHER_FILES = ("forward.csv", "pd_split_communication.csv", "pd_split_kvcache.csv", "coordinator.csv",
               "request_status.csv", "spec_decode.csv")
NS_PER = {"ns": 1, "us": 1_000, "microsecond": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
SCHEDULE_NAMES = ("BatchSchedule", "batchFrameworkProcessing", "Schedule")
PHASES = {0: "prefill", 1: "decode"}
_UNIT = re.compile(r"^(.*?)\((ns|us|microsecond|ms|s)\)$")
MAX_WARNINGS_PER_FILE = 20


@dataclass
class Serving:
    """The rows of one serving output folder (``source``: its path relative to the run's root)."""

    source: str
    requests: list[dict] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)
    batch_requests: list[dict] = field(default_factory=list)
    kvcache: list[dict] = field(default_factory=list)
    files: list[tuple[str, str, int, int]] = field(default_factory=list)  # (file, kind, size_bytes, rows)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (file, message)
    more: dict[str, list[dict]] = field(default_factory=dict)  # the other files' rows (readers.serving_more)


def _header(path: Path) -> list[str]:
    try:
        with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:
            return next(csv.reader(f), [])
    except OSError:
        return []


def _db_tables(path: Path) -> set[str]:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        finally:
            con.close()
    except sqlite3.Error:
        return set()


def is_serving_dir(folder: Path) -> bool:
    """Whether ``folder`` holds msServiceProfiler's parsed output (told by the files' columns or tables)."""
    if "http_rid" in _header(folder / "request.csv") or "res_list" in _header(folder / "batch.csv"):
        return True
    if "device_kvcache_left" in _header(folder / "kvcache.csv") or "forward_iter" in _header(folder / "forward.csv"):
        return True
    db = folder / DB_FILE
    return db.is_file() and bool({"request", "batch"} & _db_tables(db)) and "data_table" in _db_tables(db)


def is_serving_file(path: Path) -> bool:
    """A file of a serving output folder (discovery neither warns about it nor opens it as a rank)."""
    return path.name in (*CSV_FILES, DB_FILE, *OTHER_FILES) and is_serving_dir(path.parent)


def to_ns(value, unit_ns: int) -> int | None:
    """A number in the unit into exact integer ns (no float on the way); None for an empty cell."""
    if value is None:
        return None
    text = str(value).strip()
    if text in ("", "nan", "NaN", "None", "N/A"):
        return None
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not a number: {text[:40]!r}") from None
    if not number.is_finite():
        raise ValueError(f"not a number: {text[:40]!r}")
    return int((number * unit_ns).to_integral_value())


def _int(value) -> int | None:
    ns = to_ns(value, 1)
    return ns


def _float(value) -> float | None:
    text = "" if value is None else str(value).strip()
    if text in ("", "nan", "NaN", "None", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"not a number: {text[:40]!r}") from None


def _columns(header: list[str], db_unit: int | None) -> dict[str, tuple[str, int]]:
    """Source column → (base name, ns per unit); a database column has no unit in its name: ``db_unit``."""
    out = {}
    for col in header:
        m = _UNIT.match(col.strip())
        if m:
            out[col] = (m.group(1).strip().lower(), NS_PER[m.group(2)])
        else:
            out[col] = (col.strip().lower(), db_unit or 0)
    return out


def _pick(row: dict, cols: dict, *names: str) -> tuple[object, int] | None:
    """The first of ``names`` (base names, lowercase) the row has: (value, ns per unit)."""
    for name in names:
        for col, (base, unit) in cols.items():
            if base == name and col in row:
                return row[col], unit
    return None


def _time(row: dict, cols: dict, *names: str) -> int | None:
    got = _pick(row, cols, *names)
    if got is None:
        return None
    value, unit = got
    if not unit:
        raise ValueError(f"no unit for {names[0]}")
    return to_ns(value, unit)


def _num(row: dict, cols: dict, *names: str, kind=_int):
    got = _pick(row, cols, *names)
    return None if got is None else kind(got[0])


def _res_list(text) -> list[tuple[str, int | None, str | None, int | None]]:
    """``res_list``: the scheduler's entries, ``[{'rid': …, 'iter': …, 'type': 0|1, 'num_scheduled_tokens': …}]``
    (current) or plain request ids (older): (rid, iter, phase, tokens)."""
    if text is None or str(text).strip() in ("", "[]", "nan", "None"):
        return []
    try:
        items = ast.literal_eval(str(text))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(f"res_list is not a list: {str(text)[:60]!r}") from None
    if not isinstance(items, (list, tuple)):
        items = [items]
    out = []
    for item in items:
        if isinstance(item, dict):
            if item.get("rid") is None:
                continue
            typ = item.get("type")
            tokens = item.get("num_scheduled_tokens")
            out.append((str(item["rid"]), item.get("iter") if isinstance(item.get("iter"), int) else None,
                        PHASES.get(typ) if isinstance(typ, int) else None,
                        tokens if isinstance(tokens, int) else None))
        elif isinstance(item, (str, int)):
            out.append((str(item), None, None, None))
    return out


class _Rows:
    """Reads one file's rows as dicts (CSV or a database table), counting warnings per file."""

    def __init__(self, data: Serving, display: str):
        self.data, self.display, self.count = data, display, 0

    def warn(self, message: str) -> None:
        self.count += 1
        if self.count <= MAX_WARNINGS_PER_FILE:
            self.data.warnings.append((self.display, message))
        elif self.count == MAX_WARNINGS_PER_FILE + 1:
            self.data.warnings.append((self.display, "more rows could not be read; their warnings are left out"))


def _csv_rows(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _db_rows(path: Path, table: str) -> tuple[list[str], list[dict]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cur = con.execute(f'SELECT * FROM "{table}"')  # table: one of our constant names, never user input
        names = [d[0] for d in cur.description]
        return names, [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()


def _requests(data: Serving, rows: list[dict], cols: dict, log: _Rows) -> None:
    for i, row in enumerate(rows, 1):
        try:
            rid = str(row.get("http_rid") or "").strip()
            if not rid:
                raise ValueError("no http_rid")
            rec = {"src_row": i, "rid": rid,
                   "arrival_ns": _time(row, cols, "start_time", "start_time_httpreq"),
                   "input_tokens": _num(row, cols, "recv_token_size"),
                   "output_tokens": _num(row, cols, "reply_token_size"),
                   "e2e_ns": _time(row, cols, "execution_time"),
                   "queue_ns": _time(row, cols, "queue_wait_time"),
                   "ttft_ns": _time(row, cols, "first_token_latency"),
                   "cache_hit_rate": _num(row, cols, "cache_hit_rate", kind=_float)}
        except (ValueError, TypeError) as exc:
            log.warn(f"row {i} left out: {exc}")
            continue
        data.requests.append(rec)


def _batches(data: Serving, rows: list[dict], cols: dict, log: _Rows) -> None:
    recs = []
    for i, row in enumerate(rows, 1):
        try:
            name = str(row.get("name") or "").strip()
            start, end = _time(row, cols, "start_time"), _time(row, cols, "end_time")
            dur = _time(row, cols, "during_time")
            if start is None:
                raise ValueError("no start time")
            if end is None and dur is not None:
                end = start + dur
            items = _res_list(row.get("res_list"))
            rec = {"src_row": i, "name": name, "start_ns": start, "end_ns": end,
                   "dur_ns": dur if dur is not None else (end - start if end is not None else None),
                   "batch_type": (str(row.get("batch_type")).strip() or None) if row.get("batch_type") else None,
                   "batch_size": _num(row, cols, "batch_size", "total_batch_size"),
                   "prefill_size": _num(row, cols, "prefill_batch_size"),
                   "decode_size": _num(row, cols, "decode_batch_size"),
                   "prefill_tokens": _num(row, cols, "prefill_scheduled_tokens"),
                   "decode_tokens": _num(row, cols, "decode_scheduled_tokens"),
                   "total_tokens": _num(row, cols, "total_scheduled_tokens"),
                   "prof_id": None if row.get("prof_id") in (None, "") else str(row.get("prof_id")),
                   "dp_rank": None if row.get("dp_rank") in (None, "", "<NA>") else str(row.get("dp_rank")),
                   "_items": items}
        except (ValueError, TypeError) as exc:
            log.warn(f"row {i} left out: {exc}")
            continue
        recs.append(rec)
    recs.sort(key=lambda r: (r["start_ns"], r["src_row"]))
    has_schedule = any(r["name"] in SCHEDULE_NAMES for r in recs)
    batch_id, linked = 0, set()
    for rec in recs:
        items = rec.pop("_items")
        # a batch is formed (BatchSchedule) then run (modelExec): the run rows share the batch formed before them,
        # as the exporter's batch_exec table numbers them
        if rec["name"] in SCHEDULE_NAMES or not has_schedule or batch_id == 0:
            batch_id += 1
        rec["batch_id"] = batch_id
        rec["phase"] = "schedule" if rec["name"] in SCHEDULE_NAMES else "exec"
        if rec["batch_size"] is None and items:
            rec["batch_size"] = len(items)
        typed = [p for _, _, p, _ in items if p]
        if rec["prefill_size"] is None and typed:
            rec["prefill_size"], rec["decode_size"] = typed.count("prefill"), typed.count("decode")
        elif rec["prefill_size"] is None and rec["batch_type"] and rec["batch_size"] is not None:
            kind = rec["batch_type"].lower()
            if kind in ("prefill", "decode"):  # one kind for the whole batch: its size is that kind's
                rec["prefill_size"] = rec["batch_size"] if kind == "prefill" else 0
                rec["decode_size"] = rec["batch_size"] if kind == "decode" else 0
        data.batches.append(rec)
        if batch_id in linked:
            continue
        linked.add(batch_id)
        default = rec["batch_type"].lower() if rec["batch_type"] and rec["batch_type"].lower() in (
            "prefill", "decode") else None
        for rid, it, phase, tokens in items:
            data.batch_requests.append({"batch_id": batch_id, "rid": rid, "iter": it, "phase": phase or default,
                                        "tokens": tokens})


def _kvcache(data: Serving, rows: list[dict], cols: dict, log: _Rows) -> None:
    time_col = _pick(rows[0], cols, "timestamp", "start_time") if rows else None
    if rows and (time_col is None or not time_col[1]):
        # profiler.db's kvcache has only a wall clock cut to the second; a CSV time without a unit is not guessed
        log.warn(f"{len(rows)} rows not loaded: no time column with a unit (kvcache.csv's timestamp(ms) or "
                 "start_time(microsecond))")
        return
    for i, row in enumerate(rows, 1):
        try:
            free = _num(row, cols, "device_kvcache_left", "free_blocks")
            total = _num(row, cols, "total_blocks")
            used = _num(row, cols, "used_blocks")
            if used is None and total is not None and free is not None:
                used = total - free
            rec = {"src_row": i, "ts_ns": _time(row, cols, "timestamp", "start_time"),
                   "rid": None if row.get("rid") in (None, "") else str(row.get("rid")),
                   "name": str(row.get("name") or "") or None, "free_blocks": free, "used_blocks": used,
                   "total_blocks": total, "usage_rate": _num(row, cols, "kvcache_usage_rate", kind=_float)}
            if rec["ts_ns"] is None:
                raise ValueError("no time")
        except (ValueError, TypeError) as exc:
            log.warn(f"row {i} left out: {exc}")
            continue
        data.kvcache.append(rec)


READERS = {"request": _requests, "batch": _batches, "kvcache": _kvcache}


def read_main(folder: Path, source: str) -> tuple[Serving, set[str]]:
    """The request, batch and kvcache tables of one output folder (each from its CSV, else from ``profiler.db``),
    and the names of the database's tables; ``serving_more.read`` reads the rest and derives."""
    data = Serving(source=source)
    db = folder / DB_FILE
    db_tables = _db_tables(db) if db.is_file() else set()
    for kind, fill in READERS.items():
        path = folder / f"{kind}.csv"
        display = f"{source}/{path.name}" if source != "." else path.name
        try:
            if path.is_file():
                header, rows = _csv_rows(path)
                cols = _columns(header, None)
                file, size = path, path.stat().st_size
            elif kind in db_tables:
                header, rows = _db_rows(db, kind)
                cols = _columns(header, NS_PER["ms"])
                display = f"{source}/{DB_FILE}:{kind}" if source != "." else f"{DB_FILE}:{kind}"
                file, size = db, 0
            else:
                continue
        except (OSError, sqlite3.Error, csv.Error) as exc:
            data.warnings.append((display, f"not loaded: {exc}"))
            continue
        log = _Rows(data, display)
        fill(data, rows, cols, log)
        data.files.append((display, f"serving_{kind}", size or file.stat().st_size, len(rows)))
    return data, db_tables


def derive(data: Serving) -> None:
    """What a request's row does not say: TTFT from its first prefill batch when the file has no first-token
    column, the prefill and decode spans, TPOT, the end, and whether it was preempted (prefilled again after it
    had decoded: its KV cache was dropped and recomputed). A request in a batch that started before it arrived is
    impossible (the files' clocks disagree): warned about, and a TTFT that would come out negative is not derived."""
    ends: dict[int, int] = {}
    starts: dict[int, int] = {}
    for b in data.batches:
        if b["end_ns"] is not None:
            ends[b["batch_id"]] = max(ends.get(b["batch_id"], b["end_ns"]), b["end_ns"])
        if b["start_ns"] is not None:
            starts[b["batch_id"]] = min(starts.get(b["batch_id"], b["start_ns"]), b["start_ns"])
    first_prefill: dict[str, int] = {}
    first_batch: dict[str, int] = {}
    decoded: set[str] = set()
    preempted: set[str] = set()
    for link in sorted(data.batch_requests, key=lambda x: x["batch_id"]):
        rid = link["rid"]
        if link["batch_id"] in starts:
            first_batch[rid] = min(first_batch.get(rid, starts[link["batch_id"]]), starts[link["batch_id"]])
        if link["phase"] == "prefill":
            if rid in decoded:
                preempted.add(rid)
            if rid not in first_prefill and link["batch_id"] in ends:
                first_prefill[rid] = ends[link["batch_id"]]
        elif link["phase"] == "decode":
            decoded.add(rid)
    early: list[int] = []  # how long before its arrival each impossible request's first batch started
    not_derived = negative_in_file = 0
    for r in data.requests:
        r["preempted"] = r["rid"] in preempted
        r["ttft_source"] = "file" if r["ttft_ns"] is not None else None
        if r["ttft_ns"] is not None and r["ttft_ns"] < 0:
            negative_in_file += 1
        if r["arrival_ns"] is not None and r["rid"] in first_batch and first_batch[r["rid"]] < r["arrival_ns"]:
            early.append(r["arrival_ns"] - first_batch[r["rid"]])
        if r["ttft_ns"] is None and r["arrival_ns"] is not None and r["rid"] in first_prefill:
            if first_prefill[r["rid"]] >= r["arrival_ns"]:
                r["ttft_ns"], r["ttft_source"] = first_prefill[r["rid"]] - r["arrival_ns"], "batches"
            else:
                not_derived += 1
        r["end_ns"] = r["arrival_ns"] + r["e2e_ns"] if None not in (r["arrival_ns"], r["e2e_ns"]) else None
        # the queue wait of a preempted request counts its wait after the preemption too: no prefill span from it
        r["prefill_ns"] = r["ttft_ns"] - r["queue_ns"] if None not in (r["ttft_ns"], r["queue_ns"]) \
            and not r["preempted"] else None
        r["decode_ns"] = r["e2e_ns"] - r["ttft_ns"] if None not in (r["e2e_ns"], r["ttft_ns"]) else None
        n = r["output_tokens"]
        r["tpot_ns"] = r["decode_ns"] // (n - 1) if r["decode_ns"] is not None and n and n > 1 else None
    _warn_impossible(data, early, not_derived, negative_in_file)


def _warn_impossible(data: Serving, early: list[int], not_derived: int, negative_in_file: int) -> None:
    """The warnings of requests whose times cannot be (see ``derive``), on the file that says so."""
    files = {kind: file for file, kind, _, _ in data.files}
    if early:
        data.warnings.append((files.get("serving_batch", data.source), (
            f"impossible times: {len(early)} request(s) are in a batch that started before they arrived (up to "
            f"{max(early) / 1e6:,.3f} ms before; do the request and batch files share one clock?)"
            + (f"; no TTFT is derived for the {not_derived} whose first prefill batch ended before they arrived"
               if not_derived else ""))))
    if negative_in_file:
        data.warnings.append((files.get("serving_request", data.source), (
            f"impossible times: {negative_in_file} request(s) have a negative first-token latency (kept as the "
            "file gives it)")))
