"""Ingest: turn torch_npu profiling folders (one rank or a cluster) into one DuckDB file per run.

Entry points: :func:`ingest.pipeline.ingest_path` (library) and ``ascendscope ingest`` (CLI, ``ingest/cli.py``).
The tables written are the contract documented in ``docs/schema.md``.
"""

SCHEMA_VERSION = 1
