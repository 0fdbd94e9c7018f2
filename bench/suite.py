"""The whole comparison in one run: ``ascendscope bench suite [--quick] [--huge] [--json PATH]``.

For each run size of issue #17's table (ranks × trace MB per rank; generated once by ``sample_data.generate`` and
cached), on the same files, interleaved in the same minutes: our ingest end to end (sharded, as the server runs
it, and into one file), the floor of our stack (DuckDB ``read_json`` of every trace into typed columns, nothing
else), and the peers that apply to that size — msprof-analyze's cluster analysis and torch-tb-profiler-ascend's
loader (``bench.tools``) — each in a fresh child process measured by ``bench.measure`` (wall, CPU seconds, MB/s
over the bytes it was given, peak RSS of its largest process and of its whole process tree) and as a ratio to ours
(``ours_x`` = our MB/s ÷ its MB/s).

While our sharded ingest runs, the run folder is watched: when the Cluster / Summary / Communication views could
first answer (the first manifest), when a first rank and rank 0 became browsable, and when the run was complete
(``insight``); and its progress, as it reports it, is logged: when it first moved, and the longest time it stood
still (``progress``). Then, on the run we ingested: time to first timeline paint in chromium (``bench.paint``)
and timeline viewport latency at 1 and 50 clients (``bench.concurrency``). Last, when Ray is installed, the Ray
path's throughput with 2 local workers against 1 on the 8-rank run. ``--huge`` adds a single trace of ~10 GB
(ours only: wall, MB/s and peak RSS).

A peer that is not installed (they are the ``peers`` extra), or that does not apply, gets a row with that status
and no numbers. Prints one table and, with ``--json``, writes every figure. ``targets`` lists each target of issue
#17 with the measured value beside it and whether it holds.
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
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ascendscope.bench import tools
from ascendscope.bench.ingest import dir_bytes, ensure_run
from ascendscope.bench.measure import run_measured

TOOLS = ["ours", "ours_single", "floor", "msprof_analyze", "tb_profiler_ascend"]
PEER_PACKAGES = {"msprof_analyze": "msprof-analyze", "tb_profiler_ascend": "torch-tb-profiler-ascend"}
# issue #17's table: (ranks, MiB of trace_view.json per rank, the tools run on it)
FULL_SIZES = [
    (1, 290.0, ("ours", "ours_single", "floor", "tb_profiler_ascend")),  # trace 304 MB, run ~425 MB
    (8, 20.0, ("ours", "ours_single", "floor", "msprof_analyze", "tb_profiler_ascend")),  # the peers' 8 ranks, Ray
    (64, 8.7, ("ours", "ours_single", "floor", "msprof_analyze")),  # traces ~585 MB, run ~720 MB
    (1000, 0.1, ("ours", "floor")),  # 1,000 tiny ranks, ~130 MB of traces
    (1000, 0.2, ("ours", "ours_single", "floor")),  # 1,000 ranks of ~0.36 MB, ~270 MB of traces
    (8, 1050.0, ("ours", "floor")),  # 8 × 1.1 GB
]
QUICK_SIZES = [(1, 0.5, tuple(TOOLS)), (8, 0.1, tuple(TOOLS))]
HUGE_SIZE = (1, 9600.0, ("ours",))  # a single ~10 GB trace: RSS per process
WATCH_S = 0.1  # how often the run folder is looked at while ours ingests


def parse_size(text: str) -> tuple[int, float, tuple]:
    ranks, _, mb = text.partition("x")
    return int(ranks), float(mb), tuple(TOOLS)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def pkg_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


class Watcher:
    """Watches a sharded run folder being written (a thread): the seconds, from ``start``, at which its first
    manifest appeared (the small files' views answer), a first rank and rank 0 became browsable, and the run was
    complete."""

    def __init__(self, out: Path):
        self.out, self.times = out, {}
        self.stop = threading.Event()
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self._run, name="suite-watch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            last = self.stop.wait(WATCH_S)  # (once stopped, one more look: the ingest may have just finished)
            try:
                manifest = json.loads((self.out / "manifest.json").read_text())
            except (OSError, ValueError):
                if last:
                    return
                continue
            now = round(time.perf_counter() - self.t0, 2)
            ready = [r for e in manifest.get("shards", []) if e.get("status") == "ready" for r in e.get("ranks", [])]
            self.times.setdefault("cluster_view_s", now)
            if ready:
                self.times.setdefault("first_rank_s", now)
            if 0 in ready:
                self.times.setdefault("rank0_s", now)
            if manifest.get("status") == "complete":
                self.times.setdefault("complete_s", now)
                return
            if last:
                return

    def done(self) -> dict:
        self.stop.set()
        self.thread.join(5)
        return dict(self.times)


def progress_summary(path: Path, wall_s: float) -> dict | None:
    """From the progress log ours wrote: when the bytes done first moved, and the longest they stood still."""
    try:
        lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return None
    moves = [0.0] + [float(t) for t, done, _ in lines if int(done) > 0]
    if len(moves) < 2:
        return {"first_move_s": None, "longest_still_s": round(wall_s, 2), "events": len(lines)}
    changes = [float(t) for (t, done, _), prev in zip(lines[1:], lines) if done != prev[1]] or moves[1:2]
    points = sorted({0.0, *changes, wall_s})
    return {"first_move_s": round(moves[1], 2), "longest_still_s": round(max(b - a for a, b in zip(points, points[1:])),
                                                                          2), "events": len(lines)}


def ingest_runs(tools_here: list[str], src: Path, work: Path, outputs: dict[str, Path], input_bytes: dict[str, int],
                repeat: int, peer_repeat: int, timeout_s: float, ranks: int, tb_max_ranks: int) -> dict[str, dict]:
    """The tools on one run, interleaved: round after round, each tool once (so every tool sees the same minutes
    of a shared machine), ``repeat`` rounds for ours and the floor, ``peer_repeat`` for the peers; then one row
    per tool (``row``). Ours and ours_single leave their last output in ``outputs``."""
    runs: dict[str, list[dict]] = {t: [] for t in tools_here}
    rows: dict[str, dict] = {}
    for tool in tools_here:
        if tool == "tb_profiler_ascend" and ranks > tb_max_ranks:
            rows[tool] = {"status": "skipped", "note": f"the loader starts one process per rank at once "
                                                       f"({ranks:,}); measured up to {tb_max_ranks} ranks"}
        elif tools.commands(tool, src, work, outputs.get(tool, work / "unused"))[0] is None:
            why = tools.commands(tool, src, work, outputs.get(tool, work / "unused"))[1]
            rows[tool] = {"status": why, **({"note": "this version has no sharded ingest: ours is the single file"}
                                            if tool == "ours_single" else {})}
    for round_ in range(max(repeat, peer_repeat)):
        for tool in tools_here:
            if tool in rows or round_ >= (peer_repeat if tool in PEER_PACKAGES else repeat):
                continue
            print(f"[{ranks} rank(s)] {tool} (round {round_ + 1}) …", file=sys.stderr, flush=True)
            res = one_run(tool, src, work, outputs.get(tool, work / "unused"), timeout_s)
            if res.get("status"):
                rows[tool] = res
            else:
                runs[tool].append(res)
    for tool in tools_here:
        if tool not in rows:
            rows[tool] = row(tool, runs[tool], input_bytes[tool], outputs.get(tool))
    return rows


def one_run(tool: str, src: Path, work: Path, out: Path, timeout_s: float) -> dict:
    """One measured run of ``tool`` (ours also watched: ``insight`` and ``progress``), or a row saying why not."""
    cmd, _ = tools.commands(tool, src, work, out)
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    shutil.rmtree(work / "msprof_out", ignore_errors=True)
    watcher = Watcher(out) if tool == "ours" else None
    res = run_measured(cmd, timeout_s=timeout_s)
    if watcher is not None:
        res["insight"] = watcher.done()
        res["progress"] = progress_summary(work / tools.PROGRESS_LOG, res["wall_s"])
    if res["timed_out"]:
        return {"status": "timeout", "note": f"stopped after {timeout_s:g} s", "command": cmd}
    if res["rc"] != 0:
        tail = (res["stderr"].strip().splitlines() or ["(no output)"])[-1]
        return {"status": "failed", "note": f"exit {res['rc']}: {tail[:300]}", "command": cmd}
    res["command"] = cmd
    return res


def row(tool: str, runs: list[dict], input_bytes: int, out: Path | None) -> dict:
    """A tool's row from its runs: the best wall (and that run's CPU, insight and progress), the median wall, the
    highest peak RSS."""
    best = min(runs, key=lambda r: r["wall_s"])
    median = statistics.median(r["wall_s"] for r in runs)
    out_row = {"status": "ok", "input_mb": round(input_bytes / 1e6, 3), "wall_s": round(best["wall_s"], 3),
               "wall_s_median": round(median, 3), "mb_per_s": round(input_bytes / 1e6 / best["wall_s"], 3),
               "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
               "tree_rss_mb": round(max(r["tree_rss_mb"] for r in runs), 1), "runs": len(runs),
               "command": best["command"],
               # CPU seconds of the fastest run: steadier than the wall on a shared machine
               "cpu_s": round(best["cpu_s"], 2), "walls": [round(r["wall_s"], 2) for r in runs]}
    for key in ("insight", "progress"):
        if best.get(key) is not None:
            out_row[key] = best[key]
    detail = _last_json_line(best["stdout"])
    if detail is not None:
        out_row["detail"] = detail
    if tool in ("ours", "ours_single") and out is not None and out.exists():
        out_row["out_mb"] = round((dir_bytes(out) if out.is_dir() else out.stat().st_size) / 1e6, 2)
        if (out / "cluster.duckdb").is_file():  # the sharded layout: what is opened for the whole run
            out_row["cluster_db_mb"] = round((out / "cluster.duckdb").stat().st_size / 1e6, 3)
            out_row["shards"] = len(list((out / "shards").glob("*.duckdb")))
    return out_row


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
                     "p50_ms": res["request_ms"]["p50"], "p95_ms": res["request_ms"]["p95"],
                     "wrk_p95_ms": res["latency_ms"]["p95"],  # (wrk's, corrected for coordinated omission)
                     "errors": res["errors"],
                     "server_cpu_s": round(res["cpu_ms_per_request"] * res["requests"] / 1000, 2)})
    return rows


def ray_row(src: Path, work: Path, timeout_s: float, repeat: int = 1) -> dict:
    """Throughput of ``executor="ray"`` with 2 local workers over 1 (target: ≥ 1.6), interleaved ``repeat``
    times; the best wall of each."""
    try:
        from ascendscope.ingest.shards import ingest_sharded
    except ImportError:
        return {"status": "not available", "note": "this version has no ingest.shards"}
    if not tools.installed("ray"):
        return {"status": "not installed", "note": "ray (the ray extra)"}
    if "workers" not in inspect.signature(ingest_sharded).parameters:
        return {"status": "not available", "note": "ingest_sharded takes no worker count"}
    walls: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeat):
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
            walls[workers].append(res["wall_s"])
            cpus[workers].append(res["cpu_s"])
    return {"status": "ok", "wall_s_1": round(min(walls[1]), 2), "wall_s_2": round(min(walls[2]), 2),
            "cpu_s_1": round(min(cpus[1]), 2), "cpu_s_2": round(min(cpus[2]), 2),
            "speedup_2": round(min(walls[1]) / min(walls[2]), 2), "runs": repeat}


def _ratio(size: dict, tool: str) -> float | None:
    rows = size["ingest"]
    ours, other = rows.get("ours", {}), rows.get(tool, {})
    if ours.get("status") != "ok" or other.get("status") != "ok":
        return None
    return round(ours["mb_per_s"] / other["mb_per_s"], 2)


def floor_target(ranks: int) -> float | None:
    """Issue #17's share of the floor: 0.6 up to 8 ranks (one 300 MB rank, 8 × 20 MB), 0.5 for 64 ranks of ~10 MB;
    none for 1,000 tiny ranks, whose target is the whole ingest in 20 s."""
    if ranks >= 1000:
        return None
    return 0.5 if ranks >= 64 else 0.6


def targets(sizes: list[dict], ray: dict) -> list[dict]:
    """Each target of issue #17 beside what was measured (only where it was)."""
    out = []
    for s in sizes:
        ing = s["ingest"]
        ours = ing["ours"]
        label = f"{s['ranks']} rank(s)"
        floor = _ratio(s, "floor")
        want = floor_target(s["ranks"])
        if floor is not None and want is not None:
            out.append({"target": f"ingest ≥ {want} × the read_json floor ({label})", "want": want, "got": floor})
        if ing.get("tb_profiler_ascend", {}).get("status") == "ok" and ours.get("status") == "ok":
            out.append({"target": f"ingest ≥ 10 × tb_profiler_ascend ({label})", "want": 10.0,
                        "got": ing["tb_profiler_ascend"]["ours_x"]})
        lost = (ours.get("detail") or {}).get("not_loaded")
        if ours.get("status") == "ok" and lost is not None:
            out.append({"target": f"every file loaded ({label}; not loaded: {'; '.join(lost) or 'none'})",
                        "want": 0, "got": len(lost), "lower_is_better": True})
        if ours.get("status") == "ok":
            out.append({"target": f"peak RSS per worker ≤ 1.5 GB ({label})", "want": 1536,
                        "got": ours["peak_rss_mb"], "lower_is_better": True})
            if s["ranks"] >= 1000 and s["trace_mb_per_rank"] >= 0.2:
                out.append({"target": f"{s['ranks']:,} ranks of ~{s['input_mb'] / s['ranks']:.2f} MB ≤ 20 s end to end",
                            "want": 20.0, "got": ours["wall_s"], "lower_is_better": True})
            seen = ours.get("insight") or {}
            if s["ranks"] >= 1000 and "cluster_view_s" in seen:
                out.append({"target": f"Cluster/Summary/Communication answer within 10 s ({label})", "want": 10.0,
                            "got": seen["cluster_view_s"], "lower_is_better": True})
            moved = ours.get("progress") or {}
            if s["ranks"] <= 8 and s["trace_mb_per_rank"] >= 100 and moved.get("longest_still_s") is not None:
                # progress moves within a rank: never still for a quarter of the ingest
                out.append({"target": f"progress never still for 25 % of the ingest ({label})", "want": 25.0,
                            "got": round(100 * moved["longest_still_s"] / ours["wall_s"], 1),
                            "lower_is_better": True})
        paint = s.get("first_paint") or {}
        if s["ranks"] >= 1000 and "cold_ms" in paint:
            out.append({"target": f"first paint ≤ 2 s ({label})", "want": 2000, "got": paint["cold_ms"],
                        "lower_is_better": True})
    if ray.get("status") == "ok":
        out.append({"target": "Ray, 2 workers ≥ 1.6 × 1 worker (8 ranks)", "want": 1.6, "got": ray["speedup_2"]})
    for t in out:
        t["met"] = t["got"] <= t["want"] if t.pop("lower_is_better", False) else t["got"] >= t["want"]
    return out


def table(report: dict) -> str:
    lines = [f"ascendscope bench suite ({'quick' if report['quick'] else 'full'}), {report['cpus']} cores, "
             f"load {report['load_start']} → {report['load_end']}, {report.get('seconds', 0) / 60:.1f} min", ""]
    head = f"{'ranks':>5} {'MB/rank':>8} {'tool':<20} {'input MB':>9} {'wall s':>8} {'cpu s':>8} {'MB/s':>8} " \
           f"{'peak RSS':>9} {'tree RSS':>9} {'ours ×':>7}  views / rank 0 / ready (s) · progress first / still (s)"
    lines += [head, "-" * len(head)]
    for s in report["sizes"]:
        for tool in TOOLS:
            r = s["ingest"].get(tool)
            if r is None:
                continue
            lead = f"{s['ranks']:>5} {s['trace_mb_per_rank']:>8g} {tool:<20}"
            if r.get("status") == "ok":
                seen, moved = r.get("insight") or {}, r.get("progress") or {}
                extra = ""
                if seen:
                    extra = " / ".join(f"{seen[k]:.1f}" if k in seen else "–"
                                       for k in ("cluster_view_s", "rank0_s", "complete_s"))
                if moved:
                    first = moved.get("first_move_s")
                    extra += f" · {'–' if first is None else f'{first:.1f}'} / {moved['longest_still_s']:.1f}"
                lines.append(f"{lead} {r['input_mb']:>9.1f} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} "
                             f"{r['mb_per_s']:>8.1f} {r['peak_rss_mb']:>8.0f}M {r['tree_rss_mb']:>8.0f}M "
                             + (f"{r['ours_x']:>7.2f}" if "ours_x" in r else f"{'-':>7}") + f"  {extra}")
            else:
                lines.append(f"{lead} {r['status']:>9}  {r.get('note', '')}")
    lines += ["", f"{'ranks':>5} {'MB/rank':>8} {'first paint cold':>17} {'warm':>8} {'slices':>8} | "
                  "viewport p95 (req/s) by clients"]
    for s in report["sizes"]:
        p = s.get("first_paint") or {}
        paint = (f"{p['cold_ms']:>15.0f}ms {p['warm_ms']:>6.0f}ms {p['slices_drawn']:>8}" if "cold_ms" in p
                 else f"{p.get('error', 'not measured'):>33}")
        vp = "  ".join(f"{v['clients']}: {v['p95_ms']:.0f} ms ({v['req_per_s']:.0f})" for v in s.get("viewport", []))
        lines.append(f"{s['ranks']:>5} {s['trace_mb_per_rank']:>8g} {paint} | {vp}")
    ray = report["ray"]
    lines += ["", "Ray, 2 local workers vs 1: " + (f"{ray['speedup_2']}× ({ray['wall_s_1']} → {ray['wall_s_2']} s)"
                                                   if ray.get("status") == "ok"
                                                   else f"{ray['status']} ({ray.get('note', '')})"), ""]
    if report["quick"]:  # fixed costs dominate a run of a few MB: the verdicts below say nothing about the targets
        lines.append("(--quick: runs of a few MB, so the verdicts below only show the rows work; the targets are "
                     "judged at issue #17's sizes, without --quick)")
    for t in report["targets"]:
        lines.append(f"{'met ' if t['met'] else 'GAP '} {t['target']}: {t['got']} (target {t['want']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench suite", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="tiny runs (" + ", ".join(f"{r}×{mb:g} MB" for r, mb, _ in QUICK_SIZES) + "), one repeat, "
                         "1 s per viewport measurement, no Ray: a smoke test of every row")
    ap.add_argument("--sizes", nargs="+", type=parse_size, metavar="RANKSxMB",
                    help="run sizes as ranks x trace MiB per rank, every tool on each (default: issue #17's table, "
                         + " ".join(f"{r}x{mb:g}" for r, mb, _ in FULL_SIZES) + ", each with the tools that apply)")
    ap.add_argument("--huge", action="store_true", help=f"also a single trace of ~{HUGE_SIZE[1] / 1024:.0f} GiB "
                                                        "(ours only; needs ~15 GB of disk)")
    ap.add_argument("--tools", nargs="+", choices=TOOLS, default=TOOLS)
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds of ours, ours_single and the floor per size, interleaved (default 3, quick 1)")
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
    sizes = list(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)) + ([HUGE_SIZE] if args.huge else [])
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
    t0 = time.perf_counter()
    try:
        for ranks, mb, tools_here in sizes:
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
            asked = [t for t in TOOLS if t in tools_here and t in args.tools]
            size["ingest"] = ingest_runs(asked, src, work, outputs,
                                         {t: trace_bytes if t == "floor" else total for t in asked}, repeat,
                                         args.peer_repeat, args.timeout, ranks, args.tb_max_ranks)
            for tool in TOOLS:  # a row for every tool, saying why there are no numbers
                if tool not in size["ingest"]:
                    size["ingest"][tool] = ({"status": "not asked"} if tool not in args.tools else
                                            {"status": "not run", "note": "not part of this size's row of issue #17"})
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
            report["ray"] = ray_row(_ray_src(cache, sizes), work, args.timeout, repeat=min(repeat, 2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["load_end"] = load()
    report["seconds"] = round(time.perf_counter() - t0, 1)  # the whole suite, generation included
    report["targets"] = targets(report["sizes"], report["ray"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(table(report))
    return 0


def _ray_src(cache: Path, sizes: list[tuple]) -> Path:
    """Ray spreads shard tasks: it is measured on the first 8-rank run (8 tasks of tens of MB keep 2 workers busy
    and even, where 1,000 tiny ones would time Ray's per-task overhead), or the run with the most ranks."""
    ranks, mb, _ = next((s for s in sizes if s[0] == 8), max(sizes))
    return (ensure_run(cache, mb, ranks, 0)[0] / "data").resolve()


def paint_one(serve: Path, run_id: str, reloads: int) -> dict:
    from ascendscope.bench.paint import first_paint

    res = first_paint(serve, [run_id], reloads=reloads)
    return res.get(run_id) or {"error": res.get("error", "no answer")}


if __name__ == "__main__":
    sys.exit(main())
