"""Build a run database of N synthetic slices directly in DuckDB (for query benchmarks at 10M+ slices).

Generating a 10M-slice run as JSON would take a 4 GB trace and minutes of writing; the query benchmark only
needs the tables, so they are synthesised with SQL in the layout ingest writes (docs/schema.md): per rank a
Python lane with three nesting levels, CANN, four hardware streams, an HCCL group and planes, and the four
Overlap Analysis rows; slices stored ordered by (track_id, ts_ns); then the same level-of-detail build
(``ingest.lod.build``). Durations and gaps are pseudo-random but deterministic.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb

from ascendscope.ingest import SCHEMA_VERSION, commfiles, lod
from ascendscope.ingest.schema import CORE_DDL, EMPTY_TABLES

ORIGIN_NS = 1_736_408_883_000_000_000
# (kind, process_name, thread names, share of the rank's slices, nesting levels)
LANES = [
    ("python", "Python", ["Thread 1000", "Thread 1001"], 0.30, 3),
    ("cann", "CANN", ["Thread 1000", "Thread 1001"], 0.20, 2),
    ("hardware", "Ascend Hardware", ["Stream 0", "Stream 2", "Stream 3", "Stream 4"], 0.30, 1),
    ("communication", "HCCL", ["Group 0 Communication", "Plane 0", "Plane 1", "Plane 2"], 0.12, 1),
    ("overlap", "Overlap Analysis", ["Computing", "Communication", "Communication(Not Overlapped)", "Free"],
     0.08, 1),
]
NAMES = ["aten::add", "aten::mm", "aten::conv2d", "aten::relu", "aclnnAdd", "MatMulV2", "Conv2D", "TransData",
         "hcom_allReduce_", "Memcpy", "Notify_Wait", "Computing", "Free", "AscendCL@aclrtLaunch"]


def build(out: Path, slices: int, ranks: int = 2, span_s: float = 60.0) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    con.execute("SET enable_progress_bar = false")
    for ddl in CORE_DDL:
        con.execute(ddl)
    for ddl in EMPTY_TABLES.values():
        con.execute(ddl)
    span_ns = int(span_s * 1e9)
    track_rows, plan = [], []
    track_id = 0
    for rank in range(ranks):
        for kind, pname, threads, share, levels in LANES:
            for sort, tname in enumerate(threads):
                track_id += 1
                n = max(1, int(slices / ranks * share / len(threads)))
                track_rows.append((track_id, rank, 1000 + rank, sort, pname, tname, kind, "CPU" if kind in
                                   ("python", "cann") else "NPU", 0, sort, track_id))
                plan.append((track_id, rank, n, levels))
    con.executemany("INSERT INTO tracks (track_id, rank, pid, tid, process_name, thread_name, kind, label, "
                    "process_sort_index, thread_sort_index, sort_index, derived) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, false)", track_rows)
    names = "[" + ", ".join(f"'{n}'" for n in NAMES) + "]"
    offset = 0
    for tid, rank, n, levels in plan:
        # n slices split over `levels` nesting levels: each parent holds 2 children per level below it
        parents = max(1, n // (2 ** levels - 1))
        period = span_ns // parents
        con.execute(f"""
            INSERT INTO slices
            WITH p AS (SELECT i, {ORIGIN_NS} + i * {period} + (hash(i, {tid}) % ({period} // 10)) AS ts,
                              {period} // 4 + (hash({tid}, i) % ({period} // 2)) AS dur
                       FROM range({parents}) t(i)),
            lv AS (SELECT i, 0 AS depth, 0 AS k, ts, dur FROM p
                   UNION ALL SELECT i, 1, c, ts + c * dur // 2 + dur // 20, dur * 2 // 5 FROM p, range(2) t(c)
                   WHERE {levels} > 1
                   UNION ALL SELECT i, 2, c, ts + (c // 2) * dur // 2 + (c % 2) * dur // 5 + dur // 10, dur // 6
                   FROM p, range(4) t(c) WHERE {levels} > 2)
            SELECT {offset} + row_number() OVER (ORDER BY ts, dur DESC), {tid}, {rank}, ts, dur, depth, NULL,
                   list_extract({names}, 1 + CAST(hash(i, depth, k) % {len(NAMES)} AS INTEGER)), 'synthetic', 'X',
                   NULL
            FROM lv ORDER BY ts, dur DESC""")
        offset = con.execute("SELECT count(*) FROM slices").fetchone()[0]
    con.execute("""UPDATE tracks SET slice_count = s.n, max_depth = s.d, max_dur_ns = s.m, min_ts_ns = s.lo,
                   max_end_ns = s.hi FROM (SELECT track_id, count(*) n, max(depth) d, max(dur_ns) m, min(ts_ns) lo,
                   max(ts_ns + dur_ns) hi FROM slices GROUP BY track_id) s WHERE s.track_id = tracks.track_id""")
    for rank in range(ranks):
        con.execute("INSERT INTO ranks (rank, device_id, folder, rank_source, profiler_level, has_trace, "
                    "overlap_source, start_ns, end_ns) SELECT ?, ?, ?, 'synthetic', 'Level1', true, 'trace', "
                    "min(ts_ns), max(ts_ns + dur_ns) FROM slices WHERE rank = ?", [rank, rank, f"rank{rank}", rank])
    for table in commfiles.COLUMNS:
        commfiles.create_table(con, table, [], None)
    t0 = time.perf_counter()
    levels = lod.build(con)
    lod_s = time.perf_counter() - t0
    con.executemany("INSERT INTO meta VALUES (?, ?)", [("schema_version", str(SCHEMA_VERSION)),
                                                        ("source_path", "synthetic"), ("bytes_read", "0"),
                                                        ("ingest_seconds", "0")])
    n = con.execute("SELECT count(*) FROM slices").fetchone()[0]
    con.execute("CHECKPOINT")
    con.close()
    os.replace(tmp, out)
    return {"slices": n, "tracks": len(track_rows), "lod_levels": levels, "lod_seconds": round(lod_s, 2)}
