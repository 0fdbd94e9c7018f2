"""Concurrent timeline users: N clients at once, each replaying the query benchmark's random walk, against a real
server.

    ascendscope bench concurrency --slices 10000000 --clients 1 50

Serves the cached synthetic run of ``bench.query`` with ``ascendscope serve`` in a child process (uvicorn, as in
production; a fresh server for each measurement, so no answer is cached from the one before). N clients on one
asyncio loop then send ``/timeline/slices`` requests over keep-alive connections for ``--seconds``, each client
one request after the other (closed loop), so N requests are in flight at every moment:

* ``distinct``: client i walks its own random walk (seed + i), as N users looking at different places;
* ``identical``: every client walks the same walk, so each request arrives N times at once.

Reports per request p50/p95/p99/max, requests per second, errors by HTTP status and the CPU seconds of the server
and of the clients (they share the machine). The client is a minimal HTTP/1.1 reader so that it costs little CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import psutil

from ascendscope.bench.query import percentile, prepare_store, walk

QUICK = {"slices": 200_000, "clients": [1, 4], "seconds": 2.0}


class Connection:
    """One keep-alive HTTP/1.1 connection that GETs a path and reads the whole answer (Content-Length framed)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, target: str) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        length = next((int(h.split(":", 1)[1]) for h in head[1:] if h.lower().startswith("content-length:")), None)
        if length is None:
            raise RuntimeError(f"answer without Content-Length to {target}: {head[0]}")
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, ASCENDSCOPE_TOKEN="")
    return subprocess.Popen([sys.executable, "-m", "ascendscope.server.cli", "serve", "--data-dir", str(data), "--host",
                             "127.0.0.1", "--port", str(port), "--no-browser", "--read-only", "--log-level",
                             "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


async def wait_ready(proc: subprocess.Popen, port: int, run_id: str, timeout_s: float = 120) -> dict:
    """The run's track list, once the server answers it (which also opens the run's database)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.stderr.read().strip()}")
        conn = Connection("127.0.0.1", port)
        try:
            status, body = await conn.get(f"/api/runs/{run_id}/timeline/tracks")
            if status != 200:
                raise SystemExit(f"track list failed ({status}): {body[:300]!r}")
            return json.loads(body)
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the server did not start") from None
            await asyncio.sleep(0.1)
        finally:
            await conn.close()


async def run_clients(port: int, run_id: str, meta: dict, clients: int, identical: bool, seconds: float,
                      args: argparse.Namespace) -> tuple[list[float], Counter, int]:
    tracks = [t for t in meta["tracks"] if t["slice_count"]]
    t0, t1 = int(meta["start_ns"]), int(meta["end_ns"])
    latencies: list[float] = []
    statuses: Counter = Counter()
    sizes = [0]
    stop = time.perf_counter() + seconds

    async def client(i: int) -> None:
        conn = Connection("127.0.0.1", port)
        views = walk(random.Random(args.seed + (0 if identical else i)), tracks, t0, t1, args.visible_tracks)
        try:
            for start, end, visible in views:
                for k in range(0, len(visible), args.tracks_per_request):
                    if time.perf_counter() >= stop:
                        return
                    query = urlencode({"track_id": visible[k:k + args.tracks_per_request], "start_ns": start,
                                       "end_ns": end, "width_px": args.width_px}, doseq=True)
                    q = time.perf_counter()
                    status, body = await conn.get(f"/api/runs/{run_id}/timeline/slices?{query}")
                    latencies.append((time.perf_counter() - q) * 1000)
                    statuses[status] += 1
                    sizes[0] += len(body)
        finally:
            await conn.close()

    await asyncio.gather(*(client(i) for i in range(clients)))
    return latencies, statuses, sizes[0]


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def measure(data: Path, run_id: str, clients: int, identical: bool, args: argparse.Namespace) -> dict:
    port = free_port()
    server = start_server(data, port)
    try:
        meta = asyncio.run(wait_ready(server, port, run_id))
        ps, me = psutil.Process(server.pid), psutil.Process()
        server_cpu, client_cpu, wall = cpu_seconds(ps), cpu_seconds(me), time.perf_counter()
        latencies, statuses, size = asyncio.run(run_clients(port, run_id, meta, clients, identical, args.seconds,
                                                            args))
        wall = time.perf_counter() - wall
        server_cpu, client_cpu = cpu_seconds(ps) - server_cpu, cpu_seconds(me) - client_cpu
    finally:
        server.terminate()
        server.wait(30)
    return {
        "mode": "identical" if identical else "distinct", "clients": clients, "requests": len(latencies),
        "req_per_s": round(len(latencies) / wall, 1),
        "request_ms": {"p50": round(percentile(latencies, 50), 1), "p95": round(percentile(latencies, 95), 1),
                       "p99": round(percentile(latencies, 99), 1), "max": round(max(latencies), 1)},
        "status": {str(k): v for k, v in sorted(statuses.items())},
        "kb_per_request": round(size / 1e3 / max(1, len(latencies)), 1),
        "server_cpu_s": round(server_cpu, 1), "client_cpu_s": round(client_cpu, 1), "wall_s": round(wall, 1),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench concurrency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--slices", type=int, default=10_000_000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 50], help="client counts, measured in turn")
    ap.add_argument("--mode", nargs="+", choices=["distinct", "identical"], default=["distinct", "identical"])
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each measurement")
    ap.add_argument("--tracks-per-request", type=int, default=4)
    ap.add_argument("--visible-tracks", type=int, default=24)
    ap.add_argument("--width-px", type=int, default=1600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run: {QUICK['slices']:,} slices, clients {QUICK['clients']}, "
                         f"{QUICK['seconds']:g} s each")
    ap.add_argument("--cache", default=os.environ.get("ASCENDSCOPE_BENCH_CACHE", "bench/out"))
    args = ap.parse_args(argv)
    if args.quick:
        args.slices, args.clients, args.seconds = QUICK["slices"], QUICK["clients"], QUICK["seconds"]

    data, run_id = prepare_store(Path(args.cache), args.slices)
    # one identical client is the distinct one
    results = [measure(data, run_id, n, mode == "identical", args) for mode in args.mode for n in args.clients
               if mode == "distinct" or n > 1]
    print(json.dumps({"slices": args.slices, "seconds": args.seconds, "tracks_per_request": args.tracks_per_request,
                      "width_px": args.width_px, "cpus": os.cpu_count(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
