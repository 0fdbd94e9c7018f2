"""One rank's timeline from several msprof JSON files: per-iteration files (older layout) or slices of one timeline.

Each file is read by ``ingest.trace`` (numeric ``ts`` µs become exact integer ns as for any trace) into its own
staging tables, then the events are merged in file order into the rank's ``{prefix}ev_t`` and derived like a
``trace_view.json``. An event repeated exactly in an earlier file (every per-iteration file repeats the lanes'
metadata) is kept once; repeated events other than metadata are counted in a warning. A file that cannot be
read is named in a warning and the others still load.

msprof writes no ProfilerStep: the iterations are the steps. They come from the Step Trace lane's
``Iteration <n>`` slices, or else from ``step_trace_*.csv`` (``Iteration ID``, ``Iteration End(us)``,
``Iteration Time(us)``), so the Summary can split the Overlap Analysis lane by iteration.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from .. import overlap, trace, tracefile
from .protocol import Job, Staged

OLDER = re.compile(r"^(msprof|hccl|task_time|step_trace)_(\d+)_(\d+)_(\d+)\.json$")
PARTS_OF_MSPROF = ("task_time", "hccl")  # their events are in the same iteration's msprof_*.json

# identical events: every column of the event table (args compared as text)
SAME_EVENT = "ph, name, cat, pid, tid, tid_text, ts_ns, dur_ns, flow_key, bp, CAST(args AS VARCHAR), bad_dur"

STEPS_FROM_ITERATIONS = """
INSERT INTO {p}steps
SELECT rank, step, name, local_id, ts_ns, end_ns, ts_ns, end_ns FROM (
    SELECT t.rank, TRY_CAST(regexp_extract(e.name, '^Iteration ([0-9]+)$', 1) AS BIGINT) AS step, e.name, n.local_id,
           n.ts_ns, n.ts_ns + n.dur_ns AS end_ns
    FROM {p}nest n JOIN {p}ev e USING (seq) JOIN {p}tracks t USING (local_track)
    WHERE e.ph = 'X' AND regexp_full_match(e.name, 'Iteration [0-9]+')
      AND (e.cat = 'Iteration Time' OR t.thread_name LIKE 'Step Trace%' OR t.process_name = 'Step Trace')
    QUALIFY row_number() OVER (PARTITION BY step ORDER BY n.ts_ns, n.local_id) = 1)
ORDER BY ts_ns
"""

STEP_CSV_COLUMNS = ("Iteration ID", "Iteration End(us)", "Iteration Time(us)")


def older_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """The per-iteration files of a ``device_N/timeline`` folder to read, and those not read because the
    same iteration's ``msprof_*.json`` holds their events (``step_trace_*`` files each repeat every iteration:
    read, once, only when there is no ``msprof_*`` file at all)."""
    iterations: dict[tuple[int, int, int], dict[str, Path]] = {}
    for path in folder.iterdir():
        m = OLDER.match(path.name)
        if m and path.is_file():
            iterations.setdefault((int(m.group(2)), int(m.group(3)), int(m.group(4))), {})[m.group(1)] = path
    whole = any("msprof" in files for files in iterations.values())
    read: list[Path] = []
    skipped: list[Path] = []
    for key in sorted(iterations):
        files = iterations[key]
        if "msprof" in files:
            read.append(files["msprof"])
            skipped += [files[k] for k in PARTS_OF_MSPROF if k in files]
        else:
            read += [files[k] for k in PARTS_OF_MSPROF if k in files]
        if "step_trace" in files:
            (skipped if whole else read).append(files["step_trace"])
    return read, skipped


def stage(job: Job, files: list[Path], step_csvs: list[Path], skipped: list[Path]) -> Staged:
    cur, p = job.cur, job.prefix
    staged = Staged(timeline=True)
    if skipped:
        staged.warnings.append(f"{len(skipped)} hccl_*, task_time_* and step_trace_* files not read: their events "
                               "are in the msprof_*.json files, which were read")
    if len(files) == 1:  # one file: read straight into the rank's tables
        tl = trace.TraceLoad(cur, p, files[0], job.workdir, files[0].name, on_progress=job.on_progress,
                             on_nested=job.on_nested, split_read=job.split_read, rank=job.rank,
                             on_sliced=job.on_sliced)
        tl.read()
        staged.status = tl.status
        where = f"{files[0].name}: "
    else:
        _merge(job, files, staged)
        cur.execute(trace.EV_VIEW.format(p=p))
        tl = trace.TraceLoad(cur, p, files[0], job.workdir, job.display, on_progress=job.on_progress,
                             on_nested=job.on_nested, rank=job.rank)
        where = ""
    staged.rows = cur.execute(f"SELECT count(*) FROM {p}ev_t").fetchone()[0]  # as read: before any derived lane
    added = overlap.derive(cur, p, job.rank)
    tl.derive()
    staged.warnings += [where + w for w in tl.warnings]
    staged.overlap_source = "derived" if added else "trace"
    if added:
        staged.warnings.append(f"no Overlap Analysis lane in the timeline: derived one from the device tasks "
                               f"({added} slices)")
    staged.warnings += _steps(cur, p, step_csvs)
    return staged


def _merge(job: Job, files: list[Path], staged: Staged) -> None:
    """Read every file into its own tables, then their events, in file order and without exact repeats, into
    ``{prefix}ev_t``."""
    cur, p = job.cur, job.prefix
    total = sum(f.stat().st_size for f in files) or 1
    done, ok, by_message = 0, [], {}
    for i, path in enumerate(files):
        tl = trace.TraceLoad(cur, f"{p}m{i}_", path, job.workdir / f"m{i}", path.name, rank=job.rank)
        try:
            tl.read()
            ok.append(i)
            for w in tl.warnings:
                by_message.setdefault(w, []).append(path.name)
            if tl.status != "loaded":
                staged.status = "partial"
        except (tracefile.TraceFileError, duckdb.Error, ValueError, OSError, UnicodeError) as exc:
            trace.drop_stage(cur, f"{p}m{i}_")
            staged.status = "partial"
            text = str(exc).strip().splitlines()
            staged.warnings.append(f"{path.name}: not loaded: {(text[0] if text else type(exc).__name__)[:500]}")
        done += path.stat().st_size
        job.on_progress(trace.TraceLoad.READ_SHARE * 0.9 * done / total)
    if not ok:
        raise ValueError(f"none of the {len(files)} timeline files could be read ({staged.warnings[-1]})")
    for message, names in by_message.items():
        where = names[0] if len(names) == 1 else f"{len(names)} files ({names[0]} …)"
        staged.warnings.append(f"{where}: {message}")
    union = " UNION ALL BY NAME ".join(f"SELECT {i} AS file_, rowid AS row_, * FROM {p}m{i}_ev_t" for i in ok)
    cur.execute(f"CREATE OR REPLACE TABLE {p}all_ev AS {union}")
    for i in ok:
        trace.drop_stage(cur, f"{p}m{i}_")
    cur.execute(f"""CREATE OR REPLACE TABLE {p}ev_t AS
                    SELECT * EXCLUDE (file_, row_) FROM {p}all_ev
                    QUALIFY min(file_) OVER (PARTITION BY {SAME_EVENT}) = file_
                    ORDER BY file_, row_""")
    before = dict(cur.execute(f"SELECT coalesce(ph, ''), count(*) FROM {p}all_ev GROUP BY ALL").fetchall())
    after = dict(cur.execute(f"SELECT coalesce(ph, ''), count(*) FROM {p}ev_t GROUP BY ALL").fetchall())
    cur.execute(f"DROP TABLE {p}all_ev")
    dropped = {ph: n - after.get(ph, 0) for ph, n in before.items() if n > after.get(ph, 0) and ph != "M"}
    if dropped:
        staged.warnings.append(f"{sum(dropped.values())} events repeated exactly in an earlier file were read once ("
                               + ", ".join(f"{n} {ph or '(no ph)'}" for ph, n in sorted(dropped.items())) + ")")


def _steps(cur, p: str, step_csvs: list[Path]) -> list[str]:
    """Fill ``{p}steps`` from the iterations when the timeline has no ProfilerStep; return the notes."""
    if cur.execute(f"SELECT count(*) FROM {p}steps").fetchone()[0]:
        return [f"{path.name}: not read: the timeline's ProfilerStep slices give the steps" for path in step_csvs]
    cur.execute(STEPS_FROM_ITERATIONS.format(p=p))
    if cur.execute(f"SELECT count(*) FROM {p}steps").fetchone()[0]:
        return [f"{path.name}: not read: the timeline's Step Trace lane gives the iterations" for path in step_csvs]
    notes = []
    for path in step_csvs:
        try:
            notes += _steps_from_csv(cur, p, path)
        except duckdb.Error as exc:
            notes.append(f"{path.name}: not read: {str(exc).strip().splitlines()[0][:300]}")
    return notes


def _steps_from_csv(cur, p: str, path: Path) -> list[str]:
    cols = [r[0] for r in cur.execute("DESCRIBE SELECT * FROM read_csv(?, header = true, all_varchar = true)",
                                      [str(path)]).fetchall()]
    missing = [c for c in STEP_CSV_COLUMNS if c not in cols]
    if missing:
        return [f"{path.name}: not read: no column {', '.join(missing)}"]
    n_id, n_end, n_time = (f'"{c}"' for c in STEP_CSV_COLUMNS)
    n = cur.execute(f"""
        INSERT INTO {p}steps
        SELECT (SELECT any_value(rank) FROM {p}ev_t), step, 'Iteration ' || step, NULL, end_ns - dur_ns, end_ns,
               end_ns - dur_ns, end_ns FROM (
            SELECT to_bigint({n_id}) AS step, us_to_ns({n_end}) AS end_ns, us_to_ns({n_time}) AS dur_ns
            FROM read_csv(?, header = true, all_varchar = true))
        WHERE step IS NOT NULL AND end_ns IS NOT NULL AND dur_ns IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY step ORDER BY end_ns) = 1
        ORDER BY end_ns""", [str(path)]).fetchone()[0]
    return [f"{path.name}: {n} iterations read as the steps"]
