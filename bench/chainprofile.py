"""Where one big rank's shard ingest spends its wall and CPU time, step by step (issue #39's profile).

    python -m ascendscope.bench.chainprofile RANK_FOLDER OUT_DIR

Runs the shard task of the one rank (``pipeline.ingest_shard``, as the server's pool runs it, with its overview) in
this process, with the ingest's steps wrapped: each wrapped function, and each SQL statement the trace's reader and
derivations run (``TraceRead.sql``, by its first words), adds its wall time and the process's CPU time to a row.
The process's CPU counts every thread: a step that runs beside another (the CSVs beside the trace, the counters
and the overview beside the nesting) is charged the other's CPU of the same seconds too, so the CPU column is an
upper bound per row; the wall column is exact. Rows nest (a function's row holds its statements' rows).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

STEPS = {
    "ingest.trace_read:TraceRead": ("read", "_read_parts", "_read_with_progress", "_read_done", "_bound_args_depth"),
    "ingest.trace:TraceLoad": ("derive", "_nest", "_nest_parts"),
    "ingest.nesting": ("nest", "nest_part", "bind", "pair_flows"),
    "ingest.tracesplit": ("split_ranges",),
    "ingest.overview": ("write",),
    "ingest.traceflows": ("pair_parts", "bind_rows"),
    "ingest.lod": ("build",),
    "ingest.trace": ("write_slices", "write_rest"),
    "ingest.pipeline": ("_assemble", "assemble_files"),
}


class Profile:
    def __init__(self):
        self.rows: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
        self.lock = threading.Lock()
        self.wrapped: list[tuple[object, str, object]] = []  # (owner, name, original), for uninstall()

    def add(self, label: str, wall0: float, cpu0: float) -> None:
        with self.lock:
            row = self.rows[label]
            row[0] += 1
            row[1] += time.perf_counter() - wall0
            row[2] += time.process_time() - cpu0

    def wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)
        self.wrapped.append((owner, name, original))

        @functools.wraps(original)
        def timed(*args, **kwargs):
            wall0, cpu0 = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(label, wall0, cpu0)

        setattr(owner, name, timed)

    def install(self) -> None:
        import importlib

        for where, names in STEPS.items():
            module, _, cls = where.partition(":")
            owner = importlib.import_module(f"ascendscope.{module}")
            owner = getattr(owner, cls) if cls else owner
            for name in names:
                self.wrap(owner, name, f"{cls or module.rpartition('.')[2]}.{name}")
        from ascendscope.ingest.trace_read import TraceRead

        sql = TraceRead.sql

        def timed_sql(reader, template, params=None, **names):
            wall0, cpu0 = time.perf_counter(), time.process_time()
            try:
                return sql(reader, template, params, **names)
            finally:
                self.add("SQL " + " ".join(template.split())[:80], wall0, cpu0)

        self.wrapped.append((TraceRead, "sql", sql))
        TraceRead.sql = timed_sql

    def uninstall(self) -> None:
        for owner, name, original in reversed(self.wrapped):
            setattr(owner, name, original)
        self.wrapped.clear()

    def table(self, wall: float, cpu: float, min_s: float = 0.2) -> str:
        lines = [f"whole task: wall {wall:.1f} s, CPU {cpu:.1f} s", "| step | calls | wall s | share of wall | CPU s |",
                 "|---|---:|---:|---:|---:|"]
        for label, (n, w, c) in sorted(self.rows.items(), key=lambda kv: -kv[1][1]):
            if w >= min_s:
                lines.append(f"| `{label}` | {n} | {w:.1f} | {100 * w / wall:.0f} % | {c:.1f} |")
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, out = Path(argv[0]), Path(argv[1])
    profile = Profile()
    profile.install()
    from ascendscope.ingest import pipeline

    out.mkdir(parents=True, exist_ok=True)
    disc = pipeline.discover(src)
    if len(disc.ranks) != 1:
        raise SystemExit(f"{src}: expected one rank, found {len(disc.ranks)}")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    pipeline.ingest_shard(disc.ranks, disc.root, out / "rank_00000.duckdb", src_path=str(src), workers=2,
                          memory_limit="800MB", progress_path=str(out / "rank_00000.bytes"))
    print(profile.table(time.perf_counter() - wall0, time.process_time() - cpu0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
