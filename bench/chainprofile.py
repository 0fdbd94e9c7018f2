"""Where one big rank's shard ingest spends its wall and CPU time, step by step (issues #39 and #46).

    python -m ascendscope.bench.chainprofile RANK_FOLDER OUT_DIR [--serial]

Runs the shard task of the one rank (``pipeline.ingest_shard``, as the server's pool runs it, with its overview) in
this process, with the ingest's steps wrapped: each wrapped function, and each SQL statement the trace's reader and
derivations run (``TraceRead.sql``, by its first words), adds its wall time and the process's CPU time to a row,
and its CPU µs per event of the trace. The process's CPU counts every thread: a step that runs beside another (the
CSVs beside the trace, the counters and the overview beside the nesting, the slices' write beside the flows) is
charged the other's CPU of the same seconds too, so the CPU column is an upper bound per row; the wall column is
exact. ``--serial`` runs what would run beside one after the other (each thread's work waits for it, the CSVs are
read before the trace, the slices are written once the trace is derived), so each row's CPU is its own: the
budget table of ``docs/bigtrace.md`` is measured so. Rows nest (a function's row holds its statements' rows).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

STEPS = {
    "ingest.trace_read:TraceRead": ("read", "_read_parts", "_read_with_progress", "_read_done", "bound_args_depth"),
    "ingest.trace:TraceLoad": ("derive", "_nest", "_nest_parts"),
    "ingest.nesting": ("nest", "nest_part", "bind", "pair_flow_keys"),
    "ingest.tracesplit": ("split_ranges",),
    "ingest.overview": ("write",),
    "ingest.traceflows": ("pair_parts", "bind_rows"),
    "ingest.lod": ("build",),
    "ingest.trace": ("write_slices", "write_rest"),
    "ingest.overlap": ("derive",),
    "ingest.trace_tables": ("fill_from_trace",),
    "ingest.collectives": ("build",),
    "ingest.csvfiles:CsvLoad": ("load",),
    "ingest.pipeline": ("_assemble", "assemble_files", "_metadata", "build_cluster_tables"),
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

    def table(self, wall: float, cpu: float, min_s: float = 0.2, events: int = 0) -> str:
        per = (lambda c: f" {1e6 * c / events:.2f} |") if events else (lambda c: "")
        lines = [f"whole task: wall {wall:.1f} s, CPU {cpu:.1f} s" + (f", {events:,} events, "
                                                                    f"{1e6 * cpu / events:.2f} CPU µs / event"
                                                                    if events else ""),
                 "| step | calls | wall s | share of wall | CPU s |" + (" CPU µs / event |" if events else ""),
                 "|---|---:|---:|---:|---:|" + ("---:|" if events else "")]
        for label, (n, w, c) in sorted(self.rows.items(), key=lambda kv: -kv[1][1]):
            if w >= min_s:
                lines.append(f"| `{label}` | {n} | {w:.1f} | {100 * w / wall:.0f} % | {c:.1f} |" + per(c))
        return "\n".join(lines)

    def serialize(self) -> None:
        """Run what the task runs beside one another one after the other (see the module docstring)."""
        from ascendscope.ingest import pipeline, stages, trace

        class Now:
            """``trace.Beside`` that runs its work at once, on a cursor of its own."""

            def __init__(self, cur, work, name: str = "beside"):
                self.error = None
                c = cur.cursor()
                try:
                    work(c)
                except BaseException as exc:  # noqa: BLE001 - as Beside: raised by result()
                    self.error = exc
                finally:
                    c.close()

            def join(self) -> None:
                pass

            def result(self) -> None:
                if self.error is not None:
                    raise self.error

        derive = trace.TraceLoad.derive

        def derive_then_write(tl):  # the slices' writer waits for the whole derivation
            late, tl.on_nested = tl.on_nested, (lambda: None)
            try:
                return derive(tl)
            finally:
                late()

        plan = stages.plan_tasks

        def one_at_a_time(stage_list):  # the CSVs first, then the trace (the pool has one thread)
            return sorted(plan(stage_list), key=lambda t: t[1] in stages.TIMELINE_KINDS)

        # (no CSV waits for the overview: it would wait for a trace that has not started, or run beside its write)
        for owner, name, value in ((stages, "waits_for_overview", lambda task: False),
                                   (trace, "Beside", Now), (pipeline, "Beside", Now),
                                   (trace.TraceLoad, "derive", derive_then_write), (pipeline, "plan_tasks",
                                                                                    one_at_a_time)):
            self.wrapped.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)


MIN_S = 0.2  # the steps of less wall time are left out of the table


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    serial = "--serial" in argv
    argv = [a for a in argv if a != "--serial"]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, out = Path(argv[0]), Path(argv[1])
    profile = Profile()
    if serial:
        profile.serialize()
    profile.install()
    from ascendscope.ingest import pipeline

    out.mkdir(parents=True, exist_ok=True)
    disc = pipeline.discover(src)
    if len(disc.ranks) != 1:
        raise SystemExit(f"{src}: expected one rank, found {len(disc.ranks)}")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        summary = pipeline.ingest_shard(disc.ranks, disc.root, out / "rank_00000.duckdb", src_path=str(src),
                                        workers=1 if serial else 2, threads=2, memory_limit="800MB",
                                        progress_path=str(out / "rank_00000.bytes"))
    finally:
        profile.uninstall()
    events = next((f["rows"] for f in summary.get("files", []) if f.get("kind") == "trace_view"), None)
    if events is None:
        import duckdb

        with duckdb.connect(str(out / "rank_00000.duckdb"), read_only=True) as con:
            events = con.execute("SELECT rows FROM files WHERE kind = 'trace_view'").fetchone()[0]
    print(profile.table(time.perf_counter() - wall0, time.process_time() - cpu0, min_s=MIN_S, events=int(events or 0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
