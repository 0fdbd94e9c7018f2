"""Ready benchmark: how long a run takes to be ready in the server, its export formats side by side.

    ascendscope bench ready --repeat 5 ../shared/real_samples/msinsight_pytorch_2025/{text,db}/level1

Each source is ingested as ``ascendscope serve`` and an upload ingest it (the ingest queue's worker, forked by its
warm worker host), in a child process with a fresh data dir: the wall seconds from queueing the run to its ready
status (and to the announcement of a big rank's overview, every lane on screen: ``overview_s``), and the CPU
seconds of every process that worked meanwhile (the child's descendants: the worker host, the
worker, its pool; sampled every 50 ms; the child itself, which stands for the web process and waits, is left
out). The sources take turns (interleaved, ``--repeat`` rounds), so a change of the machine's load falls on each
alike. ``--before CHECKOUT`` runs each source once more per round with an older checkout's code (``git worktree
add /tmp/before COMMIT``, or ``git archive``), through the path shim of ``bench.served``. Prints one JSON object:
per source (and code) each round's figures, their medians, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# the child's code: only what every version of the package has (RunStore, IngestQueue), so --before can run it
CHILD = r"""
import json, os, sys, tempfile, threading, time
from pathlib import Path
import psutil
from ascendscope.server.runs import RunStore
from ascendscope.server.worker import IngestQueue

def ingest(data_dir, src):
    store = RunStore(data_dir)
    run = store.create_run_from_path(Path(src))
    queue = IngestQueue(store, retries=0).start(resume=False)
    manifest = store.run_dir(run.id) / "manifest.json"
    t0 = time.perf_counter()
    queue.enqueue(run.id)
    overview = None
    while store.get(run.id).status not in ("ready", "failed"):
        if overview is None and manifest.is_file():
            try:
                shards = json.loads(manifest.read_text())["shards"]
            except (OSError, ValueError, KeyError):
                shards = []
            if any(e.get("overview") for e in shards):
                overview = time.perf_counter() - t0
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    queue.wait_idle(600)
    queue.stop()
    return store.get(run.id).status, wall, overview

def cpu_of_tree(me):
    out = {}
    for p in me.children(recursive=True):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = t.user + t.system
    return out

src, work = sys.argv[1], Path(sys.argv[2])
ingest(work / "warm", src)  # the worker host's start (the server pays it once), and the file cache, warm
me = psutil.Process()
before = cpu_of_tree(me)
seen = dict(before)
done = threading.Event()
def sample():
    while not done.wait(0.05):
        seen.update(cpu_of_tree(me))
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
status, wall, overview = ingest(work / "measured", src)
done.set()
sampler.join()
seen.update(cpu_of_tree(me))
cpu = sum(v - before.get(pid, 0.0) for pid, v in seen.items())
print(json.dumps({"status": status, "ready_s": round(wall, 3), "cpu_s": round(cpu, 3),
                  "overview_s": None if overview is None else round(overview, 3)}))
"""


def measure(src: Path, env: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="ascendscope-ready-") as work:
        out = subprocess.run([sys.executable, "-c", CHILD, str(src), work], capture_output=True, text=True,
                             env=env, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{src}: the child failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got["status"] != "ready":
        raise SystemExit(f"{src}: the run ended {got['status']}")
    return got


def _median(values: list) -> float | None:
    """The median of the rounds that saw an overview (a rank big enough to have one), else None."""
    seen = [v for v in values if v is not None]
    return round(statistics.median(seen), 3) if seen else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascendscope bench ready", description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", type=Path, help="profiling folders (e.g. a run's text and db export)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; each source once per round (default 5)")
    parser.add_argument("--before", type=Path, help="an older checkout: each source also with its code")
    args = parser.parse_args(argv)
    codes = {"this": dict(os.environ)}
    if args.before is not None:
        from ascendscope.bench.served import shim_for

        shim = shim_for(args.before)
        codes["before"] = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(shim), *filter(None, [os.environ.get("PYTHONPATH")])])}
    load_before = os.getloadavg()
    rounds: dict[str, list[dict]] = {}
    for i in range(args.repeat):
        for src in args.sources:
            for code, env in codes.items():
                key = f"{src} ({code})" if len(codes) > 1 else str(src)
                got = measure(src, env)
                got["load1"] = round(os.getloadavg()[0], 2)
                rounds.setdefault(key, []).append(got)
                seen = "" if got.get("overview_s") is None else f"overview {got['overview_s']:.2f} s, "
                print(f"round {i + 1}: {key}: {seen}ready {got['ready_s']:.2f} s, CPU {got['cpu_s']:.2f} s, "
                      f"load {got['load1']}", file=sys.stderr, flush=True)
    result = {"sources": {key: {"ready_s_median": round(statistics.median(r["ready_s"] for r in runs), 3),
                                "cpu_s_median": round(statistics.median(r["cpu_s"] for r in runs), 3),
                                "overview_s_median": _median([r.get("overview_s") for r in runs]),
                                "rounds": runs} for key, runs in rounds.items()},
              "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in os.getloadavg()], "cores": os.cpu_count()}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
