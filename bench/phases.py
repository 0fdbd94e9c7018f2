"""Phases benchmark: the Phases view's two answers on a big pipeline run and an RL job, wall and CPU time.

    ascendscope bench phases --stages 64 --microbatches 128 --workers 16 --repeat 5

Writes (once, cached under ``--out``) ``sample_data.phases`` runs: a 1F1B pipeline of ``--stages`` stages ×
``--microbatches`` microbatches (text export: a host and a device range per microbatch) and an RL job of 3 roles ×
``--workers`` workers, 4 iterations; ingests them sharded, then answers from each run's ``cluster.duckdb`` alone
(no shard attached, as the server does): ``phases.summary`` and the view's rows request (``preferred``, 20,000
rows), each on a fresh connection (cold) and again on the same one (warm), ``--repeat`` times. Prints one JSON
object: per run and answer the p50 / max wall seconds and CPU seconds (the process's, DuckDB's threads included)
and the load average. ``--profile`` prints the cProfile top 25 of one warm summary instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def _build(out: Path, args) -> dict[str, Path]:
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.phases import write_pp_run, write_rl_job

    runs = {f"pp {args.stages}×{args.microbatches}": ("pp", lambda p: write_pp_run(
                p, stages=args.stages, microbatches=args.microbatches)),
            f"rl 3 roles × {args.workers}": ("rl", lambda p: write_rl_job(p, workers=args.workers, iterations=4))}
    got = {}
    for label, (key, write) in runs.items():
        tag = f"{key}_{args.stages}_{args.microbatches}_{args.workers}"
        src, run = out / f"{tag}_src", out / f"{tag}_run"
        if not (run / "cluster.duckdb").exists():
            write(src)
            ingest_sharded(src, run, workers=2)
        got[label] = run
    return got


def _measure(fn, repeat: int) -> dict:
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {"wall_p50_s": round(statistics.median(walls), 3), "wall_max_s": round(max(walls), 3),
            "cpu_p50_s": round(statistics.median(cpus), 3)}


def _bench_run(run: Path, repeat: int) -> dict:
    from ascendscope.ingest.layout import connect
    from ascendscope.server.queries import DuckRunner, Page, phases

    def rows(db):
        return phases.rows(db, "bench", {"preferred": True}, Page(0, phases.MAX_ROWS))

    def cold(fn):  # a fresh connection each time, as a server process that has not opened the run yet
        return lambda: fn(DuckRunner(connect(run, [])[0]))

    db = DuckRunner(connect(run, [])[0])
    return {"phases": phases.summary(db)["phases"],
            "summary cold": _measure(cold(phases.summary), repeat),
            "summary warm": _measure(lambda: phases.summary(db), repeat),
            "rows cold": _measure(cold(rows), repeat), "rows warm": _measure(lambda: rows(db), repeat)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench phases", description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=128)
    ap.add_argument("--workers", type=int, default=16, help="workers per role of the RL job")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench/out/phases"))
    ap.add_argument("--profile", action="store_true", help="cProfile one warm summary of the pipeline run")
    args = ap.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    runs = _build(args.out, args)
    if args.profile:
        import cProfile
        import pstats

        from ascendscope.ingest.layout import connect
        from ascendscope.server.queries import DuckRunner, phases

        db = DuckRunner(connect(next(iter(runs.values())), [])[0])
        phases.summary(db)
        cProfile.runctx("phases.summary(db)", globals(), {"phases": phases, "db": db}, "/tmp/phases.prof")
        pstats.Stats("/tmp/phases.prof").sort_stats("cumulative").print_stats(25)
        return 0
    out: dict = {"load_avg": [round(x, 1) for x in os.getloadavg()]}
    for label, run in runs.items():
        out[label] = _bench_run(run, args.repeat)
    out["load_avg_after"] = [round(x, 1) for x in os.getloadavg()]
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
