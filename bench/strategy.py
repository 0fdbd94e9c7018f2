"""Parallel strategy benchmark: the grid, the verdicts, communication per kind and the expert load of a big run,
timed through the real HTTP handlers (in process) while the run still ingests and once it is complete.

    ascendscope bench strategy --tp 8 --pp 8 --dp 16

Writes a ``sample_data.strategy`` run of tp × pp × dp ranks (PP stage ``pp // 2`` 20 % slower, one slow rank in
its TP group, known by construction; every rank's profiler_metadata.json states its groups), then ingests it
sharded in a thread, as the server does. As soon as the first manifest is written (the small files of every rank
are in cluster.duckdb, the shards still pending) it makes the Cluster view's own three requests (overview,
heatmap, matrix: the view is up) and then times each strategy answer: the first request (cold: nothing of it
cached) and ``--repeat`` more; then again once the ingest is complete (cold again: a new manifest is a new run
file). Prints one JSON object: the sizes, the ingest, per answer the cold time (wall, and this process's CPU: the
server's threads and DuckDB's) and the p50 / max of the repeats in ms (wall) and the CPU seconds of them all,
the load average, and whether the verdicts named the slow stage and the slow rank.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

ANSWERS = (("grid", {"metric": "step"}), ("verdicts", {"metric": "step"}), ("grid", {"metric": "wait_caused"}),
           ("communication", {}), ("experts", {}))


def _timed(fn, repeat: int) -> tuple[dict, object]:
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    cold, cold_cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return {"cold_ms": round(cold, 1), "cold_cpu_ms": round(cold_cpu, 1),
            "p50_ms": round(statistics.median(times), 1) if times else None,
            "max_ms": round(max(times), 1) if times else None,
            "cpu_s": round(time.process_time() - c0, 2)}, out


def _cluster_view(client, run_id: str) -> float:
    """The Cluster view's own first requests (the run opened, the view up); their seconds."""
    t0 = time.perf_counter()
    for path, params in (("overview", {"source": "ranks"}), ("heatmap", {"metric": "step", "source": "ranks"}),
                         ("matrix", {})):
        client.get(f"/api/runs/{run_id}/cluster/{path}", params=params).raise_for_status()
    return round(time.perf_counter() - t0, 2)


def _measure(client, run_id: str, repeat: int) -> tuple[dict, dict]:
    timings, answers = {}, {}
    for path, params in ANSWERS:
        label = path + "".join(f" {v}" for v in params.values())

        def get(path=path, params=params):
            r = client.get(f"/api/runs/{run_id}/strategy/{path}", params=params)
            r.raise_for_status()
            return r.json()

        timings[label], answers[label] = _timed(get, repeat)
    return timings, answers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench strategy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--dp", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/out/strategy"))
    ap.add_argument("--keep", action="store_true", help="keep the generated run and its ingest in --out")
    args = ap.parse_args(argv)

    from fastapi.testclient import TestClient

    from ascendscope.ingest.layout import read_manifest
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.strategy import write_strategy_run
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    shutil.rmtree(args.out, ignore_errors=True)
    world = args.tp * args.pp * args.dp
    slow_stage, slow_rank = args.pp // 2, world // 3
    t0 = time.perf_counter()
    truth = write_strategy_run(args.out / "src", tp=args.tp, pp=args.pp, dp=args.dp, steps=args.steps,
                               slow_stage=slow_stage, slow_rank=slow_rank)
    result: dict = {"tp": args.tp, "pp": args.pp, "dp": args.dp, "ranks": world, "steps": args.steps,
                    "generate_s": round(time.perf_counter() - t0, 1)}
    store = RunStore(args.out / "data")
    run = store.create_run("strategy", str(args.out / "src"))
    run_dir = store.run_dir(run.id)
    done: dict = {}

    def ingest() -> None:
        t = time.perf_counter()
        try:
            done["summary"] = ingest_sharded(args.out / "src", run_dir, workers=args.workers)
        except Exception as exc:  # noqa: BLE001 - reported in the result
            done["error"] = repr(exc)
        done["seconds"] = round(time.perf_counter() - t, 1)

    app = create_app(Settings.from_env(environ={}, data_dir=str(args.out / "data")))
    started = time.perf_counter()
    worker = threading.Thread(target=ingest, name="strategy-ingest")
    worker.start()
    while not (run_dir / "manifest.json").is_file() and worker.is_alive():
        time.sleep(0.05)
    store.set_status(run.id, "ready")  # served while it ingests (its manifest says which shards are in)
    with TestClient(app) as client:
        if (run_dir / "manifest.json").is_file():
            manifest = read_manifest(run_dir)
            result["cluster_view_up_s"] = round(time.perf_counter() - started, 1)
            result["while_ingesting"] = {"shards_ready_at_start": manifest["ranks"]["ready"],
                                         "cluster_view_requests_s": _cluster_view(client, run.id),
                                         "load_average": [round(v, 2) for v in os.getloadavg()]}
            timings, _ = _measure(client, run.id, args.repeat)
            result["while_ingesting"]["timings"] = timings
            result["while_ingesting"]["shards_ready_at_end"] = read_manifest(run_dir)["ranks"]["ready"]
        worker.join()
        result["ingest_s"] = done.get("seconds")
        if "error" in done:
            result["ingest_error"] = done["error"]
        result["complete"] = {"load_average": [round(v, 2) for v in os.getloadavg()]}
        timings, answers = _measure(client, run.id, args.repeat)
        result["complete"]["timings"] = timings
    v = answers["verdicts step"]
    warn = [x for x in v["verdicts"] if x["severity"] == "warning"]
    result["checks"] = {
        "grid_ranks": len(answers["grid step"]["rank"]) == world,
        "placed_by_metadata": answers["grid step"]["counts"]["metadata"] == world,
        "slow_stage": any(x["kind"] == "pp_stage" and x["stage"] == slow_stage for x in warn),
        "slow_rank": any(x["kind"] == "slow_rank" and x["rank"] == slow_rank for x in warn),
        "wait_caused_by_slow_rank": max(zip(answers["grid wait_caused"]["value"], answers["grid wait_caused"]["rank"]),
                                        key=lambda t: t[0] or 0)[1] == slow_rank,
        "kinds": sorted(k["kind"] for k in answers["communication"]["kinds"]),
    }
    result["truth"] = {"slow_stage": slow_stage, "slow_rank": slow_rank, "late_group": truth["late_group"]}
    if not args.keep:
        shutil.rmtree(args.out, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
