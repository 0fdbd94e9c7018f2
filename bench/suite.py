"""The whole comparison in one run: ``ascendscope bench suite [--quick] [--json PATH]``.

For each run size (ranks × trace MB per rank; generated once by ``sample_data.generate`` and cached), on the same
files: our ingest end to end, the floor of our stack (DuckDB ``read_json`` of every trace into typed columns,
nothing else), msprof-analyze's cluster analysis and torch-tb-profiler-ascend's loader (``bench.tools``), each in
a fresh child process measured by ``bench.measure`` (wall, MB/s over the bytes it was given, peak RSS of its
largest process and of its whole process tree) and as a ratio to ours (``ours_x`` = our MB/s ÷ its MB/s). Then,
on the run we ingested: time to first timeline paint in chromium (``bench.paint``) and timeline viewport
latency at 1 and 50 clients (``bench.concurrency``). Last, when this version has sharded ingest and Ray is
installed, the Ray path's throughput with 2 local workers against 1.

A peer that is not installed (they are the ``peers`` extra), or that does not apply (see ``--tb-max-ranks``),
gets a row with that status and no numbers. Prints one table and, with ``--json``, writes every figure. No
figure is judged here: ``targets`` lists each target of issue #11 with the measured value beside it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import shutil
import statistics
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ascendscope.bench import tools
from ascendscope.bench.ingest import dir_bytes, ensure_run
from ascendscope.bench.measure import run_measured

# (ranks, MB of trace_view.json per rank): about 220-300 MB of input each, and 1,000 small ranks
FULL_SIZES = [(1, 150.0), (8, 20.0), (64, 2.5), (1000, 0.2)]
QUICK_SIZES = [(1, 0.5), (8, 0.1)]
TOOLS = ["ours", "ours_single", "floor", "msprof_analyze", "tb_profiler_ascend"]
PEER_PACKAGES = {"msprof_analyze": "msprof-analyze", "tb_profiler_ascend": "torch-tb-profiler-ascend"}


def parse_size(text: str) -> tuple[int, float]:
    ranks, _, mb = text.partition("x")
    return int(ranks), float(mb)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def pkg_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def ingest_row(tool: str, src: Path, work: Path, out: Path, input_bytes: int, repeat: int, timeout_s: float,
               ranks: int, tb_max_ranks: int) -> dict:
    """One tool on one run: best and median of ``repeat`` runs (ours and ours_single leave their last output at
    ``out``)."""
    if tool == "tb_profiler_ascend" and ranks > tb_max_ranks:
        return {"status": "skipped", "note": f"the loader starts one process per rank at once ({ranks:,}); "
                                             f"measured up to {tb_max_ranks} ranks"}
    cmd, why = tools.commands(tool, src, work, out)
    if cmd is None:
        return {"status": why, **({"note": "this version has no sharded ingest: ours is the single file"}
                                  if tool == "ours_single" else {})}
    runs = []
    for _ in range(repeat):
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        shutil.rmtree(work / "msprof_out", ignore_errors=True)
        res = run_measured(cmd, timeout_s=timeout_s)
        if res["timed_out"]:
            return {"status": "timeout", "note": f"stopped after {timeout_s:g} s", "command": cmd}
        if res["rc"] != 0:
            tail = (res["stderr"].strip().splitlines() or ["(no output)"])[-1]
            return {"status": "failed", "note": f"exit {res['rc']}: {tail[:300]}", "command": cmd}
        runs.append(res)
    best = min(runs, key=lambda r: r["wall_s"])
    median = statistics.median(r["wall_s"] for r in runs)
    row = {"status": "ok", "input_mb": round(input_bytes / 1e6, 3), "wall_s": round(best["wall_s"], 3),
           "wall_s_median": round(median, 3), "mb_per_s": round(input_bytes / 1e6 / best["wall_s"], 3),
           "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
           "tree_rss_mb": round(max(r["tree_rss_mb"] for r in runs), 1), "runs": len(runs), "command": cmd,
           # CPU seconds of the fastest run: steadier than the wall on a shared machine
           "cpu_s": round(best["cpu_s"], 2)}
    detail = _last_json_line(best["stdout"])
    if detail is not None:
        row["detail"] = detail
    if tool in ("ours", "ours_single") and out.exists():
        row["out_mb"] = round((dir_bytes(out) if out.is_dir() else out.stat().st_size) / 1e6, 2)
        if (out / "cluster.duckdb").is_file():  # the sharded layout: what is opened for the whole run
            row["cluster_db_mb"] = round((out / "cluster.duckdb").stat().st_size / 1e6, 3)
            row["shards"] = len(list((out / "shards").glob("*.duckdb")))
    return row


def _last_json_line(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def publish(store, run_id: str, outputs: list[Path]) -> Path | None:
    """Make the first output that exists the run's database in ``store``: a sharded run folder's manifest,
    cluster.duckdb and shards move into the run's folder (the layout the server's worker writes), a single file
    becomes its ``run.duckdb``. Returns the output used, None when there is none."""
    from ascendscope.ingest import layout

    run_dir = store.run_dir(run_id)
    for out in outputs:
        if out.is_dir() and (out / layout.MANIFEST).is_file():
            for name in (layout.CLUSTER_DB, layout.SHARDS_DIR, layout.MANIFEST):  # the manifest last: then a run
                os.replace(out / name, run_dir / name)
            return out
        if out.is_file():
            os.replace(out, store.db_path(run_id))
            return out
    return None


def viewport(data: Path, run_id: str, clients: list[int], seconds: float) -> list[dict]:
    from ascendscope.bench.concurrency import Scenario, measure

    scenario = Scenario("viewport", 0, 0, 24, (1.0, 0.0, 0.0), tuple(clients))
    opts = argparse.Namespace(seconds=seconds, seed=0, before=None, workers=None)
    rows = []
    for n in clients:
        res = measure(data, run_id, scenario, n, "after", opts)
        rows.append({"clients": n, "requests": res["requests"], "req_per_s": res["req_per_s"],
                     "p50_ms": res["latency_ms"]["p50"], "p95_ms": res["latency_ms"]["p95"],
                     "errors": res["errors"],
                     "server_cpu_s": round(res["cpu_ms_per_request"] * res["requests"] / 1000, 2)})
    return rows


def ray_row(src: Path, work: Path, timeout_s: float) -> dict:
    """Throughput of ``executor="ray"`` with 2 local workers over 1 (target: ≥ 0.8 × 2 = 1.6)."""
    try:
        from ascendscope.ingest.shards import ingest_sharded
    except ImportError:
        return {"status": "not available", "note": "this version has no ingest.shards"}
    if not tools.installed("ray"):
        return {"status": "not installed", "note": "ray (the ray extra)"}
    if "workers" not in inspect.signature(ingest_sharded).parameters:
        return {"status": "not available", "note": "ingest_sharded takes no worker count"}
    walls = {}
    for workers in (1, 2):
        out = work / f"ray_{workers}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "ascendscope.bench.tools", "ours", str(src), str(out), "--executor", "ray",
               "--workers", str(workers)]
        res = run_measured(cmd, timeout_s=timeout_s)
        shutil.rmtree(out, ignore_errors=True)
        if res["rc"] != 0 or res["timed_out"]:
            tail = (res["stderr"].strip().splitlines() or ["(no output)"])[-1]
            return {"status": "failed", "note": f"{workers} worker(s): {tail[:300]}", "command": cmd}
        walls[workers] = res["wall_s"]
    return {"status": "ok", "wall_s_1": round(walls[1], 2), "wall_s_2": round(walls[2], 2),
            "speedup_2": round(walls[1] / walls[2], 2)}


def targets(sizes: list[dict], ray: dict) -> list[dict]:
    """Each target of issue #11 item 5 beside what was measured (None where it was not)."""
    out = []
    for s in sizes:
        ing = s["ingest"]
        ours, floor = ing["ours"], ing["floor"]
        label = f"{s['ranks']} rank(s)"
        if ours.get("status") == "ok" and floor.get("status") == "ok":
            out.append({"target": f"ingest ≥ 0.6 × the read_json floor ({label})", "want": 0.6,
                        "got": round(ours["mb_per_s"] / floor["mb_per_s"], 2)})
        for peer in PEER_PACKAGES:
            row = ing[peer]
            if row.get("status") == "ok" and ours.get("status") == "ok":
                out.append({"target": f"ingest ≥ 10 × {peer} ({label})", "want": 10.0, "got": row["ours_x"]})
        if ours.get("status") == "ok":
            out.append({"target": f"peak RSS per worker ≤ 1.5 GB ({label})", "want": 1536,
                        "got": ours["peak_rss_mb"], "lower_is_better": True})
        paint = s.get("first_paint") or {}
        if s["ranks"] >= 1000 and "cold_ms" in paint:
            out.append({"target": f"first paint ≤ 2 s ({label})", "want": 2000, "got": paint["cold_ms"],
                        "lower_is_better": True})
    if ray.get("status") == "ok":
        out.append({"target": "Ray, 2 workers ≥ 1.6 × 1 worker", "want": 1.6, "got": ray["speedup_2"]})
    for t in out:
        t["met"] = t["got"] <= t["want"] if t.pop("lower_is_better", False) else t["got"] >= t["want"]
    return out


def table(report: dict) -> str:
    lines = [f"ascendscope bench suite ({'quick' if report['quick'] else 'full'}), {report['cpus']} cores, "
             f"load {report['load_start']} → {report['load_end']}", ""]
    head = f"{'ranks':>5} {'tool':<20} {'input MB':>9} {'wall s':>8} {'cpu s':>8} {'MB/s':>8} {'peak RSS':>9} " \
           f"{'tree RSS':>9} {'ours ×':>7}  note"
    lines += [head, "-" * len(head)]
    for s in report["sizes"]:
        for tool in TOOLS:
            r = s["ingest"][tool]
            if r.get("status") == "ok":
                lines.append(f"{s['ranks']:>5} {tool:<20} {r['input_mb']:>9.1f} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} "
                             f"{r['mb_per_s']:>8.1f} {r['peak_rss_mb']:>8.0f}M {r['tree_rss_mb']:>8.0f}M "
                             + (f"{r['ours_x']:>7.2f}" if "ours_x" in r else f"{'-':>7}"))
            else:
                lines.append(f"{s['ranks']:>5} {tool:<20} {r['status']:>9}  {r.get('note', '')}")
    lines += ["", f"{'ranks':>5} {'first paint cold':>17} {'warm':>8} {'slices':>8} | viewport p95 (req/s) by clients"]
    for s in report["sizes"]:
        p = s.get("first_paint") or {}
        paint = (f"{p['cold_ms']:>15.0f}ms {p['warm_ms']:>6.0f}ms {p['slices_drawn']:>8}" if "cold_ms" in p
                 else f"{p.get('error', 'not measured'):>33}")
        vp = "  ".join(f"{v['clients']}: {v['p95_ms']:.0f} ms ({v['req_per_s']:.0f})" for v in s.get("viewport", []))
        lines.append(f"{s['ranks']:>5} {paint} | {vp}")
    ray = report["ray"]
    lines += ["", "Ray, 2 local workers vs 1: " + (f"{ray['speedup_2']}× ({ray['wall_s_1']} → {ray['wall_s_2']} s)"
                                                   if ray.get("status") == "ok"
                                                   else f"{ray['status']} ({ray.get('note', '')})"), ""]
    for t in report["targets"]:
        lines.append(f"{'met ' if t['met'] else 'GAP '} {t['target']}: {t['got']} (target {t['want']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench suite", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="tiny runs (" + ", ".join(f"{r}×{mb:g} MB" for r, mb in QUICK_SIZES) + "), one repeat, "
                         "1 s per viewport measurement, no Ray: a smoke test of every row")
    ap.add_argument("--sizes", nargs="+", type=parse_size, metavar="RANKSxMB",
                    help="run sizes as ranks x trace MB per rank (default "
                         + " ".join(f"{r}x{mb:g}" for r, mb in FULL_SIZES) + ")")
    ap.add_argument("--tools", nargs="+", choices=TOOLS, default=TOOLS)
    ap.add_argument("--repeat", type=int, default=None, help="runs of ours and the floor per size (default 3, quick 1)")
    ap.add_argument("--peer-repeat", type=int, default=1, help="runs of each peer per size (default 1)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--seconds", type=float, default=None, help="per viewport measurement (default 10, quick 3)")
    ap.add_argument("--timeout", type=float, default=1800, help="per tool run, seconds")
    ap.add_argument("--tb-max-ranks", type=int, default=64,
                    help="largest run given to the tb loader, which starts one process per rank at once")
    ap.add_argument("--no-paint", action="store_true")
    ap.add_argument("--no-viewport", action="store_true")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--json", help="write the full report here")
    ap.add_argument("--cache", default=os.environ.get("ASCENDSCOPE_BENCH_CACHE", "bench/out"),
                    help="generated runs are kept here between invocations (default bench/out)")
    args = ap.parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    repeat = args.repeat or (1 if args.quick else 3)
    seconds = args.seconds or (3.0 if args.quick else 10.0)

    from ascendscope.server.runs import RunStore

    cache = Path(args.cache).resolve()
    work = cache / f"suite_{os.getpid()}"
    serve = work / "serve"
    store = RunStore(serve)
    report = {"quick": args.quick, "cpus": os.cpu_count(), "python": platform.python_version(),
              "load_start": load(), "versions": {"ascendscope": pkg_version("ascendscope"),
                                                 "duckdb": pkg_version("duckdb"),
                                                 **{p: pkg_version(d) for p, d in PEER_PACKAGES.items()}},
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sizes": []}
    try:
        for ranks, mb in sizes:
            print(f"[{ranks} rank(s) × {mb:g} MB] generating (once) …", file=sys.stderr, flush=True)
            run_dir, truth = ensure_run(cache, mb, ranks, 0)
            src = (run_dir / "data").resolve()
            files = [p for p in src.rglob("*") if p.is_file()]
            total, trace_bytes = sum(p.stat().st_size for p in files), sum(p.stat().st_size for p in tools.traces(src))
            run = store.create_run(f"gen_{ranks}r", str(src))
            size = {"ranks": ranks, "trace_mb_per_rank": mb, "input_mb": round(total / 1e6, 3),
                    "trace_mb": round(trace_bytes / 1e6, 3), "files": len(files),
                    "events": sum(r["total_events"] for r in truth["ranks"]), "run_id": run.id,
                    "load_before": load(), "ingest": {}}
            outputs = {"ours": work / "ours_out", "ours_single": work / "single.duckdb"}
            for tool in TOOLS:
                if tool not in args.tools:
                    size["ingest"][tool] = {"status": "not asked"}
                    continue
                print(f"[{ranks} rank(s)] {tool} …", file=sys.stderr, flush=True)
                size["ingest"][tool] = ingest_row(tool, src, work, outputs.get(tool, work / "unused"),
                                                  trace_bytes if tool == "floor" else total,
                                                  args.peer_repeat if tool in PEER_PACKAGES else repeat,
                                                  args.timeout, ranks, args.tb_max_ranks)
            # the server opens what ours wrote (sharded when this version has it), as its worker would have
            served = publish(store, run.id, list(outputs.values()))
            size["served"] = next((t for t, o in outputs.items() if o == served), None)
            for out in outputs.values():
                shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
            ours = size["ingest"]["ours"]
            for row in size["ingest"].values():
                if row.get("status") == "ok" and ours.get("status") == "ok":
                    row["ours_x"] = round(ours["mb_per_s"] / row["mb_per_s"], 3)
            if served is not None:
                store.set_status(run.id, "ready")
                if not args.no_paint:
                    print(f"[{ranks} rank(s)] first paint …", file=sys.stderr, flush=True)
                    size["first_paint"] = paint_one(serve, run.id, 1 if args.quick else 3)
                if not args.no_viewport:
                    print(f"[{ranks} rank(s)] viewport at {args.clients} clients …", file=sys.stderr, flush=True)
                    size["viewport"] = viewport(serve, run.id, args.clients, seconds)
            size["load_after"] = load()
            report["sizes"].append(size)
            if args.json:  # what is measured so far survives a run stopped part way
                Path(args.json).write_text(json.dumps(report, indent=1))
        if args.no_ray or args.quick:  # Ray's start alone takes most of a quick run's time
            report["ray"] = {"status": "not asked", "note": "--quick" if args.quick else "--no-ray"}
        else:
            report["ray"] = ray_row(_ray_src(cache, sizes), work, args.timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["load_end"] = load()
    report["targets"] = targets(report["sizes"], report["ray"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(table(report))
    return 0


def _ray_src(cache: Path, sizes: list[tuple[int, float]]) -> Path:
    """Ray spreads rank tasks: it is measured on the 8-rank run (8 tasks of tens of MB keep 2 workers busy and
    even, where 1,000 tiny ones would time Ray's per-task overhead), or the run with the most ranks."""
    ranks, mb = next((s for s in sizes if s[0] == 8), max(sizes))
    return (ensure_run(cache, mb, ranks, 0)[0] / "data").resolve()


def paint_one(serve: Path, run_id: str, reloads: int) -> dict:
    from ascendscope.bench.paint import first_paint

    res = first_paint(serve, [run_id], reloads=reloads)
    return res.get(run_id) or {"error": res.get("error", "no answer")}


if __name__ == "__main__":
    sys.exit(main())
