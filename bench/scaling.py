"""Project a sharded ingest onto N nodes from one measured run: ``ascendscope bench scaling RUN_DIR``.

A run folder written by ``ingest.shards`` records, per shard, its input bytes, the seconds its task took and the
bytes of the shard written (``manifest.json``), and the run's phases (``timing``: discovery, the small files,
the last write of the cluster tables, the whole ingest). From these:

* **tasks**: the measured shard tasks, fitted as ``seconds = fixed + input / rate`` (least squares), so a run of
  other sizes can be projected too (``--ranks``, ``--mb-per-rank``: e.g. 1,000 ranks of 1 GB);
* **serial part**: what the coordinating process does alone (discovery, the small files, the cluster tables);
* **bytes moved**: every task reads its ranks' input from shared storage and writes its shard back;
* **wall at N nodes**: the serial part plus the tasks list-scheduled (longest first) on ``N × cores`` workers,
  each task also waiting for its bytes at ``--storage-gbps`` shared by the workers of a node (the run folder
  and the input are on storage every node mounts).

It is a model, not a measurement: the task times measured on a busy 2-core machine stand for a worker's, and
the network and storage are a single bandwidth figure. Prints one table; ``--json`` writes it.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path

MB = 1e6


def fit(tasks: list[dict]) -> tuple[float, float]:
    """(fixed seconds, MB per second) of ``seconds = fixed + input_mb / rate`` over the measured tasks."""
    xs = [t["input_bytes"] / MB for t in tasks]
    ys = [t["seconds"] for t in tasks]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if n < 3 or var < (0.1 * mx) ** 2:  # sizes too alike to tell a fixed cost from a rate: all of it is rate
        return 0.0, max(sum(xs), 1e-9) / max(sum(ys), 1e-9)
    slope = max(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var, 1e-9)
    fixed = max(0.0, my - slope * mx)
    return fixed, 1.0 / slope


def makespan(durations: list[float], workers: int) -> float:
    """Longest-first list scheduling of the tasks on ``workers``: when the last one ends."""
    free = [0.0] * max(1, workers)
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def project(manifest: dict, nodes: list[int], cores: int, storage_gbps: float, ranks: int | None = None,
            mb_per_rank: float | None = None, group_mb: float = 32.0) -> dict:
    shards = [e for e in manifest["shards"] if e.get("status") == "ready" and e.get("seconds")]
    if not shards:
        raise SystemExit("no ready shard with a measured time in this manifest")
    fixed, rate = fit(shards)
    out_ratio = sum(e["bytes"] for e in shards) / sum(e["input_bytes"] for e in shards)
    timing = manifest.get("timing") or {}
    serial = sum(timing.get(k) or 0.0 for k in ("discover_s", "small_s", "cluster_write_s"))
    if ranks and mb_per_rank:  # a run of another size, grouped as the ingest would group it
        per_task = max(1, int(group_mb // mb_per_rank)) if mb_per_rank < group_mb else 1
        tasks = [min(per_task, ranks - i) * mb_per_rank * MB for i in range(0, ranks, per_task)]
        measured_ranks = max(1, manifest["ranks"]["total"])
        if measured_ranks >= 100:  # discovery and the small files grow with the ranks (a few ranks: start-up)
            serial *= ranks / measured_ranks
        measured = False
    else:
        tasks = [float(e["input_bytes"]) for e in shards]
        measured = True
    moved = sum(tasks) * (1 + out_ratio)
    rows = []
    for n in nodes:
        workers = n * cores
        per_worker_bps = storage_gbps * 1e9 / cores  # a node's bandwidth, shared by its workers
        durations = [(fixed + b / MB / rate) if not measured else None for b in tasks]
        if measured:
            durations = [e["seconds"] for e in shards]
        durations = [d + b * (1 + out_ratio) / per_worker_bps for d, b in zip(durations, tasks)]
        span = makespan(durations, workers)
        rows.append({"nodes": n, "workers": workers, "waves": -(-len(tasks) // workers),
                     "tasks_s": round(span, 1), "wall_s": round(serial + span, 1)})
    return {"tasks": len(tasks), "input_gb": round(sum(tasks) / 1e9, 3), "moved_gb": round(moved / 1e9, 3),
            "fixed_s": round(fixed, 3), "mb_per_s_per_worker": round(rate, 1), "serial_s": round(serial, 1),
            "shard_bytes_per_input_byte": round(out_ratio, 3), "storage_gbps_per_node": storage_gbps,
            "cores_per_node": cores, "measured_tasks": measured, "rows": rows}


def table(p: dict) -> str:
    lines = [f"{p['tasks']} tasks, {p['input_gb']} GB in, {p['moved_gb']} GB moved (input read + shards written); "
             f"a task = {p['fixed_s']} s + input at {p['mb_per_s_per_worker']} MB/s; serial part {p['serial_s']} s; "
             f"{p['cores_per_node']} workers and {p['storage_gbps_per_node']} GB/s of storage per node", "",
             f"{'nodes':>6} {'workers':>8} {'waves':>6} {'tasks s':>9} {'wall s':>9}"]
    for r in p["rows"]:
        lines.append(f"{r['nodes']:>6} {r['workers']:>8} {r['waves']:>6} {r['tasks_s']:>9} {r['wall_s']:>9}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench scaling", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run folder written by ingest_sharded (with its manifest.json)")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--cores", type=int, default=16, help="workers per node (default 16)")
    ap.add_argument("--storage-gbps", type=float, default=1.0, help="storage bandwidth per node, GB/s (default 1)")
    ap.add_argument("--ranks", type=int, help="project a run of this many ranks …")
    ap.add_argument("--mb-per-rank", type=float, help="… of this much input each (MB)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    manifest = json.loads((args.run / "manifest.json").read_text())
    p = project(manifest, args.nodes, args.cores, args.storage_gbps, args.ranks, args.mb_per_rank)
    if args.json:
        args.json.write_text(json.dumps(p, indent=1))
    print(table(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
