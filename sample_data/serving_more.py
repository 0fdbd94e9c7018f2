"""The rest of a serving run's parsed output, from the same simulated engine as ``sample_data.serving``.

``write_more(out_dir, truth, zone_h=8) -> dict`` writes, as the current ``ms_service_profiler.parse`` does (columns
in docs/formats.md, "msServiceProfiler"), with wall clocks in the local time of a host ``zone_h`` hours east of UTC:

* ``forward.csv``: each batch's model execution once per card (``prof_id`` 0 and 1, DP ranks 0 and 1), card 1
  starting ``CARD_SKEW_MS`` later; ``bubble_time`` the gap to the card's next forward;
* ``request_status.csv``: at each batch's start, the waiting queue (arrived, prefill not begun) and the running
  one (prefill begun, not finished), one row each, and ``swapped`` 0;
* ``pd_split_communication.csv`` / ``pd_split_kvcache.csv``: every request as if prefilled on one instance and
  decoded on another: sent at its prefill start, sent ``SEND_MS`` later, its KV cache pulled from its first token
  for ``KV_BASE_MS + input // KV_TOKENS_PER_MS`` ms;
* ``coordinator.csv``: those requests routed to ``P_ADDR`` / ``D_ADDR``, counted per 5 s window of wall clock;
* in ``profiler.db``: ``first_token_latency`` (the running avg / p50 / p90 / p99 of TTFT in µs at each first
  token, wall-clock ``timestamp``).

It returns what each holds, in epoch ns (``forwards``, ``queues``, ``kv_transfer_ns`` per rid, ``zone_ns``).
"""

from __future__ import annotations

import csv
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import mean

from .serving import EPOCH_MS, NS_PER_MS

CARD_SKEW_MS = 2
SEND_MS = 1
KV_BASE_MS, KV_TOKENS_PER_MS = 2, 128
P_ADDR, D_ADDR = "10.0.0.1:1025", "10.0.0.2:1026"
WINDOW_S = 5


def _wall(ms: int, zone_h: int, fraction: bool = True) -> str:
    t = datetime.fromtimestamp(ms / 1000, tz=UTC) + timedelta(hours=zone_h)
    return t.strftime("%Y-%m-%d %H:%M:%S:%f") if fraction else t.strftime("%Y-%m-%d %H:%M:%S")


def _write(path: Path, head: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)


def _forward(out: Path, truth: dict, zone_h: int) -> list[dict]:
    fwd = []
    for card in (0, 1):
        mine = [{"card": card, "start": EPOCH_MS + b["start"] + 1 + card * CARD_SKEW_MS,
                 "end": EPOCH_MS + b["end"] + card * CARD_SKEW_MS, "size": len(b["items"]), "type": b["type"]}
                for b in truth["batches"]]
        for i, f in enumerate(mine):
            f["iter"] = i + 1
            f["bubble"] = mine[i + 1]["start"] - f["end"] if i + 1 < len(mine) else None
        fwd += mine
    first = min(f["start"] for f in fwd)
    rows = [["forward", f["start"] - first, _wall(f["start"], zone_h), _wall(f["end"], zone_h), f["end"] - f["start"],
             "" if f["bubble"] is None else f["bubble"], f["size"], f["type"], f["iter"], f["card"], f["card"],
             "node-a", f["start"], f["end"]] for f in sorted(fwd, key=lambda f: (f["start"], f["card"]))]
    _write(out / "forward.csv", ["name", "relative_start_time(ms)", "start_datetime", "end_datetime",
                                 "during_time(ms)", "bubble_time(ms)", "batch_size", "batch_type", "forward_iter",
                                 "dp_rank", "prof_id", "hostname", "start_time(ms)", "end_time(ms)"], rows)
    return [{"prof_id": str(f["card"]), "start_ns": f["start"] * NS_PER_MS, "end_ns": f["end"] * NS_PER_MS,
             "bubble_ns": None if f["bubble"] is None else f["bubble"] * NS_PER_MS, "forward_iter": f["iter"]}
            for f in fwd]


def _queues(out: Path, truth: dict, zone_h: int) -> list[dict]:
    reqs = [(r["arrival_ns"] // NS_PER_MS, (r["arrival_ns"] + r["queue_ns"]) // NS_PER_MS,
             (r["arrival_ns"] + r["e2e_ns"]) // NS_PER_MS) for r in truth["requests"]]
    queues, rows, first = [], [], EPOCH_MS + truth["batches"][0]["start"]
    for b in truth["batches"]:
        t = EPOCH_MS + b["start"]
        sizes = {"waiting": sum(a <= t < s for a, s, _ in reqs), "running": sum(s <= t < e for _, s, e in reqs),
                 "swapped": 0}
        for q, n in sizes.items():
            queues.append({"ts_ns": t * NS_PER_MS, "queue": q, "size": n})
            rows.append(["host-0", 4242, _wall(t, zone_h), t - first, *[n if k == q else "" for k in sizes], t])
    _write(out / "request_status.csv", ["hostuid", "pid", "start_datetime", "relative_timestamp(ms)", "waiting",
                                        "running", "swapped", "timestamp(ms)"], rows)
    return queues


def _pd(out: Path, truth: dict, zone_h: int) -> dict[str, int]:
    comm, kv, transfer, events = [], [], {}, []
    for r in truth["requests"]:
        a = r["arrival_ns"] // NS_PER_MS
        sent, first, end = a + r["queue_ns"] // NS_PER_MS, a + r["ttft_ns"] // NS_PER_MS, a + r["e2e_ns"] // NS_PER_MS
        comm.append([r["rid"], a, sent, sent + SEND_MS, first, end])
        dur = KV_BASE_MS + r["input_tokens"] // KV_TOKENS_PER_MS
        transfer[r["rid"]] = dur * NS_PER_MS
        kv.append(["PullKVCache", 0, r["rid"], "[[0, 1, 2]]", r["input_tokens"], dur, _wall(first, zone_h),
                   _wall(first + dur, zone_h), first, first + dur])
        events += [(a, P_ADDR, "prefill", 1), (first, P_ADDR, "prefill", -1), (first, D_ADDR, "decode", 1),
                   (end, D_ADDR, "decode", -1)]
    _write(out / "pd_split_communication.csv", ["rid", "http_req_time(ms)", "send_request_time(ms)",
                                                "send_request_succ_time(ms)", "prefill_res_time(ms)",
                                                "request_end_time(ms)"], comm)
    _write(out / "pd_split_kvcache.csv", ["domain", "rank", "rid", "block_tables", "seq_len", "during_time(ms)",
                                          "start_datetime(ms)", "end_datetime(ms)", "start_time(ms)", "end_time(ms)"],
           kv)
    windows: dict[tuple, list[int]] = {}
    for t, addr, kind, sign in events:
        key = (t // 1000 // WINDOW_S * WINDOW_S * 1000, addr, kind)
        windows.setdefault(key, [0, 0])[0 if sign > 0 else 1] += 1
    running: dict[tuple, int] = {}
    rows = []
    for (w, addr, kind), (add, done) in sorted(windows.items()):
        running[(addr, kind)] = max(0, running.get((addr, kind), 0) + add - done)
        rows.append([_wall(w, zone_h, fraction=False), addr, kind, add, done, running[(addr, kind)]])
    _write(out / "coordinator.csv", ["time", "address", "node_type", "add_count", "end_count", "running_count"], rows)
    return transfer


def _curve_rows(truth: dict, zone_h: int) -> list[tuple]:
    """At each first token: avg and nearest-rank p50 / p90 / p99 of the TTFTs so far, in µs."""
    done, rows = [], []
    for r in sorted(truth["requests"], key=lambda r: r["arrival_ns"] + r["ttft_ns"]):
        done.append(r["ttft_ns"] // 1000)
        s = sorted(done)
        rows.append((_wall((r["arrival_ns"] + r["ttft_ns"]) // NS_PER_MS, zone_h), float(mean(done)),
                     *(float(s[max(1, -(-pct * len(s) // 100)) - 1]) for pct in (99, 90, 50))))
    return rows


def write_more(out_dir, truth: dict, zone_h: int = 8) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    forwards, queues = _forward(out, truth, zone_h), _queues(out, truth, zone_h)
    transfer = _pd(out, truth, zone_h)
    curve = _curve_rows(truth, zone_h)
    con = sqlite3.connect(out / "profiler.db")
    try:
        con.execute("CREATE TABLE IF NOT EXISTS first_token_latency (timestamp TEXT, avg REAL, p99 REAL, p90 REAL, "
                    "p50 REAL)")
        con.executemany("INSERT INTO first_token_latency VALUES (?,?,?,?,?)", curve)
        con.commit()
    finally:
        con.close()
    return {"forwards": forwards, "queues": queues, "kv_transfer_ns": transfer, "curve": curve,
            "zone_ns": zone_h * 3600 * 1_000_000_000}
