"""Hostile SQL console load against ``ascendscope serve`` (issue #45), with a prober beside it.

    ascendscope bench console-abuse                   # every query of the issue's table, by 1 and by 60 clients
    ascendscope bench console-abuse --quick           # a smoke run: two queries, 1 and 4 clients, 3 s each

Serves the real 2-rank sample (``../shared/real_samples``, else its generated twin), ingested sharded as ``serve``
ingests it, with the server's defaults (``query_timeout_s`` 10 s, one console worker per heavy slot). For each
query of the issue's table (:data:`QUERIES`), ``--clients`` bounded clients (each one connection, one request at a
time, each from a loopback address of its own, 127.0.0.N, so that each is a client of its own to the console's
fair queue) loop it for ``--seconds``, while a prober GETs ``/api/health``, ``/api/runs``, the Summary's API and
the timeline page (its HTML and its tracks) every 0.5 s each. Reported per query and client count: the hostile
answers by status and their longest time (target: the deadline + 1 s), the prober's p50 / p95 / max per path
(target: p95 ≤ 0.5 s, max ≤ 1 s), the peak RSS of the web and query processes together (target: < 2 GB) and of
each console worker beside its address-space limit, the server's CPU seconds and the load average.
``--order-by-rows N`` then serves the same run with a 300 s deadline and runs an ``ORDER BY`` of N rows through
the console (the 20 M rows the issue names by default): it must answer within the worker's memory limit.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import psutil

from ascendscope.bench.served import Server
from ascendscope.bench.wrkload import run_wrk

PROBE_EVERY_S = 0.5
TIMEOUT_S = 10.0  # the server's default query_timeout_s: the deadline each hostile query is held to
QUERIES = {
    "repeat 10^9 (folded while planning)": "SELECT length(repeat('x', 1000000000)) AS n",
    "list_sum(range(10^8))": "SELECT list_sum(range(100000000)) AS s",
    "list_transform 8e6 × 10 rows": "SELECT list_transform(range(8000000), lambda x: x::VARCHAR) AS l FROM range(10)",
    "a 10 s query, looped": "SELECT sum(a.range * b.range) AS s FROM range(400000) a, range(400000) b",
    "600-term sum": "SELECT " + "+".join(["1"] * 600) + " AS n",
    "500 nested subqueries": "SELECT " + "(SELECT " * 500 + "1" + ")" * 500 + " AS n",
    "glob the spill folder": "SELECT * FROM glob('{data}/.console-tmp/*')",
    "read_blob a shard": "SELECT * FROM read_blob('{shard}')",
}
QUICK = ("600-term sum", "glob the spill folder")


def prepare(cache: Path) -> tuple[Path, str, Path]:
    """(data dir, run id, one of its shard files): the real level1 sample (or its twin), ingested sharded once."""
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.server.runs import RunStore

    data = cache / "console-abuse"
    store = RunStore(data)
    ready = [r for r in store.list() if r.status == "ready"]
    if not ready:
        src = sample_folder(cache)
        run = store.create_run("level1", str(src))
        summary = ingest_sharded(src, store.run_dir(run.id), workers=1)
        store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
        ready = [store.get(run.id)]
    run_id = ready[0].id
    return data, run_id, next((store.run_dir(run_id) / "shards").glob("*.duckdb"))


def sample_folder(cache: Path) -> Path:
    """The real Level1 sample beside the checkout, else a generated 2-rank Level1 run like its twin."""
    real = Path(__file__).resolve().parents[2] / "shared" / "real_samples" / "msinsight_pytorch_2025" / "text"
    if (real / "level1").is_dir():
        return real / "level1"
    from ascendscope.sample_data.generate import generate_run

    out = cache / "console-abuse-source"
    if not out.is_dir():
        generate_run(out, ranks=2, steps=1, ops_per_step=200, seed=45, level="Level1", python_stack=True)
    return out


def get(port: int, path: str, source: str | None = None, timeout_s: float = 60) -> tuple[int, float]:
    """(status, seconds) of one GET on a fresh connection (from ``source``, a loopback address)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - t0
    except OSError:
        return 0, time.monotonic() - t0
    finally:
        conn.close()


def kinds(srv: Server) -> dict[str, list[psutil.Process]]:
    out: dict[str, list] = {"web": [], "query": [], "console": []}
    for p in srv.processes():
        try:
            cmd = " ".join(p.cmdline())
        except psutil.NoSuchProcess:
            continue
        out["console" if "consoleworker" in cmd else "query" if "queryserver" in cmd else "web"].append(p)
    return out


def rss(p: psutil.Process) -> int:
    try:
        return p.memory_info().rss
    except psutil.NoSuchProcess:
        return 0


def cpu_s(srv: Server) -> float:
    """CPU seconds of the server's processes, those it has reaped included (console workers it had to end)."""
    total = 0.0
    for p in srv.processes():
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def address_limit(p: psutil.Process) -> int | None:
    try:
        soft, _ = p.rlimit(psutil.RLIMIT_AS)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return None if soft == psutil.RLIM_INFINITY else soft


class Watch:
    """While it is entered: the prober (wrk, ``bench/wrk/probe.lua``: one connection per path, each path read every
    PROBE_EVERY_S, each answer timed), and the RSS of the server's processes sampled every 0.2 s."""

    def __init__(self, srv: Server, paths: list[str], seconds: float):
        self.srv, self.paths, self.seconds = srv, paths, seconds
        self.probe: dict = {}
        self.web_query_peak = 0
        self.console_peak: dict[int, tuple[int, int | None]] = {}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._probe, daemon=True),
                        threading.Thread(target=self._memory, daemon=True)]

    def _probe(self) -> None:
        config = {"paths": self.paths, "every_ms": int(PROBE_EVERY_S * 1000)}
        self.probe = run_wrk(self.srv.base, "probe.lua", len(self.paths), self.seconds, config=config,
                             timeout_s=30)

    def _memory(self) -> None:
        while not self.stop.is_set():
            k = kinds(self.srv)
            self.web_query_peak = max(self.web_query_peak, sum(rss(p) for p in k["web"] + k["query"]))
            for p in k["console"]:
                was = self.console_peak.get(p.pid, (0, None))
                self.console_peak[p.pid] = (max(was[0], rss(p)), address_limit(p) or was[1])
            self.stop.wait(0.2)

    def __enter__(self) -> Watch:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.threads[0].join(self.seconds + 120)
        self.stop.set()
        self.threads[1].join(60)


def hostile(port: int, path: str, clients: int, seconds: float) -> list[tuple[int, float]]:
    """``clients`` loops of GET ``path`` for ``seconds`` (each client from 127.0.0.<2+i>); every (status, s)."""
    out: list[tuple[int, float]] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(i: int) -> None:
        source = f"127.0.0.{2 + i}"
        while time.monotonic() < end:
            status, took = get(port, path, source)
            with lock:
                out.append((status, took))
            if status == 429:  # (as a polite client does: wait, then ask again)
                time.sleep(1.0)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + TIMEOUT_S + 60)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def probes(run_id: str) -> list[str]:
    """What the prober reads: health, the runs list, the Summary's API, the timeline page and its tracks."""
    api = f"/api/runs/{run_id}"
    return ["/api/health", "/api/runs", f"{api}/summary", f"/runs/{run_id}/timeline", f"{api}/timeline/tracks"]


def measure(srv: Server, run_id: str, name: str, sql: str, clients: int, seconds: float) -> dict:
    """``clients`` hostile clients looping ``sql`` for ``seconds`` beside the prober (none: the prober alone)."""
    api = f"/api/runs/{run_id}"
    cpu0, load0 = cpu_s(srv), os.getloadavg()[0]
    with Watch(srv, probes(run_id), seconds) as watch:
        answers = hostile(srv.port, f"{api}/query?" + urllib.parse.urlencode({"sql": sql}), clients, seconds)
    statuses: dict[str, int] = {}
    for status, _ in answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    timed = watch.probe.get("request_ms") or {}
    errors = sum(watch.probe.get("errors", {}).values())
    row = {
        "query": name, "clients": clients, "answers": statuses,
        "hostile_max_s": round(max((t for _, t in answers), default=0.0), 2),
        "probe_count": timed.get("count", 0), "probe_p50_ms": timed.get("p50"), "probe_p95_ms": timed.get("p95"),
        "probe_max_ms": timed.get("max"), "probe_errors": errors,
        "web_query_peak_mb": round(watch.web_query_peak / 1e6),
        "console_peak_mb": {str(pid): [round(r / 1e6), None if lim is None else round(lim / 1e6)]
                            for pid, (r, lim) in watch.console_peak.items()},
        "server_cpu_s": round(cpu_s(srv) - cpu0, 1), "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    row["targets_met"] = {
        "deadline + 1 s": row["hostile_max_s"] <= TIMEOUT_S + 1,
        "prober p95 ≤ 0.5 s": (row["probe_p95_ms"] or 1e9) <= 500,
        "prober max ≤ 1 s": (row["probe_max_ms"] or 1e9) <= 1000,
        "prober all 200": errors == 0, "web + query < 2 GB": row["web_query_peak_mb"] < 2000,
        "console ≤ its limit": all(lim is None or r <= lim for r, lim in row["console_peak_mb"].values()),
    }
    return row


def console_peak(srv: Server, done) -> tuple[int, int | None]:
    """The highest RSS of a console worker, and its address-space limit, until ``done()``."""
    peak, limit = 0, None
    while not done():
        for p in kinds(srv)["console"]:
            peak, limit = max(peak, rss(p)), address_limit(p) or limit
        time.sleep(0.2)
    return peak, limit


def order_by(data: Path, run_id: str, rows: int) -> dict:
    """An ORDER BY of ``rows`` rows through the console of a server whose deadline is 300 s."""
    sql = f"SELECT range AS a, hash(range) AS b, 'name_' || (range % 100000) AS c FROM range({rows}) ORDER BY b"
    with Server(data, extra_env={"ASCENDSCOPE_QUERY_TIMEOUT_S": "300"}) as srv:
        srv.wait_ready("/api/runs")
        srv.wait_query_processes()
        get(srv.port, f"/api/runs/{run_id}/query/schema")
        t0 = time.monotonic()
        found: dict = {}
        sampler = threading.Thread(target=lambda: found.update(peak=console_peak(srv, lambda: "status" in found)),
                                   daemon=True)
        sampler.start()
        status, took = get(srv.port, f"/api/runs/{run_id}/query?" + urllib.parse.urlencode({"sql": sql}),
                           timeout_s=400)
        found["status"] = status
        sampler.join(10)
        peak = found.get("peak", (0, None))
    limit = None if peak[1] is None else round(peak[1] / 1e6)
    return {"rows": rows, "status": status, "seconds": round(took, 1), "wall_s": round(time.monotonic() - t0, 1),
            "console_peak_mb": round(peak[0] / 1e6), "console_limit_mb": limit, "load": round(os.getloadavg()[0], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench console-abuse", description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 60])
    ap.add_argument("--seconds", type=float, default=None,
                    help="how long each query is looped (default 15, quick 3)")
    ap.add_argument("--queries", nargs="+", choices=list(QUERIES), default=None)
    ap.add_argument("--order-by-rows", type=int, default=20_000_000, help="0: skip the ORDER BY run")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--cache", default=os.environ.get("ASCENDSCOPE_BENCH_CACHE", "bench/out"))
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.order_by_rows = [1, 4], 0
        args.queries = args.queries or list(QUICK)
    args.seconds = args.seconds or (3.0 if args.quick else 15.0)
    data, run_id, shard = prepare(Path(args.cache))
    names = args.queries or list(QUERIES)
    out: dict = {"run": run_id, "seconds": args.seconds, "deadline_s": TIMEOUT_S, "rows": []}
    with Server(data) as srv:
        srv.wait_ready("/api/runs")
        srv.wait_query_processes()
        get(srv.port, f"/api/runs/{run_id}/query/schema")  # (its console worker started, as the page does)
        for path in probes(run_id):  # (each route's first answer, the app's own warm-up, is not measured)
            get(srv.port, path)
        out["rows"].append(measure(srv, run_id, "(none: the prober alone)", "SELECT 1", 0, args.seconds))
        for name in names:
            sql = QUERIES[name].format(data=data, shard=shard)
            for clients in args.clients:
                row = measure(srv, run_id, name, sql, clients, args.seconds)
                out["rows"].append(row)
                print(json.dumps(row), file=sys.stderr)
    if args.order_by_rows:
        out["order_by"] = order_by(data, run_id, args.order_by_rows)
        print(json.dumps(out["order_by"]), file=sys.stderr)
    with Server(data) as srv:  # the prober alone again, at the end: the machine's own share of the latencies
        srv.wait_ready("/api/runs")
        srv.wait_query_processes()
        for path in probes(run_id):
            get(srv.port, path)
        out["rows"].append(measure(srv, run_id, "(none: the prober alone)", "SELECT 1", 0, args.seconds))
    out["all_targets_met"] = all(all(r["targets_met"].values()) for r in out["rows"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(json.dumps({"all_targets_met": out["all_targets_met"],
                      "missed": [(r["query"], r["clients"], [k for k, v in r["targets_met"].items() if not v])
                                 for r in out["rows"] if not all(r["targets_met"].values())]}))
    print(table(out))
    return 0


def table(out: dict) -> str:
    lines = ["| query | clients | answers | longest | prober p50 / p95 / max | web + query peak | console worker "
             "peak / limit | server CPU-s | load |", "|---|---:|---|---:|---|---:|---|---:|---|"]
    for r in out["rows"]:
        workers = ", ".join(f"{v[0]:,} / {v[1]:,} MB" if v[1] else f"{v[0]:,} MB"
                            for v in r["console_peak_mb"].values()) or "—"
        answers = ", ".join(f"{n} × {s}" for s, n in sorted(r["answers"].items()))
        probe = "—" if r["probe_p50_ms"] is None else (
            f"{r['probe_p50_ms']:.0f} / {r['probe_p95_ms']:.0f} / {r['probe_max_ms']:.0f} ms")
        lines.append(f"| {r['query']} | {r['clients']} | {answers or '—'} | {r['hostile_max_s']:.1f} s | {probe} | "
                     f"{r['web_query_peak_mb']:,} MB | {workers} | {r['server_cpu_s']} | "
                     f"{r['load'][0]}–{r['load'][1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
