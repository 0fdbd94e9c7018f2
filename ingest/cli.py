"""``ascendscope ingest PATH --out DIR``: ingest with a progress bar and a closing summary.

``--out`` a folder writes the sharded layout (one shard per rank, ``ingest.shards``) with ``--executor process``
(a pool of ``--workers`` processes, default every core) or ``--executor ray`` (``--ray-address`` of a cluster, or
a local one); ``--out FILE.duckdb`` writes one file as before (``--workers`` then counts files read at once).

Exit codes: 0 loaded (warnings may exist), 2 nothing loadable / bad arguments, 130 interrupted. No traceback
reaches the user: every failure is one line naming the file and the problem.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from .archive import ArchiveError
from .executors import EXECUTORS, ExecutorUnavailable
from .pipeline import NoProfilingData, Progress, ingest_path


class BarProgress(Progress):
    """A one-line progress bar on stderr: bytes done, MB/s, the file being read."""

    def __init__(self, stream=None):
        # (None: sys.stderr as it is now, not as it was at import: a caller may have redirected it since)
        self.stream, self.lock = sys.stderr if stream is None else stream, threading.Lock()
        self.total = self.done = 0
        self.partial: dict[str, int] = {}  # bytes done of files still loading
        self.current: list[str] = []
        self.started = time.perf_counter()
        self.tty = self.stream.isatty()
        self._stop = threading.Event()
        self._ticker = None

    def begin(self, total_bytes, ranks):
        self.total, self.started = max(1, total_bytes), time.perf_counter()
        self.stream.write(f"ingesting {ranks} rank(s), {total_bytes / 1e6:.1f} MB\n")
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self):
        while not self._stop.wait(0.5):
            self.draw()

    def file_start(self, rank, name, size):
        with self.lock:
            self.current.append(name)
        self.draw()

    def file_progress(self, rank, name, done_bytes):
        with self.lock:
            self.partial[name] = done_bytes

    def file_done(self, rank, name, size, seconds):
        with self.lock:
            self.partial.pop(name, None)
            self.done += size
            if name in self.current:
                self.current.remove(name)
        if not self.tty:
            rate = size / 1e6 / seconds if seconds > 0 else 0.0
            self.stream.write(f"  rank {rank}: {name} {size / 1e6:.1f} MB in {seconds:.2f} s ({rate:.1f} MB/s)\n")
        self.draw()

    def phase(self, text):
        if not self.tty:
            self.stream.write(f"  {text} (at {time.perf_counter() - self.started:.1f} s)\n")
        with self.lock:
            self.current = [text]
        self.draw()

    def draw(self):
        if not self.tty:
            return
        with self.lock:
            done = self.done + sum(self.partial.values())
            frac = min(1.0, done / self.total) if self.total else 0.0
            elapsed = max(1e-6, time.perf_counter() - self.started)
            width = 30
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            what = ", ".join(self.current)[:50]
            self.stream.write(f"\r[{bar}] {frac * 100:5.1f}% {done / 1e6:8.1f} MB "
                              f"{done / 1e6 / elapsed:6.1f} MB/s  {what:<50}")
            self.stream.flush()

    def close(self):
        self._stop.set()
        if self.tty:
            self.draw()
            self.stream.write("\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="an *_ascend_pt folder, a folder of them (a cluster), a .zip/.tar.gz of "
                                     "either, or a trace JSON file")
    parser.add_argument("--out", required=True, help="a folder: the sharded run (manifest.json, cluster.duckdb, "
                                                      "shards/); a path ending in .duckdb: one file (replaced "
                                                      "atomically)")
    parser.add_argument("--executor", choices=EXECUTORS, default="process",
                        help="where the ranks of a sharded ingest run: a local process pool (default) or Ray")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes (or Ray CPUs) of a sharded ingest (default: every core); files read at "
                             "once for one .duckdb file (default 2)")
    parser.add_argument("--ray-address", default=None,
                        help="an existing Ray cluster (HEAD:6379) for --executor ray; default: a local one")
    parser.add_argument("--memory-limit", default=None,
                        help="DuckDB memory limit, e.g. 1GB: per task of a sharded ingest (default 800MB), or of the "
                             "one .duckdb file (default 1GB)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar, and one line instead of the summary (failed shards still listed)")


def print_summary(summary: dict, out: str, stream=None) -> None:
    """The closing summary, on ``stream`` (None: sys.stdout as it is when called)."""
    w = (sys.stdout if stream is None else stream).write
    w(f"wrote {out} in {summary['seconds']:.2f} s "
      f"({summary['bytes_read'] / 1e6 / max(summary['seconds'], 1e-6):.1f} MB/s)\n")
    w(f"ranks: {', '.join(str(r) for r in summary['ranks'])}\n")
    w("slices per kind: " + (", ".join(f"{k} {v:,}" for k, v in summary["slices_per_kind"].items()) or "none")
      + "\n")
    w("flows per category: " + (", ".join(f"{k} {v:,}" for k, v in summary["flows_per_category"].items())
                                or "none") + "\n")
    w("tables: " + ", ".join(f"{k} {v:,}" for k, v in summary["tables"].items() if v) + "\n")
    if "shards" in summary:
        failed = [s for s in summary["shards"] if s["status"] != "ready"]
        w(f"shards: {len(summary['shards']) - len(failed)} ready, {len(failed)} failed\n")
        for item in failed[:30]:
            ranks = item.get("ranks") or [item["rank"]]
            which = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}–{ranks[-1]}"
            w(f"  [{which}] not loaded: {item['error']}\n")
    warnings = summary["warnings"]
    w(f"warnings: {len(warnings)}\n")
    for item in warnings[:30]:
        rank = "-" if item["rank"] is None else item["rank"]
        w(f"  [rank {rank}] {item['file']}: {item['message']}\n")
    if len(warnings) > 30:
        w(f"  … {len(warnings) - 30} more (SELECT * FROM warnings)\n")


def print_brief(summary: dict, out: str, stream=None) -> None:
    """``--quiet``'s one line (and a line per failed shard, which the caller must hear of)."""
    stream = sys.stdout if stream is None else stream
    slices = sum(summary["slices_per_kind"].values())
    warnings = len(summary["warnings"])
    stream.write(f"wrote {out} in {summary['seconds']:.2f} s: {len(summary['ranks'])} rank(s), {slices:,} slices, "
                 f"{warnings} warning{'' if warnings == 1 else 's'}\n")
    for item in [s for s in summary.get("shards") or [] if s["status"] != "ready"][:30]:
        ranks = item.get("ranks") or [item["rank"]]
        which = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}–{ranks[-1]}"
        stream.write(f"  [{which}] not loaded: {item['error']}\n")


def single_file(out: str) -> bool:
    """``--out x.duckdb`` keeps the single-file layout; anything else is a run folder."""
    return str(out).lower().endswith(".duckdb")


def run_ingest(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        sys.stderr.write("error: --workers must be at least 1\n")
        return 2
    if args.ray_address and args.executor != "ray":
        sys.stderr.write("error: --ray-address needs --executor ray\n")
        return 2
    progress = BarProgress() if not args.quiet else Progress()
    try:
        if single_file(args.out):
            if args.executor != "process":
                sys.stderr.write("error: --executor ray writes a run folder: give --out a folder\n")
                return 2
            summary = ingest_path(args.path, args.out, progress=progress, workers=args.workers or 2,
                                  **({"memory_limit": args.memory_limit} if args.memory_limit else {}))
        else:
            from .shards import ingest_sharded

            summary = ingest_sharded(args.path, args.out, executor=args.executor, workers=args.workers,
                                     ray_address=args.ray_address, progress=progress,
                                     **({"memory_limit": args.memory_limit} if args.memory_limit else {}))
    except ExecutorUnavailable as exc:
        _close(progress)
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except NoProfilingData as exc:
        _close(progress)
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except ArchiveError as exc:
        _close(progress)
        sys.stderr.write(f"error: {args.path}: {exc}\n")
        return 2
    except KeyboardInterrupt:
        _close(progress)
        sys.stderr.write("interrupted: nothing was written\n")
        return 130
    except (OSError, ValueError) as exc:
        _close(progress)
        sys.stderr.write(f"error: {exc}\n")
        return 2
    _close(progress)
    (print_brief if args.quiet else print_summary)(summary, args.out)
    if summary.get("shards") and not any(s["status"] == "ready" for s in summary["shards"]):
        sys.stderr.write("error: no rank could be loaded (see the shards above)\n")
        return 2
    return 0


def _close(progress):
    if isinstance(progress, BarProgress):
        progress.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ascendscope.ingest",
                                     description="Ingest profiling data into DuckDB.")
    add_arguments(parser)
    return run_ingest(parser.parse_args(argv))
