"""Heavy views on a 10 M-slice run: each view's latency at 1 and 10 clients, and what they do to viewport users.

    ascendscope bench heavy --slices 10000000

Serves the synthetic run of ``bench.query`` (``bench/synth.py``: 2 ranks, 10 M slices) with this version and, per
view, runs wrk on its URL with 1 and then 10 connections for ``--seconds``: System View (Overall Metrics and the
Python page of rank 0), Range Stats over the whole run, a name search, Advice of rank 0, and Compare of rank 0
against rank 1. While the 10 connections run, 5 viewport users walk the timeline (``bench/wrk/walk.lua``), and
their latency is set beside the same 5 users' alone. A view that cannot finish by ``query_timeout_s`` answers 504
(counted in ``errors``: bounded, not stalled). Latencies are each request's own (``request_ms`` of
``bench/wrk/summary.lua``); wrk's, corrected for coordinated omission, are kept in the JSON as ``wrk_latency_ms``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from ascendscope.bench.query import prepare_store
from ascendscope.bench.served import Server
from ascendscope.bench.wrkload import run_wrk, walk_config

VIEWPORT_CLIENTS = 5


def views(run_id: str, meta: dict) -> dict[str, str]:
    api = f"/api/runs/{run_id}"
    return {
        "System View, overall": f"{api}/systemview/overall?rank=0",
        "System View, python": f"{api}/systemview/python?rank=0",
        "Range Stats, whole run": f"{api}/timeline/range_stats",
        "search 'aten'": f"{api}/timeline/search?q=aten",
        "Advice, rank 0": f"{api}/advice?rank=0",
        "Compare, rank 0 vs 1": f"/api/compare?a={run_id}&b={run_id}&rank_a=0&rank_b=1",
    }


def row(res: dict) -> dict:
    return {"requests": res["requests"], "req_per_s": res["req_per_s"], "latency_ms": res["request_ms"],
            "wrk_latency_ms": res["latency_ms"], "errors": sum(res["errors"].values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench heavy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--slices", type=int, default=10_000_000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--cache", default=os.environ.get("ASCENDSCOPE_BENCH_CACHE", "bench/out"))
    args = ap.parse_args(argv)
    data, run_id = prepare_store(Path(args.cache), args.slices)
    out: dict = {"slices": args.slices, "seconds": args.seconds, "views": {}}
    with Server(data, workers=args.workers) as srv:
        meta = srv.wait_ready(f"/api/runs/{run_id}/timeline/tracks")
        walk = walk_config(meta, run_id, visible=24, binary=True)
        run_wrk(srv.base, "walk.lua", VIEWPORT_CLIENTS, min(5.0, args.seconds), walk)  # warm: databases opened
        out["viewport_alone"] = row(run_wrk(srv.base, "walk.lua", VIEWPORT_CLIENTS, args.seconds, walk))
        for name, path in views(run_id, meta).items():
            entry = out["views"][name] = {"path": path}
            for n in args.clients:
                print(f"{name}: {n} client(s) …", file=sys.stderr, flush=True)
                side: dict = {}
                users = threading.Thread(target=lambda found=side: found.update(
                    run_wrk(srv.base, "walk.lua", VIEWPORT_CLIENTS, args.seconds, walk)))
                if n == max(args.clients):
                    users.start()
                entry[str(n)] = row(run_wrk(srv.base, "fixed.lua", n, args.seconds, path=path, timeout_s=30))
                if n == max(args.clients):
                    users.join()
                    entry["viewport_meanwhile"] = row(side)
    lines = [f"{'view':<24} {'clients':>7} {'req/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'errors':>6}   viewport p95 "
             f"meanwhile (alone {out['viewport_alone']['latency_ms']['p95']:.0f} ms)"]
    for name, entry in out["views"].items():
        for n in args.clients:
            r = entry[str(n)]
            side = entry.get("viewport_meanwhile") if n == max(args.clients) else None
            lines.append(f"{name:<24} {n:>7} {r['req_per_s']:>7.2f} {r['latency_ms']['p50']:>8.0f} "
                         f"{r['latency_ms']['p95']:>8.0f} {r['errors']:>6}   "
                         + (f"{side['latency_ms']['p95']:.0f} ms, {side['errors']} errors" if side else ""))
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
