"""A serving run (msServiceProfiler's parsed output) whose request latencies are known by construction.

``simulate(arrivals_ms, input_tokens, output_tokens, total_blocks=...) -> dict`` runs a small continuous-batching
engine, every time a whole number of ms:

* each iteration is a **prefill** batch when requests wait and the KV cache has room for the first of them (up to
  ``max_prefill`` requests, ``PREFILL_BASE_MS + input_tokens // PREFILL_TOKENS_PER_MS`` ms over the batch), else a
  **decode** batch of every running request (``DECODE_BASE_MS + DECODE_PER_REQ_MS × size`` ms), else the engine
  idles until the next arrival;
* a request's first token comes at the end of its prefill batch, one more at the end of each decode batch; it ends
  with its last token and frees its blocks; with ``preempt_at_ms`` one request is preempted once (recomputed);
* KV blocks: ``ceil(input / BLOCK_TOKENS) + 1`` at prefill (``Allocate``), one more (``AppendSlot``) whenever the
  request's tokens pass a multiple of ``BLOCK_TOKENS``, all of them at the end (``Free``).

So per request: queue = prefill start − arrival (plus the wait after a preemption), TTFT = prefill end − arrival,
e2e = last token − arrival, TPOT = (e2e − TTFT) / (output − 1). The truth holds them in ns with every batch and
KV-cache event.

``write_serving(out_dir, truth, flavour="ms") -> list[str]`` writes the parsed output of that run as
``ms_service_profiler.parse`` does (columns in docs/formats.md, "msServiceProfiler"): ``request.csv``,
``batch.csv``, ``kvcache.csv``, ``profiler.db`` and ``chrome_tracing.json`` for ``flavour="ms"`` (the current
exporter: times in ms); ``flavour="us"`` the older manual's CSVs in microseconds (no first-token column);
``flavour="db"`` only ``profiler.db`` and ``chrome_tracing.json``.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

EPOCH_MS = 1_732_000_000_000  # 2024-11-19, a plausible wall clock
PREFILL_BASE_MS, PREFILL_TOKENS_PER_MS = 20, 64
DECODE_BASE_MS, DECODE_PER_REQ_MS = 8, 1
BLOCK_TOKENS = 16
NS_PER_MS = 1_000_000


def _need(r: dict) -> int:
    return -(-(r["input"] + r["tokens"]) // BLOCK_TOKENS) + 1


def simulate(arrivals_ms: list[int], input_tokens: list[int], output_tokens: list[int], *, total_blocks: int = 64,
             max_prefill: int = 2, preempt_at_ms: int | None = None) -> dict:
    """See the module's contract. ``preempt_at_ms``: at the first decode iteration from then on, the request
    admitted last is preempted (its blocks freed, back to the head of the queue; re-admitted, its prompt and the
    tokens so far are prefilled again), as vLLM's recompute preemption does; its queue wait counts both waits."""
    reqs = [{"rid": f"req-{i}", "arrival": a, "input": n_in, "output": n_out, "tokens": 0, "blocks": 0, "waited": 0}
            for i, (a, n_in, n_out) in enumerate(zip(arrivals_ms, input_tokens, output_tokens))]
    waiting, running, batches, kv = [], [], [], []
    free, now, pending = total_blocks, 0, sorted(reqs, key=lambda r: r["arrival"])
    while pending or waiting or running:
        while pending and pending[0]["arrival"] <= now:
            r = pending.pop(0)
            r["waiting_since"] = r["arrival"]
            waiting.append(r)
        take = []
        for r in waiting[:max_prefill]:
            if _need(r) > free - sum(_need(t) for t in take):
                break
            take.append(r)
        if take:
            dur = PREFILL_BASE_MS + sum(r["input"] + r["tokens"] for r in take) // PREFILL_TOKENS_PER_MS
            batches.append({"start": now, "end": now + dur, "type": "Prefill",
                            "items": [(r["rid"], r["tokens"], 0, r["input"] + r["tokens"]) for r in take]})
            for r in take:
                waiting.remove(r)
                r["waited"] += now - r["waiting_since"]
                r["blocks"] = _need(r)
                free -= r["blocks"]
                kv.append({"t": now, "rid": r["rid"], "name": "Allocate", "free": free})
                r.setdefault("first_token", now + dur)
            now += dur
            for r in take:
                r["tokens"] += 1
                running.append(r)
        elif running and preempt_at_ms is not None and now >= preempt_at_ms and len(running) > 1:
            victim = running.pop()
            free += victim["blocks"]
            victim["blocks"], victim["waiting_since"], victim["preempted"] = 0, now, True
            kv.append({"t": now, "rid": victim["rid"], "name": "Free", "free": free})
            waiting.insert(0, victim)
            preempt_at_ms = None
            continue
        elif running:
            dur = DECODE_BASE_MS + DECODE_PER_REQ_MS * len(running)
            batches.append({"start": now, "end": now + dur, "type": "Decode",
                            "items": [(r["rid"], r["tokens"], 1, 1) for r in running]})
            now += dur
            for r in list(running):
                r["tokens"] += 1
                if (r["input"] + r["tokens"]) % BLOCK_TOKENS == 0 and free > 0:
                    r["blocks"] += 1
                    free -= 1
                    kv.append({"t": now, "rid": r["rid"], "name": "AppendSlot", "free": free})
        else:
            now = pending[0]["arrival"]
            continue
        for r in [r for r in running if r["tokens"] >= r["output"]]:
            running.remove(r)
            r["end"] = now
            free += r["blocks"]
            kv.append({"t": now, "rid": r["rid"], "name": "Free", "free": free})
    out = []
    for r in reqs:
        ttft, e2e = r["first_token"] - r["arrival"], r["end"] - r["arrival"]
        out.append({"rid": r["rid"], "arrival_ns": (EPOCH_MS + r["arrival"]) * NS_PER_MS,
                    "input_tokens": r["input"], "output_tokens": r["output"],
                    "queue_ns": r["waited"] * NS_PER_MS, "ttft_ns": ttft * NS_PER_MS,
                    "e2e_ns": e2e * NS_PER_MS, "preempted": bool(r.get("preempted")),
                    "tpot_ns": (e2e - ttft) * NS_PER_MS // (r["output"] - 1) if r["output"] > 1 else None})
    return {"requests": out, "batches": batches, "kvcache": kv, "total_blocks": total_blocks}


def burst(n: int = 8, gap_ms: int = 5, input_tokens: int = 256, output_tokens: int = 6, **kw) -> dict:
    """``n`` requests arriving ``gap_ms`` apart: the later ones queue behind the first prefills."""
    return simulate([i * gap_ms for i in range(n)], [input_tokens + 32 * (i % 3) for i in range(n)],
                    [output_tokens + (i % 4) for i in range(n)], **kw)


def _res_list(items) -> str:
    # the exporter writes the scheduler's list of dicts with pandas (Python's repr)
    return repr([{"rid": rid, "iter": it, "type": typ, "num_scheduled_tokens": tok} for rid, it, typ, tok in items])


def _fmt(value_ms: float) -> str:
    return f"{value_ms:.1f}" if value_ms != int(value_ms) else str(int(value_ms))


def _request_rows(truth: dict, us: bool) -> tuple[list[str], list[list]]:
    if us:
        head = ["http_rid", "start_time_httpReq(microsecond)", "recv_token_size", "reply_token_size",
                "execution_time(microsecond)", "queue_wait_time(microsecond)"]
        return head, [[r["rid"], r["arrival_ns"] // 1000, r["input_tokens"], r["output_tokens"], r["e2e_ns"] // 1000,
                       r["queue_ns"] // 1000] for r in truth["requests"]]
    head = ["http_rid", "start_time(ms)", "recv_token_size", "reply_token_size", "execution_time(ms)",
            "queue_wait_time(ms)", "first_token_latency(ms)", "cache_hit_rate"]
    ms = lambda ns: _fmt(ns / NS_PER_MS)  # noqa: E731
    return head, [[r["rid"], r["arrival_ns"] // NS_PER_MS, r["input_tokens"], r["output_tokens"], ms(r["e2e_ns"]),
                   ms(r["queue_ns"]), ms(r["ttft_ns"]), 0.0] for r in truth["requests"]]


def _batch_rows(truth: dict, us: bool) -> tuple[list[str], list[list]]:
    scale = 1000 if us else 1
    if us:
        head = ["name", "res_list", "start_time(microsecond)", "end_time(microsecond)", "batch_size", "batch_type",
                "during_time(microsecond)"]
    else:
        head = ["name", "res_list", "start_time(ms)", "end_time(ms)", "during_time(ms)", "batch_type", "prof_id",
                "total_batch_size", "Prefill_batch_size", "Decode_batch_size", "Prefill_scheduled_tokens",
                "Decode_scheduled_tokens", "total_scheduled_tokens"]
    rows = []
    for b in truth["batches"]:
        start, end = (EPOCH_MS + b["start"]) * scale, (EPOCH_MS + b["end"]) * scale
        p = [i for i in b["items"] if i[2] == 0]
        d = [i for i in b["items"] if i[2] == 1]
        # forming the batch takes the first ms of the iteration, running it the rest (the exporter writes both)
        for name, s, e in (("BatchSchedule", start, start + scale), ("modelExec", start + scale, end)):
            if us:
                rows.append([name, _res_list(b["items"]), s, e, len(b["items"]), b["type"], e - s])
            else:
                rows.append([name, _res_list(b["items"]), s, e, e - s, b["type"], 0, len(b["items"]), len(p), len(d),
                             sum(i[3] for i in p), sum(i[3] for i in d), sum(i[3] for i in b["items"])])
    return head, rows


def _kv_rows(truth: dict, us: bool) -> tuple[list[str], list[list]]:
    if us:
        head = ["domain", "rid", "start_time(microsecond)", "end_time(microsecond)", "name", "device_kvcache_left",
                "during_time(microsecond)"]
        return head, [["KVCache", k["rid"], (EPOCH_MS + k["t"]) * 1000, (EPOCH_MS + k["t"]) * 1000 + 5, k["name"],
                       k["free"], 5] for k in truth["kvcache"]]
    head = ["domain", "rid", "timestamp(ms)", "name", "device_kvcache_left"]
    return head, [["KVCache", k["rid"], EPOCH_MS + k["t"], k["name"], k["free"]] for k in truth["kvcache"]]


def _write_csv(path: Path, head: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)


def _write_db(path: Path, truth: dict) -> None:
    """profiler.db as the current exporter leaves it: source column names, times in ms; kvcache has only a
    wall-clock ``start_datetime`` (cut to the second), no numeric time."""
    con = sqlite3.connect(path)
    try:
        head, rows = _request_rows(truth, False)
        cols = ["http_rid", "start_time", "recv_token_size", "reply_token_size", "execution_time", "queue_wait_time",
                "first_token_latency", "cache_hit_rate"]
        con.execute(f"CREATE TABLE request ({', '.join(cols)})")
        con.executemany("INSERT INTO request VALUES (?,?,?,?,?,?,?,?)",
                        [[r[0], r[1], r[2], r[3], float(r[4]), float(r[5]), float(r[6]), r[7]] for r in rows])
        head, rows = _batch_rows(truth, False)
        cols = ["name", "res_list", "start_time", "end_time", "during_time", "batch_type", "prof_id", "batch_size",
                "Prefill_batch_size", "Decode_batch_size", "Prefill_scheduled_tokens", "Decode_scheduled_tokens",
                "total_scheduled_tokens"]
        con.execute(f"CREATE TABLE batch ({', '.join(cols)})")
        con.executemany(f"INSERT INTO batch VALUES ({','.join('?' * len(cols))})", rows)
        con.execute("CREATE TABLE kvcache (rid, name, start_datetime, kvcache_usage_rate)")
        con.executemany("INSERT INTO kvcache VALUES (?,?,?,?)",
                        [[k["rid"], k["name"], "2024-11-19 07:06:40", 1 - k["free"] / truth["total_blocks"]]
                         for k in truth["kvcache"]])
        con.execute("CREATE TABLE data_table (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, view_name TEXT)")
        con.commit()
    finally:
        con.close()


def _write_trace(path: Path, truth: dict) -> None:
    """chrome_tracing.json: a lane per request (queue, prefill, decode) and one for the engine's batches, in µs."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Request"}},
          {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "Engine"}}]
    for i, r in enumerate(truth["requests"]):
        a = r["arrival_ns"] // 1000
        for name, s, d in (("queue", a, r["queue_ns"] // 1000),
                           ("prefill", a + r["queue_ns"] // 1000, (r["ttft_ns"] - r["queue_ns"]) // 1000),
                           ("decode", a + r["ttft_ns"] // 1000, (r["e2e_ns"] - r["ttft_ns"]) // 1000)):
            ev.append({"ph": "X", "name": name, "cat": "Request", "pid": 1, "tid": i, "ts": s, "dur": d,
                       "args": {"rid": r["rid"]}})
    for b in truth["batches"]:
        ev.append({"ph": "X", "name": "modelExec", "cat": "Schedule", "pid": 2, "tid": 0,
                   "ts": (EPOCH_MS + b["start"]) * 1000, "dur": (b["end"] - b["start"]) * 1000,
                   "args": {"batch_type": b["type"], "batch_size": len(b["items"])}})
    path.write_text(json.dumps({"traceEvents": ev}))


def write_serving(out_dir, truth: dict, flavour: str = "ms") -> list[str]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    us = flavour == "us"
    if flavour in ("ms", "us"):
        _write_csv(out / "request.csv", *_request_rows(truth, us))
        _write_csv(out / "batch.csv", *_batch_rows(truth, us))
        _write_csv(out / "kvcache.csv", *_kv_rows(truth, us))
    if flavour in ("ms", "db"):
        _write_db(out / "profiler.db", truth)
    _write_trace(out / "chrome_tracing.json", truth)
    return sorted(p.name for p in out.iterdir())
