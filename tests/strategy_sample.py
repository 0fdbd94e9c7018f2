"""Runs for the parallel-strategy tests (issue #48): ``sample_data.strategy`` runs of a known strategy and known slow
parts, each ingested the way the server does (``ingest_sharded`` into a run store), and a store serving them.

* ``stage``: TP2 × PP4 × DP2, PP stage 2 computes 20 % more (every rank's file states its groups);
* ``rank``: TP2 × PP2 × DP4, rank 5 computes 20 % more and arrives late in its TP group (only rank 0 has a
  profiler_metadata.json: the rest are placed by rank 0's groups and the rank order);
* ``moe``: TP2 × PP2 × DP4 × EP2, 3 MoE layers, expert 1 hot (GroupedMatmul kernels and expert dumps);
* ``order``: TP2 × PP2 × DP2 laid out tp-cp-pp-ep-dp, the files giving only the sizes (the default order is wrong).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascendscope.sample_data.strategy import write_strategy_run

RUNS = {
    "stage": {"tp": 2, "pp": 4, "dp": 2, "slow_stage": 2},
    "rank": {"tp": 2, "pp": 2, "dp": 4, "slow_rank": 5, "metadata": "rank0"},
    "moe": {"tp": 2, "pp": 2, "dp": 4, "ep": 2, "moe_layers": 3, "hot_expert": 1},
    "order": {"tp": 2, "pp": 2, "dp": 2, "order": "tp-cp-pp-ep-dp", "metadata": "sizes"},
}


@dataclass
class StrategyRuns:
    data_dir: Path
    ids: dict[str, str]
    truth: dict[str, dict]
    sources: dict[str, Path]


def add_strategy_runs(data_dir: Path, work: Path, specs: dict[str, dict] | None = None) -> StrategyRuns:
    """Each ``{name: write_strategy_run options}`` (default :data:`RUNS`) written under ``work`` and ingested into
    the store at ``data_dir`` as a ready run."""
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    ids, truth, sources = {}, {}, {}
    for name, options in (RUNS if specs is None else specs).items():
        src = work / name
        truth[name] = write_strategy_run(src, **options)
        run = store.create_run(name, str(src))
        summary = ingest_sharded(src, store.run_dir(run.id), workers=2)
        store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
        ids[name], sources[name] = run.id, src
    return StrategyRuns(data_dir, ids, truth, sources)
