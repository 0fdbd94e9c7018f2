"""Memory snapshot benchmark: a snapshot pickle of each size read the way the server reads it, beside a plain
``pickle.load`` of the same file.

    ascendscope bench memsnap --sizes 100,1000,5000 --out /tmp/memsnap-bench [--pickle-cap-gb 8] [--keep]

For each size (MB): writes a snapshot (``sample_data.memsnap_big``, cached in ``--out``), then in a fresh child
each (``bench.measure``: wall, CPU seconds of the whole process tree, peak RSS of its largest process and of the
tree): our ingest, as the server runs it (``ingest_sharded`` into a run folder: the coordinator and its pool's
shard task), whose figures are checked against the generator's (entries; reserved, allocated and active at the
dump; no inconsistency); and ``pickle.load`` of the file (our own generated file: safe to unpickle) under an
address-space cap of ``--pickle-cap-gb``, so that it fails with a MemoryError instead of taking the machine's
memory. Prints one JSON object: per size MB/s (wall) and MB per CPU-second of both, their peak RSS, and the
load average before and after. ``--keep`` keeps the generated files (they are removed otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

CHILD = [sys.executable, "-m", "ascendscope.bench.memsnap"]


def _ingest(src: str, out: str) -> int:
    from ascendscope.ingest.shards import ingest_sharded

    summary = ingest_sharded(src, out, workers=1)
    print(json.dumps({"ranks": summary["ranks"], "tables": summary["tables"], "warnings": summary["warnings"][:5]}))
    return 0


def _pickle_load(src: str, cap_gb: float) -> int:
    import pickle
    import resource

    limit = int(cap_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    t = time.perf_counter()
    try:
        with open(src, "rb") as fh:
            data = pickle.load(fh)  # our own generated file: safe to unpickle, to compare with
    except MemoryError:
        print(json.dumps({"ok": False, "why": f"MemoryError under a {cap_gb:g} GB address-space cap",
                          "seconds": round(time.perf_counter() - t, 1)}))
        return 0
    print(json.dumps({"ok": True, "entries": sum(len(d) for d in data["device_traces"]),
                      "seconds": round(time.perf_counter() - t, 2)}))
    return 0


def _check(run: Path, figures: dict) -> dict:
    from ascendscope.ingest import layout

    con = layout.connect(run)[0]
    try:
        row = con.execute("SELECT sum(entries), sum(reserved_at_dump), sum(allocated_at_dump), sum(active_at_dump), "
                          "count(anomalies) FROM mem_devices").fetchone()
    finally:
        con.close()
    got = {"entries": row[0], "reserved_at_dump": row[1], "allocated_at_dump": row[2], "active_at_dump": row[3]}
    want = {k: figures[k] for k in got}
    return {"figures_equal": got == want and row[4] == 0, "got": got}


def _measure(sizes: list[float], out: Path, cap_gb: float, keep: bool, skip_pickle_above: float) -> dict:
    from ascendscope.bench.measure import run_measured
    from ascendscope.sample_data.memsnap_big import write_big

    results = {"load_before": os.getloadavg(), "sizes": []}
    for mb in sizes:
        src = out / f"snapshot_{mb:g}mb.pickle"
        meta = src.with_suffix(".json")
        if not (src.is_file() and meta.is_file()):
            t = time.perf_counter()
            figures = write_big(src, int(mb * (1 << 20)))
            figures["write_s"] = round(time.perf_counter() - t, 1)
            meta.write_text(json.dumps(figures))
        figures = json.loads(meta.read_text())
        size_mb = src.stat().st_size / 1e6
        run = out / f"run_{mb:g}mb"
        shutil.rmtree(run, ignore_errors=True)
        ours = run_measured([*CHILD, "ingest", str(src), str(run)], timeout_s=6 * 3600)
        row = {"size_mb": round(size_mb, 1), "entries": figures["entries"], "ours": _figures(ours, size_mb)}
        if ours["rc"] == 0:
            row["ours"].update(_check(run, figures))
        else:
            row["ours"]["error"] = ours["stderr"][-800:]
        shutil.rmtree(run, ignore_errors=True)
        if mb <= skip_pickle_above:
            plain = run_measured([*CHILD, "pickleload", str(src), "--cap-gb", str(cap_gb)], timeout_s=3 * 3600)
            row["pickle_load"] = _figures(plain, size_mb)
            try:
                row["pickle_load"].update(json.loads(plain["stdout"].strip().splitlines()[-1]))
            except (ValueError, IndexError):
                row["pickle_load"]["error"] = plain["stderr"][-400:]
        results["sizes"].append(row)
        if not keep:
            src.unlink(missing_ok=True)
            meta.unlink(missing_ok=True)
        print(json.dumps(row), file=sys.stderr, flush=True)
    results["load_after"] = os.getloadavg()
    return results


def _figures(m: dict, size_mb: float) -> dict:
    return {"wall_s": round(m["wall_s"], 1), "cpu_s": round(m["cpu_s"], 1),
            "mb_per_s": round(size_mb / m["wall_s"], 1) if m["wall_s"] else None,
            "mb_per_cpu_s": round(size_mb / m["cpu_s"], 1) if m["cpu_s"] else None,
            "peak_rss_mb": round(m["peak_rss_mb"]), "tree_rss_mb": round(m["tree_rss_mb"]), "rc": m["rc"]}


def main(argv=None) -> int:
    if argv and argv[0] == "ingest":
        return _ingest(argv[1], argv[2])
    if argv and argv[0] == "pickleload":
        ap = argparse.ArgumentParser()
        ap.add_argument("src")
        ap.add_argument("--cap-gb", type=float, default=8.0)
        args = ap.parse_args(argv[1:])
        return _pickle_load(args.src, args.cap_gb)
    ap = argparse.ArgumentParser(prog="ascendscope bench memsnap", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,5000", help="snapshot sizes in MB, comma-separated")
    ap.add_argument("--out", default="bench/out/memsnap", help="where the snapshots and runs are written")
    ap.add_argument("--pickle-cap-gb", type=float, default=8.0, help="pickle.load's address-space cap")
    ap.add_argument("--skip-pickle-above", type=float, default=1e12,
                    help="do not try pickle.load on sizes above this many MB")
    ap.add_argument("--keep", action="store_true", help="keep the generated snapshots")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    print(json.dumps(_measure(sizes, out, args.pickle_cap_gb, args.keep, args.skip_pickle_above), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
