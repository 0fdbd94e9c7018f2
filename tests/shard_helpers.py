"""Helpers of the sharded-ingest tests (tests/ingest/test_shards*.py): the small generated run they share, and a
whole run folder read back as text."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest


def small_run(out: Path) -> Path:
    """Three small generated ranks (every lane and flow kind), the run most sharded-ingest tests take."""
    from ascendscope.sample_data.generate import generate_run

    generate_run(out, ranks=3, steps=2, ops_per_step=30)
    return out


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real sample {path} not found")
    return path


def dump_run(out: Path) -> dict[str, list]:
    """Every table of every shard and of cluster.duckdb, as sorted text (ids included: they must be equal)."""
    dump = {}
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.duckdb"))
    for name in names:
        with duckdb.connect(str(out / name), read_only=True) as con:
            for schema, table in con.execute("SELECT schema_name, table_name FROM duckdb_tables() ORDER BY ALL"
                                             ).fetchall():
                if table == "meta":
                    continue
                cur = con.execute(f'SELECT * FROM "{schema}"."{table}"')
                cols = [d[0] for d in cur.description]
                drop = {"seconds"} if table == "files" else set()
                dump[f"{name}:{schema}.{table}"] = sorted(repr(tuple(v for c, v in zip(cols, r) if c not in drop))
                                                 for r in cur.fetchall())
    return dump
