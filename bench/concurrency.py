"""Many users at once: ``wrk`` walks against real servers, this version beside an older one, in the same minutes.

    ascendscope bench concurrency --before /tmp/before          # the table of docs/benchmarks.md
    ascendscope bench concurrency --quick                       # a smoke run on a small generated run

Scenarios (``--scenarios``), each on a generated run (``sample_data.generate``, ingested once into a store under
``--cache``; ``--store-1rank``/``--store-8rank`` give this version a store already made). The older version of
``--before`` always gets the same run ingested by its own code into one database file (the layout and schema it
reads; this version writes a run folder of shards), once, in a store of its own under ``--cache``:

* ``1rank``: one rank of ~1 M slices; every request is ``/timeline/slices`` for 4 of the 24 tracks on screen at
  1,600 px, at 1 and 50 clients;
* ``8rank``: 8 ranks, 8.8 GB of input; requests as a page makes them: 70 % slices (4 of 60 tracks on screen),
  15 % counters (4 of 16 counter tracks), 15 % flows, at 1, 5 and 50 clients.

Each connection of wrk runs on its own thread and walks its own random W/A/S/D path (``bench/wrk/walk.lua``),
with windows quantised as the page quantises them, asking for the binary columns as the page does (an older server
answers JSON). Each measurement gets a fresh server (no answer cached from the one before), and starts once its
query processes are all ready (``/api/health``); the before and after servers alternate measurement by
measurement and ``--repeat`` times, so both see the same load from the rest of the machine. This version is
measured twice (``--index both``): "after" with the run's index files removed first (``server.indexfiles``: each
track read from the database at its first look, as by the first user after an ingest before this version wrote
them ahead), then "warm" with the files that measurement wrote (as after a restart, or by the users who come
next). ``--index ahead`` measures the first look as it is now: the files removed, then written ahead as the
ingest worker writes them once a run is ready (``server.prewarm``, timed:
``prewarm_s``), then the server started.
At the highest client count, a second wrk asks ``/api/health`` on one connection meanwhile.

Reported per measurement: requests/s, latency p50/p95/p99/max of each request (timed by the wrk script; wrk's
own percentiles, also reported, are corrected for coordinated omission: see ``bench/wrk/summary.lua``), errors
(socket errors, timeouts, non-2xx), server CPU per request (all its processes), KB per answer, the load average,
and health p99. ``--soak S`` then runs the 8-rank mix at 50 clients for S seconds against this version and
reports the RSS of every server process at the start, the end and its peak. ``--json FILE`` keeps everything.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ascendscope.bench.served import Server, shim_for
from ascendscope.bench.wrkload import run_wrk, walk_config

QUICK = {"clients": [1, 4], "seconds": 2.0}
SOAK_SAMPLE_S = 30.0
WARM_S = 1.0  # a short walk of another seed before each measurement: databases opened, nothing else shared


@dataclass(frozen=True)
class Scenario:
    name: str
    ranks: int
    target_mb: float  # per rank, for sample_data.generate
    visible: int
    mix: tuple[float, float, float]  # slices, counters, flows
    clients: tuple[int, ...]


SCENARIOS = {
    "1rank": Scenario("1rank", 1, 390, 24, (1.0, 0.0, 0.0), (1, 50)),
    "8rank": Scenario("8rank", 8, 800, 60, (0.70, 0.15, 0.15), (1, 5, 50)),
}
QUICK_SCENARIO = Scenario("quick", 2, 0, 24, (0.70, 0.15, 0.15), (1, 4))


def prepare(cache: Path, sc: Scenario, checkout: Path | None = None) -> tuple[Path, str]:
    """A store with the scenario's generated run, ready (generated and ingested once, then reused). With
    ``checkout`` (an older version), the run is ingested by that version's own ``python -m ascendscope.ingest``
    into one database file (``run.duckdb``, the layout and schema it reads), in a store of its own; else by this
    version into a run folder of shards."""
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.sample_data.generate import generate_run, ops_for_target_mb
    from ascendscope.server.runs import DB_FILE, RunStore

    tag = f"_{hashlib.sha1(str(checkout.resolve()).encode()).hexdigest()[:8]}" if checkout else ""
    data = cache / f"concurrency_{sc.name}{tag}"
    store = RunStore(data)
    ready = [r for r in store.list() if r.status == "ready"]
    if ready:
        return data, ready[0].id
    src = cache / f"concurrency_{sc.name}_src"
    if not src.exists():
        ops = ops_for_target_mb(sc.target_mb, steps=3, seed=0) if sc.target_mb else 60
        print(f"generating {sc.ranks} rank(s), {ops} ops per step …", file=sys.stderr, flush=True)
        generate_run(src, ranks=sc.ranks, steps=3, ops_per_step=ops, seed=0)
    run = store.create_run(sc.name, str(src))
    print(f"ingesting {src} …", file=sys.stderr, flush=True)
    if checkout is not None:
        env = dict(os.environ, PYTHONPATH=str(shim_for(checkout)))
        done = subprocess.run([sys.executable, "-m", "ascendscope.ingest", str(src), "--out",
                               str(store.run_dir(run.id) / DB_FILE), "--quiet"], env=env, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(f"the older version could not ingest {src}: {done.stderr.strip()[-2000:]}")
        summary = {"ranks": list(range(sc.ranks))}
    else:
        summary = ingest_sharded(src, store.run_dir(run.id))
    store.set_status(run.id, "ready", summary={"ranks": summary.get("ranks")})
    return data, run.id


def one_store(data: Path) -> tuple[Path, str]:
    from ascendscope.server.runs import RunStore

    ready = [r for r in RunStore(data).list() if r.status == "ready"]
    if not ready:
        raise SystemExit(f"no ready run in {data}")
    return data, ready[0].id


def measure(data: Path, run_id: str, sc: Scenario, clients: int, version: str, args: argparse.Namespace,
            *, health: bool = False) -> dict:
    """One measurement on a fresh server: ``version`` "after" (this checkout, the run's index files removed
    first, as at the first look at a run when nothing wrote them ahead), "ahead" (removed, then written ahead as
    the ingest worker does: ``server.prewarm``), "warm" (this checkout, the index files that earlier measurements
    wrote kept, as after a restart: ``server.indexfiles``) or "before" (``args.before``)."""
    checkout = Path(args.before) if version == "before" else None
    prewarm_s = None
    if version in ("after", "ahead"):
        from ascendscope.server.indexfiles import FOLDER
        from ascendscope.server.runs import RunStore

        shutil.rmtree(RunStore(data).run_dir(run_id) / FOLDER, ignore_errors=True)
    if version == "ahead":
        from ascendscope.server.prewarm import prewarm
        from ascendscope.server.runs import RunStore
        from ascendscope.server.settings import Settings

        began = time.monotonic()
        prewarm(RunStore(data), run_id, Settings.from_env(environ={}, data_dir=str(data)), nice=0)
        prewarm_s = round(time.monotonic() - began, 2)
    workers = None if version == "before" else args.workers
    with Server(data, checkout=checkout, workers=workers) as srv:
        meta = srv.wait_ready(f"/api/runs/{run_id}/timeline/tracks")
        srv.wait_query_processes()
        config = walk_config(meta, run_id, visible=sc.visible, mix=sc.mix, seed=args.seed, binary=True)
        run_wrk(srv.base, "walk.lua", 1, WARM_S, dict(config, seed=args.seed + 99))  # every process opens the run
        side = {}
        probe = threading.Thread(target=lambda: side.update(run_wrk(srv.base, "health.lua", 1, args.seconds)))
        load = os.getloadavg()[0]
        cpu = srv.cpu_s()
        if health:
            probe.start()
        res = run_wrk(srv.base, "walk.lua", clients, args.seconds, config)
        cpu = srv.cpu_s() - cpu
        if health:
            probe.join()
        rss = srv.rss_mb()
    errors = sum(res["errors"].values())
    return {"scenario": sc.name, "clients": clients, "version": version, "requests": res["requests"],
            "req_per_s": res["req_per_s"], "request_ms": res["request_ms"], "latency_ms": res["latency_ms"],
            "errors": errors,
            "error_kinds": {k: v for k, v in res["errors"].items() if v},
            "cpu_ms_per_request": round(1000 * cpu / max(1, res["requests"]), 2),
            "kb_per_request": round(res["bytes"] / 1e3 / max(1, res["requests"]), 1),
            "load_avg": round(load, 2), "health": side.get("request_ms"), "health_wrk": side.get("latency_ms"),
            "health_errors":
                sum(side["errors"].values()) if side else None, "rss_mb": rss, "prewarm_s": prewarm_s}


def soak(data: Path, run_id: str, sc: Scenario, args: argparse.Namespace) -> dict:
    """The scenario at its highest client count for ``args.soak`` seconds; RSS of every server process at the
    start (before any request), every ``SOAK_SAMPLE_S`` and at the end, and its peak."""
    clients = max(sc.clients)
    with Server(data, workers=args.workers) as srv:
        meta = srv.wait_ready(f"/api/runs/{run_id}/timeline/tracks")
        srv.wait_query_processes()
        config = walk_config(meta, run_id, visible=sc.visible, mix=sc.mix, seed=args.seed + 7, binary=True)
        start = srv.rss_mb()
        series: list[tuple[float, dict]] = [(0.0, start)]
        out: dict = {}
        load = threading.Thread(target=lambda: out.update(run_wrk(srv.base, "walk.lua", clients, args.soak, config)))
        began = time.monotonic()
        load.start()
        while load.is_alive():
            load.join(SOAK_SAMPLE_S)
            series.append((round(time.monotonic() - began, 1), srv.rss_mb()))
        end = srv.rss_mb()
    pids = sorted({pid for _, rss in series for pid in rss})
    return {"scenario": sc.name, "clients": clients, "seconds": args.soak, "requests": out.get("requests"),
            "req_per_s": out.get("req_per_s"), "request_ms": out.get("request_ms"), "latency_ms": out.get("latency_ms"),
            "errors": sum((out.get("errors") or {}).values()),
            "rss_mb": {str(pid): {"start": start.get(pid), "end": end.get(pid),
                                  "peak": max(rss.get(pid, 0) for _, rss in series),
                                  "series": [[t, rss.get(pid)] for t, rss in series]} for pid in pids}}


def table(rows: list[dict]) -> str:
    """Each measurement, then per (scenario, clients) the median of each version and after ÷ before. Latencies are
    each request's own (``request_ms``), then wrk's p95/p99 corrected for coordinated omission (``latency_ms``);
    health p99 is each request's own, wrk's in brackets."""
    head = (f"{'scenario':<8} {'clients':>7} {'version':<7} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
            f"{'max ms':>7} {'wrk p95':>8} {'wrk p99':>8} {'CPU ms/req':>10} {'KB/req':>7} {'errors':>6} "
            f"{'health p99':>14} {'load':>5}")

    def line(sc, n, version, rps, own, wrk, cpu, kb, errors, health, health_wrk, load=None):
        hp = f"{health:.1f} ({health_wrk:.1f})" if health is not None else ""
        return (f"{sc:<8} {n:>7} {version:<7} {rps:>7.1f} {own['p50']:>7.1f} {own['p95']:>7.1f} {own['p99']:>7.1f} "
                f"{own['max']:>7.1f} {wrk['p95']:>8.1f} {wrk['p99']:>8.1f} {cpu:>10.2f} {kb:>7.1f} {errors:>6} "
                f"{hp:>14}" + (f" {load:>5.1f}" if load is not None else ""))

    lines = [head, "-" * len(head)]
    for r in rows:
        own = r.get("request_ms") or r["latency_ms"]  # (a report from before request_ms was kept)
        health = r.get("health")
        lines.append(line(r["scenario"], r["clients"], r["version"], r["req_per_s"], own, r["latency_ms"],
                          r["cpu_ms_per_request"], r["kb_per_request"], r["errors"],
                          health["p99"] if health else None, (r.get("health_wrk") or health or {}).get("p99"),
                          r["load_avg"])
                     + (f"  (index files written ahead in {r['prewarm_s']:.1f} s)" if r.get("prewarm_s") else ""))
    lines += ["", "medians:", head.replace("version", "       "), "-" * len(head)]
    keys = sorted({(r["scenario"], r["clients"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for sc, n in keys:
        med = {}
        for version in ("before", "after", "ahead", "warm"):
            sel = [r for r in rows if (r["scenario"], r["clients"], r["version"]) == (sc, n, version)]
            if not sel:
                continue

            def median_of(key, sel=sel):
                got = [r.get(key) or r["latency_ms"] for r in sel]
                return {k: statistics.median(g[k] for g in got) for k in ("p50", "p95", "p99", "max")}

            med[version] = rps = statistics.median(r["req_per_s"] for r in sel)
            health = [r["health"]["p99"] for r in sel if r.get("health")]
            health_wrk = [(r.get("health_wrk") or r["health"])["p99"] for r in sel if r.get("health")]
            lines.append(line(sc, n, version, rps, median_of("request_ms"), median_of("latency_ms"),
                              statistics.median(r["cpu_ms_per_request"] for r in sel),
                              statistics.median(r["kb_per_request"] for r in sel), sum(r["errors"] for r in sel),
                              statistics.median(health) if health else None,
                              statistics.median(health_wrk) if health_wrk else None))
        for version in ("after", "ahead", "warm"):
            if med.get("before") and version in med:
                lines.append(f"{'':<8} {'':>7} {'ratio':<7} {med[version] / med['before']:>6.2f}× ({version})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench concurrency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default=None, help="a checkout of the version to compare with (git worktree add)")
    ap.add_argument("--scenarios", nargs="+", choices=sorted(SCENARIOS), default=sorted(SCENARIOS))
    ap.add_argument("--clients", type=int, nargs="+", default=None, help="client counts (default: the scenario's)")
    ap.add_argument("--seconds", type=float, default=None,
                    help=f"length of each measurement (default 30, quick {QUICK['seconds']:g})")
    ap.add_argument("--repeat", type=int, default=2, help="measurements per (scenario, clients, version)")
    ap.add_argument("--workers", type=int, default=None, help="server processes of this version (default: its own)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mix", type=float, nargs=3, default=None, metavar=("SLICES", "COUNTERS", "FLOWS"),
                    help="shares of the request kinds, instead of the scenario's")
    ap.add_argument("--soak", type=float, default=0.0, help="then load this version for this many seconds (RSS)")
    ap.add_argument("--store-1rank", default=None,
                    help="a data dir holding the 1-rank run for this version (else generated)")
    ap.add_argument("--store-8rank", default=None,
                    help="a data dir holding the 8-rank run for this version (else generated)")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run: a small generated run, 1 and 4 clients, {QUICK['seconds']:g} s (or --seconds)")
    ap.add_argument("--index", choices=("cold", "ahead", "warm", "both", "all"), default="both",
                    help="this version with no index files (cold: the first look at a run when nothing wrote them "
                         "ahead, as 'after'), with them written ahead as after an ingest (ahead), with the files "
                         "earlier measurements wrote (warm), both cold and warm, or all three")
    ap.add_argument("--json", default=None, help="write every measurement to this file")
    ap.add_argument("--cache", default=os.environ.get("ASCENDSCOPE_BENCH_CACHE", "bench/out"))
    args = ap.parse_args(argv)
    cache = Path(args.cache)

    plans = []
    if args.quick:
        args.seconds, args.repeat, args.index = args.seconds or QUICK["seconds"], 1, "first"
        plans.append((QUICK_SCENARIO, *prepare(cache, QUICK_SCENARIO)))
    else:
        args.seconds = args.seconds or 30.0
        stores = {"1rank": args.store_1rank, "8rank": args.store_8rank}
        for name in args.scenarios:
            sc = SCENARIOS[name]
            if args.mix:
                sc = replace(sc, mix=tuple(args.mix))
            plans.append((sc, *(one_store(Path(stores[name])) if stores[name] else prepare(cache, sc))))
    mine = {"cold": ["after"], "ahead": ["ahead"], "warm": ["warm"], "both": ["after", "warm"],
            "all": ["after", "ahead", "warm"], "first": ["after", "ahead"]}[args.index]  # (first: --quick)
    versions = ["before", *mine] if args.before else mine
    # the older version reads its own layout: one database file per run, made by its own code (it cannot read a
    # run folder of shards, so a given --store-* is this version's only)
    olds = {sc.name: prepare(cache, sc, Path(args.before)) for sc, _, _ in plans} if args.before else {}
    rows = []
    for rep in range(args.repeat):
        for sc, data, run_id in plans:
            for n in args.clients or sc.clients:
                order = versions if rep % 2 == 0 or not args.before else [*mine, "before"]  # (cold before warm)
                for version in order:
                    print(f"[{rep + 1}/{args.repeat}] {sc.name} {n} client(s) {version} …", file=sys.stderr,
                          flush=True)
                    where = olds[sc.name] if version == "before" else (data, run_id)
                    rows.append(measure(*where, sc, n, version, args, health=n == max(sc.clients)))
    report = {"cpus": os.cpu_count(), "seconds": args.seconds, "repeat": args.repeat, "results": rows,
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.soak:
        sc, data, run_id = next((p for p in plans if p[0].name == "8rank"), plans[0])
        print(f"soak: {sc.name}, {max(sc.clients)} clients, {args.soak:g} s …", file=sys.stderr, flush=True)
        report["soak"] = soak(data, run_id, sc, args)
    print(table(rows))
    if args.soak:
        print("\nsoak, RSS MB per server process (start, every 30 s, end; peak):")
        for pid, r in report["soak"]["rss_mb"].items():
            steps = " ".join(str(mb) for _, mb in r["series"])
            print(f"  pid {pid}: {r['start']} → {r['end']} (peak {r['peak']}): {steps}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.quick:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
