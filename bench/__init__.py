"""Benchmarks: ``ascendscope bench ingest`` and ``ascendscope bench query`` (see docs/benchmarks.md)."""
