"""Ingest: turn torch_npu profiling folders (one rank or a cluster) into one DuckDB file per run, or one per rank.

Entry points: :func:`ingest.pipeline.ingest_path` (one file), :func:`ingest.shards.ingest_sharded` (a run folder
of per-rank shards, ``ingest/layout.py``) and ``ascendscope ingest`` (CLI, ``ingest/cli.py``).
The tables written are the contract documented in ``docs/schema.md``.
"""

# 2: the db export's kernel waits by the profiler's rule, its GE names and group lanes; kernels and communication
# ops of a rank that lacks them made from its trace (a run of 1 holds other numbers: Retry ingests it again)
# (and the grouped shards' layout and per-rank LOD levels of the progressive ingest)
# 3: cluster_phases (the mstx ranges as phases, ingest/phases.py)
# 4: the run-level serving_* tables (msServiceProfiler's output, ingest/serving.py)
# 5: cluster_collectives' window_kernels (each window's kernels by name, for the late rank's excess kernel)
# 6: ranks' group_folder, own_rank, session (an RL job's role folders that reuse rank ids), cluster_phases' label
# 7: the parallel strategy (parallel_strategy, rank_grid, parallel_groups), expert dumps (expert_hotspot,
# expert_deployment, expert_files) and cluster_moe_kernels
SCHEMA_VERSION = 7
