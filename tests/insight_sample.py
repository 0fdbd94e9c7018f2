"""Runs for the late-arrival, critical-path and SQL-console tests (issue #20):

* :func:`add_wait_runs`: ``sample_data.waits`` runs (whose late rank, critical path and what-if are known by
  construction) ingested into a run store: ``waits`` (4 ranks, rank 2 late by 300 µs, 2 steps) as one file and
  ``waits_sharded`` as a sharded run, and ``waits_level0`` (the same without a CANN lane);
* :func:`add_generated_run`: one more ``sample_data.waits`` run of given options (a test module's own);
* :func:`synthetic_late_run`: a run of many ranks whose ``cluster_collectives`` is filled by SQL with known late
  ranks (1,000 ranks × 20 steps × 2 groups by default, in seconds), and nothing else but the small run tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascendscope.ingest.cluster import build_cluster_tables, load_cluster_analysis
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.shards import ingest_sharded
from ascendscope.sample_data.waits import (
    LEAD_NS,
    STEP_NS,
    T0_NS,
    fill_synthetic_collectives,
    synthetic_late_rank,
    write_wait_run,
)
from tests.cluster_sample import _register as register
from tests.cluster_sample import empty_run

__all__ = ["LEAD_NS", "STEP_NS", "T0_NS", "add_generated_run", "add_wait_runs", "synthetic_late_run"]



def add_ready(store, name: str, src: Path, *, sharded: bool, group_bytes: int = 0) -> str:
    """Ingest ``src`` into ``store`` as the ready run ``name`` (sharded, a shard per rank or ranks packed up to
    ``group_bytes`` of input a shard, or one file); its id."""
    run = store.create_run(name, str(src))
    if sharded:
        summary = ingest_sharded(src, store.run_dir(run.id), workers=2, group_bytes=group_bytes)
    else:
        summary = ingest_path(src, store.db_path(run.id))
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    return run.id

@dataclass
class WaitRuns:
    ids: dict[str, str]
    truth: dict
    truth_level0: dict
    sources: dict[str, Path]


def add_wait_runs(data_dir: Path, work: Path) -> WaitRuns:
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    truth = write_wait_run(work / "waits", ranks=4, late_rank=2, extra_us=300, steps=2)
    truth0 = write_wait_run(work / "waits_level0", ranks=2, late_rank=0, extra_us=120, steps=1, cann=False)
    ids = {}
    for name, src, sharded in (("waits", work / "waits", False), ("waits_sharded", work / "waits", True),
                               ("waits_level0", work / "waits_level0", False)):
        # sharded: a shard per rank, so the scope tests load some ranks and not others
        ids[name] = add_ready(store, name, src, sharded=sharded)
    return WaitRuns(ids, truth, truth0, {"waits": work / "waits", "waits_level0": work / "waits_level0"})


def add_generated_run(data_dir: Path, work: Path, name: str, **options) -> tuple[str, dict]:
    """``write_wait_run(work, **options)`` ingested as one file into the store: its run id and its truth."""
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    truth = write_wait_run(work / name, **options)
    run = store.create_run(name, str(work / name))
    summary = ingest_path(work / name, store.db_path(run.id))
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    return run.id, truth


@dataclass
class SyntheticLate:
    run_id: str
    ranks: int
    steps: int
    path: Path

    def late_rank(self, step: int, group: int) -> int:
        """The late rank of the instance of group ``group`` at ``step``, as the table was built."""
        return synthetic_late_rank(step, group, self.ranks)

    def group_ranks(self, group: int) -> list[int]:
        return [r for r in range(self.ranks) if r % 2 == group]


def synthetic_late_run(data_dir: Path, work: Path, *, ranks: int = 1000, steps: int = 20,
                       name: str = "late-synthetic") -> SyntheticLate:
    path = work / f"{name}.duckdb"
    con = empty_run(path, name, ranks, T0_NS, steps * STEP_NS)
    build_cluster_tables(con)
    load_cluster_analysis(con, work / "no-such-folder")
    fill_synthetic_collectives(con, ranks, steps)
    con.close()
    return SyntheticLate(register(data_dir, name, path, name), ranks, steps, path)
