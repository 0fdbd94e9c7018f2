"""Samples several test modules ingest the same way, ingested once per test process and shared: a fixture of one
module is not another's, and tests/conftest.py holds only the session's own. The first caller's
``tmp_path_factory`` (the session's) makes the folder; every caller reads the database (read-only) and the summary
(which it must not change), or copies the file to change it."""

from __future__ import annotations

from pathlib import Path

_MADE: dict[str, tuple[Path, dict]] = {}


def single_file(tmp_path_factory, src: Path) -> tuple[Path, dict]:
    """``(database, summary)``: ``ingest_path(src, …)`` with its defaults, made once per process."""
    from ascendscope.ingest.pipeline import ingest_path

    key = str(src)
    if key not in _MADE:
        out = tmp_path_factory.mktemp("shared-run") / "run.duckdb"
        _MADE[key] = out, ingest_path(src, out)
    return _MADE[key]
