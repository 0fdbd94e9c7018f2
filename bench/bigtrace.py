"""One big trace: its read as byte ranges on every core against the whole-file read, interleaved in the same
minutes, beside the one-core ``read_json`` floor.

    python -m ascendscope.bench.bigtrace RANK_FOLDER [--rounds 2] [--modes floor read-whole read-ranges ...]

Each measurement runs in a fresh child process (``child MODE RANK_FOLDER OUT``) and reports its wall time, its CPU
time (user + system, every thread), its peak RSS and the trace's events. The modes:

* ``floor``: DuckDB's ``read_json`` of the trace into the typed columns our ingest asks for, on one thread, in
  memory (``--floor-memory``: its limit, 1GB by default; a 10 GB trace needs about 9GB not to spill);
* ``read-whole`` / ``read-ranges``: our trace read alone (``TraceLoad.read``: the typed read and its checks), the
  whole file by one reader, or cut into byte ranges read on every DuckDB thread (``ingest.tracesplit``);
* ``ingest-whole`` / ``ingest-ranges``: the rank's whole single-file ingest (``ingest_path``) either way;
* ``sharded``: the ingest the server runs (``ingest_sharded``), with the times at which the manifest first
  announces the rank's overview (``overview_s``, ``ingest.overview``: every lane on screen; with what writing it
  cost the task, ``overview_cost_s``) and says the whole rank is ready (``rank_ready_s``).

The table gives each mode's best wall and every round's, CPU seconds, MB/s of the trace by wall, CPU µs per
trace event and peak RSS; the rounds alternate the modes, so each pair shares the machine's load. ``--before
CHECKOUT`` (``git worktree add /tmp/before <commit>``) runs each mode but ``floor`` from that checkout too, right
after this one's, as ``MODE@before`` (the checkout imported first, as ``bench.served`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

MODES = ("floor", "read-whole", "read-ranges", "ingest-whole", "ingest-ranges", "sharded")
FLOOR_MEMORY_ENV = "ASCENDSCOPE_BENCH_FLOOR_MEMORY"  # the floor's DuckDB memory limit (--floor-memory)
NO_SPLIT = 1 << 62  # SPLIT_MIN_BYTES that no file reaches: the whole-file read


def _trace(src: Path) -> Path:
    found = sorted(src.rglob("trace_view.json"))
    if len(found) != 1:
        raise SystemExit(f"{src}: expected one trace_view.json, found {len(found)}")
    return found[0]


def child(mode: str, src: Path, out: Path) -> dict:
    import duckdb

    from ascendscope.ingest import sqlfuncs, tracesplit
    from ascendscope.ingest.trace import EVENT_COLUMNS, TraceLoad

    trace = _trace(src)
    if mode.endswith("-whole"):
        tracesplit.SPLIT_MIN_BYTES = NO_SPLIT
    t0 = time.perf_counter()
    if mode == "floor":
        con = duckdb.connect()
        con.execute("SET threads = 1")
        con.execute(f"SET memory_limit = '{os.environ.get(FLOOR_MEMORY_ENV, '1GB')}'")
        con.execute(f"CREATE TABLE ev AS SELECT * FROM read_json(?, format = 'array', "
                    f"columns = {EVENT_COLUMNS.format()})", [str(trace)])
        events = con.execute("SELECT count(*) FROM ev").fetchone()[0]
    elif mode.startswith("read-"):
        con = duckdb.connect()
        con.execute("SET memory_limit = '1GB'")
        sqlfuncs.install(con)
        tl = TraceLoad(con.cursor(), "s_", trace, out, trace.name, split_read=True)
        tl.read()
        events = con.execute("SELECT count(*) FROM s_ev_t").fetchone()[0]
    elif mode == "sharded":
        return _sharded(src, out, t0)
    else:
        from ascendscope.ingest.pipeline import ingest_path

        ingest_path(src, out / "run.duckdb")
        with duckdb.connect(str(out / "run.duckdb"), read_only=True) as con:
            events = con.execute("SELECT count(*) FROM slices").fetchone()[0]  # (slices, not events: a check)
    wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF)
    return {"mode": mode, "wall_s": round(wall, 3), "cpu_s": round(me.ru_utime + me.ru_stime, 3),
            "peak_rss_mb": round(me.ru_maxrss / 1024, 1), "events": int(events), "trace_bytes": trace.stat().st_size}


def _sharded(src: Path, out: Path, t0: float) -> dict:
    """``ingest_sharded`` with a watcher of its manifest: when the overview was announced."""
    import threading

    from ascendscope.ingest.shards import ingest_sharded

    seen: dict[str, float] = {}
    stop = threading.Event()

    def watch():
        while not stop.wait(0.1):
            try:
                manifest = json.loads((out / "run" / "manifest.json").read_text())
            except (OSError, ValueError):
                continue
            if "overview_s" not in seen and any(e.get("overview") for e in manifest["shards"]):
                seen["overview_s"] = round(time.perf_counter() - t0, 3)
                for note in (out / "run" / ".progress").glob("*.overview.json"):
                    seen["overview_cost_s"] = json.loads(note.read_text()).get("seconds")
            if "rank_ready_s" not in seen and all(e["status"] == "ready" for e in manifest["shards"]):
                seen["rank_ready_s"] = round(time.perf_counter() - t0, 3)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    summary = ingest_sharded(src, out / "run")
    wall = time.perf_counter() - t0
    stop.set()
    watcher.join()
    me = resource.getrusage(resource.RUSAGE_SELF)
    trace = _trace(src)
    return {"mode": "sharded", "wall_s": round(wall, 3), **seen,
            "cpu_s": round(me.ru_utime + me.ru_stime, 3), "peak_rss_mb": round(me.ru_maxrss / 1024, 1),
            "events": int(sum((summary.get("slices_per_kind") or {}).values())), "trace_bytes": trace.stat().st_size}


def measure(mode: str, src: Path, checkout: Path | None = None) -> dict:
    """One child's figures; CPU and peak RSS as ``bench.measure`` samples them over its whole process tree (the
    shard tasks run in a pool the child's fork server starts, which its own rusage does not count). ``checkout``:
    that checkout's code runs the mode, reported as ``MODE@before``."""
    from .measure import run_measured
    from .served import shim_for

    env = None
    if checkout is not None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(shim_for(checkout)), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory(prefix="bigtrace-", dir=os.environ.get("TMPDIR")) as tmp:
        got = run_measured([sys.executable, "-m", "ascendscope.bench.bigtrace", "child", mode, str(src), tmp],
                           timeout_s=3 * 3600, env=env)
    if got["rc"] != 0:
        raise SystemExit(f"{mode} failed: {got['stderr'].strip()[-2000:]}")
    out = json.loads(got["stdout"].strip().splitlines()[-1])
    if checkout is not None:
        out["mode"] = f"{mode}@before"
        out.setdefault("overview_s", out.pop("first_window_s", None))  # an older checkout's first-window preview
    out.update(cpu_s=round(max(got["cpu_s"], out["cpu_s"]), 3), peak_rss_mb=round(got["peak_rss_mb"], 1),
               tree_rss_mb=round(got["tree_rss_mb"], 1))
    return out


def table(results: list[dict], events: int) -> str:
    lines = ["| mode | wall, best (rounds) | CPU s (best round) | MB/s by wall | CPU µs / event | peak RSS (largest "
             "process) | overview |", "|---|---:|---:|---:|---:|---:|---:|"]
    for mode in dict.fromkeys(r["mode"] for r in results):
        rows = [r for r in results if r["mode"] == mode]
        best = min(rows, key=lambda r: r["wall_s"])
        mb = best["trace_bytes"] / 1e6
        walls = " / ".join(f"{r['wall_s']:.2f}" for r in rows)
        lines.append(f"| {mode} | {best['wall_s']:.2f} s ({walls}) | "
                     f"{best['cpu_s']:.2f} | {mb / best['wall_s']:.0f} | {1e6 * best['cpu_s'] / events:.2f} | "
                     f"{max(r['peak_rss_mb'] for r in rows):,.0f} MB | "
                     + (f"{best['overview_s']} s |" if best.get("overview_s") is not None else "– |"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["child"]:
        print(json.dumps(child(argv[1], Path(argv[2]), Path(argv[3]))))
        return 0
    ap = argparse.ArgumentParser(prog="ascendscope bench bigtrace", description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a rank folder (or run folder) holding one trace_view.json")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--floor-memory", default="1GB",
                    help="the floor's DuckDB memory limit: its events table whole in memory needs about 0.85 × the "
                         "trace (past the limit it spills to disk, which the floor should not pay)")
    ap.add_argument("--before", type=Path, help="a checkout of the version to compare with (git worktree add): "
                                                    "each mode but floor runs from it too, interleaved")
    args = ap.parse_args(argv)
    os.environ[FLOOR_MEMORY_ENV] = args.floor_memory
    results = []
    started = time.strftime("%H:%M", time.gmtime())
    for _ in range(args.rounds):
        for mode in args.modes:
            for checkout in (None, args.before) if args.before and mode != "floor" else (None,):
                results.append({**measure(mode, args.src, checkout), "load": round(os.getloadavg()[0], 1)})
                print(json.dumps(results[-1]), file=sys.stderr)
    events = next((r["events"] for r in results if r["mode"] in ("floor", "read-whole", "read-ranges")), None)
    if events is None:
        events = measure("floor", args.src)["events"]
    print(f"{started}–{time.strftime('%H:%M', time.gmtime())} UTC, load {os.getloadavg()[0]:.1f}, "
          f"{events:,} events, trace {results[0]['trace_bytes'] / 1e6:,.0f} MB")
    print(table(results, events))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
