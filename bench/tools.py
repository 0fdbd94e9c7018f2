"""The ingest tools the suite compares, each as one command to run in a fresh child process.

    python -m ascendscope.bench.tools ours SRC OUT      # our ingest, end to end, into OUT (sharded when possible;
                                                        # --progress-log FILE: its progress, a line per change)
    python -m ascendscope.bench.tools single SRC OUT    # our single-file ingest (ingest_path), into OUT
    python -m ascendscope.bench.tools floor SRC         # DuckDB read_json of every trace into typed columns, only
    python -m ascendscope.bench.tools tb VIEW           # torch-tb-profiler-ascend's RunLoader on a run folder

``commands(...)`` builds the command of each tool (msprof-analyze runs through its own CLI) or says why it
cannot run here. Each child prints one JSON line on stdout that shows what it did (so a tool that "succeeds"
on nothing is caught).

``ours`` goes through ``ingest.shards.ingest_sharded`` (per-rank shards, a process pool) when this version has
it, else through ``ingest.pipeline.ingest_path`` (one file); the JSON line names the path taken. ``single`` is
always ``ingest_path``: the one-file database the server opens today.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

TRACE_GLOB = "trace_view.json*"
PROGRESS_LOG = "progress.log"
MSPROF_MODE = "communication_time"  # the cluster analysis that reads the text export (the others need the db one)


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def traces(src: Path) -> list[Path]:
    return sorted(src.rglob(TRACE_GLOB))


def tb_view(src: Path, view: Path) -> Path:
    """A folder of links to the rank folders, named as torch_npu names them (``{host}_{pid}_{time}_ascend_pt``):
    the loader only takes folders matching ``^(.*?)_(\\d+(\\.\\d+)?)_ascend_pt$``, which ``rank{r}_ascend_pt`` is
    not. The files read are the same."""
    if view.exists():
        shutil.rmtree(view)
    view.mkdir(parents=True)
    for rank_dir in sorted(src.glob("*_ascend_pt")):
        (view / f"{rank_dir.name.removesuffix('_ascend_pt')}_0_ascend_pt").symlink_to(rank_dir.resolve())
    return view


def commands(tool: str, src: Path, work: Path, out: Path) -> tuple[list[str] | None, str]:
    """The command that runs ``tool`` on the run folder ``src`` (scratch in ``work``; ours writes ``out`` and
    logs its progress to ``work/progress.log``), or ``(None, why not)``."""
    py = [sys.executable, "-m", "ascendscope.bench.tools"]
    if tool == "ours":
        return [*py, "ours", str(src), str(out), "--progress-log", str(work / PROGRESS_LOG)], ""
    if tool == "ours_single":
        if not sharded_available():
            return None, "skipped"
        return [*py, "single", str(src), str(out)], ""
    if tool == "floor":
        return [*py, "floor", str(src)], ""
    if tool == "msprof_analyze":
        exe = shutil.which("msprof-analyze", path=str(Path(sys.executable).parent)) or shutil.which("msprof-analyze")
        if not installed("msprof_analyze") or exe is None:
            return None, "not installed"
        return [exe, "cluster", "-d", str(src), "-m", MSPROF_MODE, "-o", str(work / "msprof_out")], ""
    if tool == "tb_profiler_ascend":
        if not installed("torch_tb_profiler"):
            return None, "not installed"
        return [*py, "tb", str(tb_view(src, work / "tb_view"))], ""
    raise ValueError(tool)


def sharded_available() -> bool:
    return installed("ascendscope.ingest.shards")


def progress_logger(path: Path):
    """An ``ingest.pipeline.Progress`` writing "seconds done_bytes total_bytes" whenever the bytes done change
    (read by the suite: when progress first moved, and the longest it stood still)."""
    import threading

    from ascendscope.ingest.pipeline import Progress

    class Logged(Progress):
        def __init__(self):
            self.t0, self.total, self.done, self.partial = time.perf_counter(), 0, 0, {}
            self.lock = threading.Lock()
            self.out = open(path, "w", encoding="ascii")

        def begin(self, total_bytes, ranks):
            self.total = total_bytes
            self._log()

        def file_progress(self, rank, name, done_bytes):
            with self.lock:
                self.partial[name] = done_bytes
            self._log()

        def file_done(self, rank, name, size, seconds):
            with self.lock:
                self.partial.pop(name, None)
                self.done += size
            self._log()

        def _log(self):
            with self.lock:
                self.out.write(f"{time.perf_counter() - self.t0:.3f} {self.done + sum(self.partial.values())} "
                               f"{self.total}\n")
                self.out.flush()

    return Logged()


def run_ours(src: Path, out: Path, executor: str = "process", workers: int | None = None,
             single: bool = False, progress_log: Path | None = None) -> dict:
    t0 = time.perf_counter()
    if sharded_available() and not single:
        from ascendscope.ingest.shards import ingest_sharded

        kwargs = {"executor": executor} | ({"workers": workers} if workers else {})
        if progress_log is not None:
            kwargs["progress"] = progress_logger(progress_log)
        summary = ingest_sharded(src, out, **kwargs)
        path = f"ingest.shards.ingest_sharded({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    else:
        from ascendscope.ingest.pipeline import ingest_path

        summary = ingest_path(src, out)
        path = "ingest.pipeline.ingest_path"
    shard_s = sorted(float(s.get("seconds") or 0) for s in summary.get("shards") or [])
    return {"path": path, "seconds": round(time.perf_counter() - t0, 3),
            "ranks": len(summary.get("ranks") or []) if isinstance(summary, dict) else None,
            "warnings": len(summary.get("warnings") or []) if isinstance(summary, dict) else None,
            # files the run lost: a measurement that dropped one is not of the whole input
            "not_loaded": [f"{w.get('file')}: {w.get('message')}"[:300] for w in summary.get("warnings") or []
                           if isinstance(w, dict) and str(w.get("message", "")).startswith("not loaded")]
            if isinstance(summary, dict) else None,
            # the shard tasks' own time (the rest of the wall is start-up, the small files and cluster.duckdb)
            **({"shards": len(shard_s), "shard_seconds_sum": round(sum(shard_s), 2),
                "shard_seconds_median": shard_s[len(shard_s) // 2]} if shard_s else {})}


def run_floor(src: Path) -> dict:
    import duckdb

    from ascendscope.ingest.trace import EVENT_COLUMNS

    files = [str(p) for p in traces(src)]
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = '1GB'")  # as our ingest's default: the floor spills like ours would
    # every trace in one read, as the same typed columns our ingest asks for; DuckDB reads files in parallel
    con.execute(f"CREATE TABLE ev AS SELECT * FROM read_json(?, format = 'array', columns = {EVENT_COLUMNS.format()})",
                [files])
    return {"traces": len(files), "events": con.execute("SELECT count(*) FROM ev").fetchone()[0]}


def run_tb(view: Path) -> dict:
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    run = RunLoader("bench", str(view), io.Cache(), device_target="Ascend").load()
    # one profile per rank that parsed, plus the distributed view when communication was found
    return {"profiles": len(run.profiles), "rank_folders": len(list(view.iterdir()))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ascendscope.bench.tools", description=__doc__.split("\n\n")[0])
    ap.add_argument("tool", choices=["ours", "single", "floor", "tb"])
    ap.add_argument("src", type=Path, help="the run folder (tb: the folder of links from tb_view)")
    ap.add_argument("out", type=Path, nargs="?", help="ours: where to write")
    ap.add_argument("--executor", default="process", help="ours, sharded ingest: process or ray")
    ap.add_argument("--workers", type=int, default=None, help="ours, sharded ingest: worker count")
    ap.add_argument("--progress-log", type=Path, default=None, help="ours, sharded ingest: log its progress here")
    args = ap.parse_args(argv)
    if args.tool in ("ours", "single"):
        result = run_ours(args.src, args.out, args.executor, args.workers, single=args.tool == "single",
                          progress_log=args.progress_log)
    elif args.tool == "floor":
        result = run_floor(args.src)
    else:
        result = run_tb(args.src)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":  # the tb loader starts its workers with spawn, which re-imports this module
    sys.exit(main())
