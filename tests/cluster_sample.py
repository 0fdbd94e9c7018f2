"""Runs the cluster tests add to a run store:

* :func:`synthetic_cluster_run`: a run of many ranks (1,000 by default) × many steps whose database holds the
  cluster tables only (plus the small run tables every page reads: meta, ranks, tracks, lod_levels). Its rank
  tables (``step_trace``, ``comm_matrix``) are filled with known numbers, :func:`build_cluster_tables` runs over
  them, and then they are emptied: an answer that still reads them comes out empty. Known slow ranks compute
  longer; one known link is slow; every rank file carries its ring links (to the next rank, and LOCAL);
* :func:`add_with_cluster_tables`: a copy of an ingested database with the cluster tables built, as a new run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ascendscope.ingest import SCHEMA_VERSION, commfiles
from ascendscope.ingest.cluster import build_cluster_tables, load_cluster_analysis
from ascendscope.ingest.lod import LOD_LEVELS_DDL
from ascendscope.ingest.schema import CORE_DDL, EMPTY_TABLES

BASE_COMPUTING_NS = 2_000_000
BASE_COMM_NS = 500_000
BASE_FREE_NS = 100_000
SLOW_EXTRA_NS = 1_500_000  # the slow ranks' extra computing per step
RING_MB = 64.0
RING_MS = 4.0
SLOW_LINK_MS = 40.0  # the slow link moves the same size ten times slower


@dataclass
class SyntheticRun:
    run_id: str
    ranks: int
    steps: int
    slow_ranks: list[int]
    slow_link: tuple[int, int]


def _register(data_dir: Path, name: str, db: Path, source: str) -> str:
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    run = store.create_run(name, source)
    shutil.copy(db, store.db_path(run.id))
    store.set_status(run.id, "ready")
    return run.id


def empty_run(path: Path, name: str, ranks: int, t0_ns: int, span_ns: int):
    """A run database holding only the empty tables every run has and ``ranks`` ranks without a trace, each from
    ``t0_ns`` for ``span_ns``; the open connection."""
    con = duckdb.connect(str(path))
    for ddl in CORE_DDL + list(EMPTY_TABLES.values()):
        con.execute(ddl)
    for table in commfiles.COLUMNS:
        commfiles.create_table(con, table, [], None)
    con.execute(LOD_LEVELS_DDL)
    con.execute("INSERT INTO meta VALUES ('schema_version', ?), ('source_path', ?)", [str(SCHEMA_VERSION), name])
    con.execute(f"""INSERT INTO ranks (rank, device_id, folder, rank_source, has_trace, start_ns, end_ns)
                    SELECT r, r % 16, 'rank' || r || '_ascend_pt', 'profiler_info_file', false, {int(t0_ns)},
                           {int(t0_ns) + int(span_ns)} FROM range({int(ranks)}) t(r)""")
    return con


def step_value(rank: int, step: int, slow: set[int]) -> tuple[int, int, int]:
    """(computing, exposed communication, free) of a rank at a step, in ns: a little spread, slow ranks longer."""
    wobble = (rank * 7919 + step * 104_729) % 20_000
    computing = BASE_COMPUTING_NS + wobble + (SLOW_EXTRA_NS if rank in slow else 0)
    return computing, BASE_COMM_NS + wobble // 2, BASE_FREE_NS + wobble // 4


def synthetic_cluster_run(data_dir: Path, work: Path, *, ranks: int = 1000, steps: int = 100,
                          slow_ranks: tuple[int, ...] = (17, 503, 998), slow_link: tuple[int, int] = (41, 42),
                          name: str = "cluster-synthetic") -> SyntheticRun:
    path = work / f"{name}.duckdb"
    con = empty_run(path, name, ranks, 1_736_408_883_600_000_000, 1000)
    slow = ", ".join(str(r) for r in slow_ranks)
    # the numbers of step_value(), in SQL: executemany would take minutes for 100,000 rows
    con.execute(f"""
        INSERT INTO step_trace (rank, src_row, device_id, step, computing_ns, communication_not_overlapped_ns,
                                overlapped_ns, communication_ns, free_ns)
        SELECT r, s + 1, r % 16, s, {BASE_COMPUTING_NS} + w + CASE WHEN r IN ({slow}) THEN {SLOW_EXTRA_NS} ELSE 0 END,
               {BASE_COMM_NS} + w // 2, 0, {BASE_COMM_NS} + w // 2, {BASE_FREE_NS} + w // 4
        FROM (SELECT r, s, (r * 7919 + s * 104729) % 20000 AS w FROM range({ranks}) a(r), range({steps}) b(s))""")
    src, dst = slow_link
    con.execute(f"""
        INSERT INTO comm_matrix
        SELECT r, 'step1', 1, 'collective', 'allreduce-total@g1', 'allreduce', 'total', 'g1', src, dst, transport,
               {RING_MB}, (ms * 1000000)::BIGINT, {RING_MB} / ms, NULL
        FROM (SELECT r, r AS src, (r + 1) % {ranks} AS dst, 'HCCS' AS transport,
                     CASE WHEN r = {src} AND (r + 1) % {ranks} = {dst} THEN {SLOW_LINK_MS} ELSE {RING_MS} END AS ms
              FROM range({ranks}) t(r)
              UNION ALL SELECT r, r, r, 'LOCAL', 0.1 FROM range({ranks}) t(r))""")
    build_cluster_tables(con)
    load_cluster_analysis(con, work / "no-such-folder")
    for table in ("step_trace", "comm_matrix"):  # what still reads these would answer empty
        con.execute(f"DELETE FROM {table}")
    con.close()
    return SyntheticRun(_register(data_dir, name, path, name), ranks, steps, sorted(slow_ranks), slow_link)


def add_with_cluster_tables(data_dir: Path, work: Path, name: str, db: Path, source: Path | None = None) -> str:
    """A copy of ``db`` with its cluster tables (and ``source``'s cluster_analysis_output), as a ready run."""
    path = work / f"{name}.duckdb"
    shutil.copy(db, path)
    con = duckdb.connect(str(path))
    build_cluster_tables(con)
    load_cluster_analysis(con, source or work / "no-such-folder")
    con.close()
    return _register(data_dir, name, path, str(source or name))
