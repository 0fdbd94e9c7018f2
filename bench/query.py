"""Timeline query benchmark: random pans and zooms over a large synthetic run, through the real HTTP handlers.

    ascendscope bench query --slices 10000000

Builds (once, cached) a run of N synthetic slices (``bench.synth``), serves it with the app in-process, then
replays a random walk of views like a user pressing W/A/S/D: each view asks ``/timeline/slices`` for the tracks
on screen in batches of ``--tracks-per-request`` (as the frontend does), at ``--width-px``. Reports p50/p95/max
per request and per view, rows returned, and how often the answer came from the LOD table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from itertools import islice
from pathlib import Path

from ascendscope.bench.synth import build


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def prepare_store(cache: Path, slices: int) -> tuple[Path, str]:
    from ascendscope.server.runs import RunStore

    data = cache / f"query_{slices}"
    db_cache = cache / f"synth_{slices}.duckdb"
    if not db_cache.exists():
        print(f"building a {slices:,}-slice run (once) …", file=sys.stderr)
        print(json.dumps(build(db_cache, slices)), file=sys.stderr)
    store = RunStore(data)
    runs = [r for r in store.list() if r.status == "ready"]
    if runs:
        return data, runs[0].id
    run = store.create_run("synthetic", "synthetic")
    shutil.copy(db_cache, store.db_path(run.id))
    store.set_status(run.id, "ready")
    return data, run.id


def walk(rnd: random.Random, tracks: list[dict], t0: int, t1: int, visible_tracks: int):
    """Endless views ``(start_ns, end_ns, visible track ids)`` of a user pressing W/A/S/D over [t0, t1)."""
    start, end = t0, t1
    while True:
        move = rnd.choice("WWSSAADD0")
        span = end - start
        if move == "W":
            focus = start + rnd.random() * span
            span = max(1_000, int(span * 0.5))
            start = int(focus - span / 2)
        elif move == "S":
            span = min(t1 - t0, span * 2)
            start = int(start + (end - start) / 2 - span / 2)
        elif move in "AD":
            start += int((-1 if move == "A" else 1) * span * 0.3)
        else:  # a jump somewhere at a random zoom, as a search hit or a link would do
            span = int((t1 - t0) / 4 ** rnd.randint(0, 9))
            start = t0 + int(rnd.random() * max(1, (t1 - t0) - span))
        start = max(t0, min(start, t1 - span))
        end = start + span
        first = rnd.randrange(0, max(1, len(tracks) - visible_tracks + 1))
        yield start, end, [t["track_id"] for t in tracks[first:first + visible_tracks]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench query", description=__doc__.split("\n\n")[0])
    ap.add_argument("--slices", type=int, default=10_000_000)
    ap.add_argument("--views", type=int, default=300, help="views in the random walk")
    ap.add_argument("--tracks-per-request", type=int, default=4)
    ap.add_argument("--visible-tracks", type=int, default=24)
    ap.add_argument("--width-px", type=int, default=1600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.environ.get("ASCENDSCOPE_BENCH_CACHE", "bench/out"))
    args = ap.parse_args(argv)

    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data, run_id = prepare_store(Path(args.cache), args.slices)
    client = TestClient(create_app(Settings.from_env(data_dir=str(data))))
    meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
    tracks = [t for t in meta["tracks"] if t["slice_count"]]
    t0, t1 = int(meta["start_ns"]), int(meta["end_ns"])
    per_request, per_view, rows, lod_hits, answers = [], [], 0, 0, 0
    for start, end, visible in islice(walk(random.Random(args.seed), tracks, t0, t1, args.visible_tracks),
                                      args.views):
        view_t = time.perf_counter()
        for i in range(0, len(visible), args.tracks_per_request):
            chunk = visible[i:i + args.tracks_per_request]
            q = time.perf_counter()
            res = client.get(f"/api/runs/{run_id}/timeline/slices",
                             params={"track_id": chunk, "start_ns": start, "end_ns": end, "width_px": args.width_px})
            per_request.append((time.perf_counter() - q) * 1000)
            body = res.json()
            if res.status_code != 200:
                raise SystemExit(f"request failed: {body}")
            for t in body["tracks"]:
                rows += t["count"]
                answers += 1
                lod_hits += bool(t["lod"])
        per_view.append((time.perf_counter() - view_t) * 1000)
    report = {
        "slices": args.slices, "tracks": len(tracks), "views": args.views,
        "requests": len(per_request), "tracks_per_request": args.tracks_per_request, "width_px": args.width_px,
        "request_ms": {"p50": round(statistics.median(per_request), 1), "p95": round(percentile(per_request, 95), 1),
                       "max": round(max(per_request), 1)},
        "view_ms": {"p50": round(statistics.median(per_view), 1), "p95": round(percentile(per_view, 95), 1)},
        "rows_per_request": int(rows / len(per_request)),
        "lod_share": round(lod_hits / max(1, answers), 2),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
