"""Late arrivals, critical path and SQL console benchmark: answer times on a big sharded run, through the real
HTTP handlers (in process).

    ascendscope bench insights --ranks 1000 --steps 3

Writes a ``sample_data.waits`` run of ``--ranks`` ranks (one late rank per run, known), ingests it sharded (timed;
``--reuse`` keeps an earlier ingest in ``--out``), then serves it with ``max_loaded_ranks`` 64 (so a request
attaches only the shards it names) and times each answer ``--repeat`` times: the Cluster view's late-arrival
requests (steps, one step's table, totals per rank, the timeline's wait chains for 64 ranks, one instance with the
late rank's kernels), the critical path of the late rank with a what-if, and two SQL console queries (one on
``cluster_collectives``, one on a rank table). Prints one JSON object: the ingest, the table sizes, p50/max per
request, and whether every answer named the known late rank.

    ascendscope bench insights --table-only --ranks 1000 --steps 100

times the late-arrival queries alone on a ``cluster_collectives`` table of ranks × steps rows filled by SQL
(``sample_data.waits.fill_synthetic_collectives``, known late ranks), in memory: no ingest, no server.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

LOADED = 64


def _time(fn, repeat: int) -> tuple[dict, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}, out


def table_only(ranks: int, steps: int, repeat: int) -> dict:
    import duckdb

    from ascendscope.sample_data.waits import STEP_NS, T0_NS, fill_synthetic_collectives, synthetic_late_rank
    from ascendscope.server.queries import DuckRunner, Page
    from ascendscope.server.queries import late_arrivals as la

    con = duckdb.connect(":memory:")
    t0 = time.perf_counter()
    fill_synthetic_collectives(con, ranks, steps)
    out: dict = {"ranks": ranks, "steps": steps, "rows": ranks * steps, "fill_s": round(time.perf_counter() - t0, 2)}
    db = DuckRunner(con)
    step = steps // 2
    timings = {}
    timings["steps"], _ = _time(lambda: la.steps(db), repeat)
    timings["table (one step)"], table = _time(lambda: la.table(db, step, Page(0, 15)), repeat)
    timings["totals"], totals = _time(lambda: la.totals(db), repeat)
    timings["chains (64 ranks, 10 steps)"], _ = _time(
        lambda: la.chains(db, T0_NS, T0_NS + 10 * STEP_NS, list(range(64))), repeat)
    first = table["rows"][0]
    timings["instance"], _ = _time(lambda: la.instance(db, first["group_id"], first["op_name"], first["seq"]), repeat)
    out["timings"] = timings
    out["checks"] = {"late_ranks": sorted(r["late_rank"] for r in table["rows"]) ==
                     sorted(synthetic_late_rank(step, g, ranks) for g in (0, 1)),
                     "totals_ranks": len(totals["rank"]) == ranks}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench insights", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--late-rank", type=int, default=None, help="default: ranks * 0.617")
    ap.add_argument("--out", type=Path, default=Path("bench/out/insights"))
    ap.add_argument("--reuse", action="store_true", help="keep an ingest already in --out")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--table-only", action="store_true", help="time the late-arrival queries on a synthetic table")
    args = ap.parse_args(argv)
    if args.table_only:
        print(json.dumps(table_only(args.ranks, args.steps, args.repeat), indent=1))
        return 0

    from fastapi.testclient import TestClient

    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.waits import write_wait_run
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    late = args.late_rank if args.late_rank is not None else int(args.ranks * 0.617)
    data = args.out / "data"
    store = RunStore(data)
    ready = [r for r in store.list() if r.status == "ready"] if args.reuse else []
    result: dict = {"ranks": args.ranks, "steps": args.steps, "late_rank": late}
    if ready:
        run_id = ready[0].id
    else:
        src = args.out / "src"
        t0 = time.perf_counter()
        write_wait_run(src, ranks=args.ranks, late_rank=late, extra_us=300, steps=args.steps)
        result["generate_s"] = round(time.perf_counter() - t0, 1)
        run = store.create_run("insights", str(src))
        t0 = time.perf_counter()
        summary = ingest_sharded(src, store.run_dir(run.id), workers=args.workers)
        result["ingest_s"] = round(time.perf_counter() - t0, 1)
        result["ingest_failed_shards"] = sum(1 for s in summary["shards"] if s["status"] != "ready")
        store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
        run_id = run.id
    cluster = store.db_path(run_id)
    result["cluster_duckdb_mb"] = round(cluster.stat().st_size / 1e6, 2)

    app = create_app(Settings.from_env(environ={}, data_dir=str(data), max_loaded_ranks=LOADED))
    api = f"/api/runs/{run_id}"
    waiters = ",".join(str(r) for r in range(LOADED))
    with TestClient(app) as c:
        def get(path, **params):
            r = c.get(api + path, params=params)
            r.raise_for_status()
            return r.json()

        rows = get("/query", sql="SELECT count(*) FROM cluster_collectives")["rows"][0][0]
        result["cluster_collectives_rows"] = rows
        t0 = 1_736_408_883_000_000_000
        timings = {}
        checks = {}
        timings["late/steps"], steps = _time(lambda: get("/late_arrivals/steps"), args.repeat)
        timings["late/table"], table = _time(lambda: get("/late_arrivals/table", step=1, limit=15), args.repeat)
        timings["late/totals"], totals = _time(lambda: get("/late_arrivals/totals"), args.repeat)
        timings["late/chains (64 ranks)"], chains = _time(
            lambda: get("/late_arrivals/chains", start_ns=str(t0), end_ns=str(t0 + 10**9), waiters=waiters),
            args.repeat)
        first = table["rows"][0]
        timings["late/instance + kernels"], inst = _time(
            lambda: get("/late_arrivals/instance", group_id=first["group_id"], op_name=first["op_name"],
                        seq=first["seq"], kernels="true", rank=first["last_rank"]), args.repeat)
        timings["critical_path + what-if"], path = _time(
            lambda: get("/critical_path", rank=late, step=1, kernel="MatMul", factor=2), args.repeat)
        timings["sql: cluster_collectives"], _ = _time(
            lambda: get("/query", sql="SELECT group_id, op_name, seq, arg_max(rank, start_ns) AS last_rank, "
                                      "count(*) FROM cluster_collectives GROUP BY ALL ORDER BY 1, 2, 3"), args.repeat)
        timings["sql: slices (loaded ranks)"], _ = _time(
            lambda: get("/query", sql="SELECT rank, count(*) FROM slices GROUP BY rank"), args.repeat)
        checks["steps"] = len(steps["steps"]) == args.steps
        checks["table_late_rank"] = first["late_rank"] == late
        checks["totals_top_rank"] = totals["rank"][0] == late and len(totals["rank"]) == args.ranks
        checks["chains"] = len(chains["instances"]) == args.steps
        checks["instance_arrivals"] = len(inst["arrivals"]["rank"]) == args.ranks
        checks["whatif_saved_us"] = path["whatif"]["saved_ns"] / 1000
        result["timings"] = timings
        result["checks"] = checks
        result["views_connections"] = [list(k[1] or ()) for k in app.state.databases._entries]
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
