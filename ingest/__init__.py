"""Ingest: turn torch_npu profiling folders (one rank or a cluster) into one DuckDB file per run, or one per rank.

Entry points: :func:`ingest.pipeline.ingest_path` (one file), :func:`ingest.shards.ingest_sharded` (a run folder
of per-rank shards, ``ingest/layout.py``) and ``ascendscope ingest`` (CLI, ``ingest/cli.py``).
The tables written are the contract documented in ``docs/schema.md``.
"""

SCHEMA_VERSION = 2
