"""Benchmarks: ``ascendscope bench suite|ingest|query|concurrency|render|scaling`` (see docs/benchmarks.md)."""
