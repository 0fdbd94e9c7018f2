"""Ingest benchmark: generate a synthetic run of a given size, ingest it in a child process, report MB/s and
peak RSS (of the ingest process alone, read from the kernel's rusage of the waited-for child).

    ascendscope bench ingest --trace-mb 300 --ranks 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ascendscope.sample_data.generate import generate_run, ops_for_target_mb


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def ensure_run(cache: Path, trace_mb: float, ranks: int, seed: int) -> tuple[Path, dict]:
    """Generate (once, cached by parameters) a run whose per-rank trace is about ``trace_mb`` MB."""
    run = cache / f"run_{ranks}r_{trace_mb:g}mb_s{seed}"
    truth_file = run / "truth.json"
    if truth_file.exists():
        return run, json.loads(truth_file.read_text())
    run.mkdir(parents=True, exist_ok=True)
    ops = ops_for_target_mb(trace_mb, seed=seed)
    truth = generate_run(run / "data", ranks=ranks, ops_per_step=ops, seed=seed)
    truth_file.write_text(json.dumps(truth))
    return run, truth


def run_ingest(src: Path, out: Path, workers: int, memory_limit: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ascendscope.ingest", str(src), "--out", str(out), "--quiet",
                           "--workers", str(workers), "--memory-limit", memory_limit],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"ingest failed: {proc.stderr.strip()}")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"wall_s": wall, "peak_rss_mb": max(peak_kb, before) / 1024, "stdout": proc.stdout}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench ingest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace-mb", type=float, default=300, help="size of each rank's trace_view.json (MB)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="1GB")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--trace-only", action="store_true",
                    help="ingest only rank 0's trace_view.json (MB/s then counts the trace alone)")
    ap.add_argument("--cache", default=os.environ.get("ASCENDSCOPE_BENCH_CACHE", "bench/out"),
                    help="where generated runs are kept between invocations (default bench/out)")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    run, truth = ensure_run(cache, args.trace_mb, args.ranks, args.seed)
    src = run / "data"
    total = dir_bytes(src)
    trace_bytes = sum(f.stat().st_size for f in src.rglob("trace_view.json*"))
    events = sum(r["total_events"] for r in truth["ranks"])
    if args.trace_only:
        src = sorted(src.rglob("trace_view.json*"))[0]
        total = trace_bytes = src.stat().st_size
        events = truth["ranks"][0]["total_events"]
    results = []
    for i in range(args.repeat):
        out = run / f"bench_{i}.duckdb"
        res = run_ingest(src, out, args.workers, args.memory_limit)
        out.unlink(missing_ok=True)
        results.append(res)
    best = min(results, key=lambda r: r["wall_s"])
    report = {
        "ranks": 1 if args.trace_only else args.ranks, "trace_only": args.trace_only, "input_mb": round(total / 1e6, 1),
            "trace_mb": round(trace_bytes / 1e6, 1),
        "events": events, "wall_s": round(best["wall_s"], 2),
        "mb_per_s": round(total / 1e6 / best["wall_s"], 2),
        "events_per_s": int(events / best["wall_s"]),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in results), 0),
        "runs": len(results),
        "wall_s_median": round(statistics.median(r["wall_s"] for r in results), 2),
        "mb_per_s_median": round(total / 1e6 / statistics.median(r["wall_s"] for r in results), 2),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
