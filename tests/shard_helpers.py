"""Helpers of the sharded-ingest tests (tests/ingest/test_shards*.py): the small generated run they share, a whole
run folder read back as text, a sharded run compared with the single-file run of its source (ids made rank-local),
and a shard's level-of-detail tables checked against their naive SQL."""

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


# id columns, by the id kind they hold
TRACK_IDS = {"track_id", "src_track_id", "dst_track_id"}
SLICE_IDS = {"slice_id", "parent_id", "src_slice_id", "dst_slice_id"}
FLOW_IDS = {"flow_id"}
VARYING = {"files": {"seconds"}}  # columns that differ between two ingests of one source
# each database chooses its level-of-detail widths from its own slices (checked against the naive SQL below)
PER_DATABASE = {"slice_lod", "lod_levels"}
STABLE_META = ("schema_version", "ascendscope_version", "source_path", "bytes_read")


def _tables(con) -> list[str]:
    return sorted(t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = "
                                            "current_database() UNION SELECT view_name FROM duckdb_views() "
                                            "WHERE NOT internal AND database_name = current_database()"
                                            ).fetchall())


def _bases(con) -> dict[str, dict[int, int]]:
    """Per rank, the smallest id of each kind minus one: a rank's local ids count from 1."""
    q = {"track": "SELECT rank, min(track_id) - 1 FROM tracks GROUP BY rank",
         "slice": "SELECT rank, min(slice_id) - 1 FROM slices GROUP BY rank",
         "flow": "SELECT rank, min(flow_id) - 1 FROM flows GROUP BY rank"}
    return {k: dict(con.execute(sql).fetchall()) for k, sql in q.items()}


def _rows(con, table: str, ids: tuple | None = None) -> tuple[list[str], list[tuple]]:
    """The table's rows with ids made rank-local, as sorted text (column order and types aside). ``ids``: the
    connection's ``(_bases, track_id -> rank)``, when the caller has them already."""
    if table == "meta":
        return ["key", "value"], sorted(con.execute("SELECT key, value FROM meta WHERE list_contains(?, key)",
                                                    [list(STABLE_META)]).fetchall())
    bases, track_rank = ids or (_bases(con), dict(con.execute("SELECT track_id, rank FROM tracks").fetchall()))
    cur = con.execute(f'SELECT * FROM "{table}"')
    cols = [d[0] for d in cur.description]
    keep = sorted(c for c in cols if c not in VARYING.get(table, ()))
    out = []
    if not (set(keep) & (TRACK_IDS | SLICE_IDS | FLOW_IDS)):  # no ids to make rank-local
        where = [cols.index(c) for c in keep]
        return keep, sorted(tuple(repr(row[i]) for i in where) for row in cur.fetchall())
    for row in cur.fetchall():
        rec = dict(zip(cols, row))
        rank = rec.get("rank")
        if rank is None and rec.get("track_id") is not None:
            rank = track_rank.get(rec["track_id"])
        for c in keep:
            v = rec[c]
            if v is None:
                continue
            if c in TRACK_IDS:
                rec[c] = v - bases["track"][track_rank[v] if c != "track_id" or rank is None else rank]
            elif c in SLICE_IDS:
                rec[c] = v - bases["slice"][rank]
            elif c in FLOW_IDS:
                rec[c] = v - bases["flow"][rank]
        out.append(tuple(repr(rec[c]) for c in keep))
    return keep, sorted(out)


def assert_same_run(single: duckdb.DuckDBPyConnection, sharded: duckdb.DuckDBPyConnection) -> None:
    tables = _tables(single)
    assert tables == [t for t in _tables(sharded)], "the same tables"
    ids = {con: (_bases(con), dict(con.execute("SELECT track_id, rank FROM tracks").fetchall()))
           for con in (single, sharded)}
    for table in tables:
        if table in PER_DATABASE:
            continue
        cols_a, rows_a = _rows(single, table, ids[single])
        cols_b, rows_b = _rows(sharded, table, ids[sharded])
        assert cols_a == cols_b, table
        assert len(rows_a) == len(rows_b), table
        assert rows_a == rows_b, table


NAIVE_LOD = """
SELECT track_id, depth, ts_ns // ? AS bucket, count(*) AS slice_count,
       arg_max(slice_id, (dur_ns, -slice_id)) AS slice_id,
       min(ts_ns) AS min_ts_ns, max(ts_ns + dur_ns) AS max_end_ns, sum(dur_ns) AS total_dur_ns
FROM slices GROUP BY track_id, depth, bucket
"""


def assert_shard_lod_is_naive(path: Path) -> None:
    """A shard's levels equal the naive SQL of ingest/lod.py over its own slices, and are listed for each of its
    ranks that has slices."""
    with duckdb.connect(str(path), read_only=True) as con:
        levels = con.execute("SELECT DISTINCT level, bucket_ns FROM lod_levels ORDER BY level").fetchall()
        ranks = {r for (r,) in con.execute("SELECT DISTINCT rank FROM slices").fetchall()}
        assert {r for (r,) in con.execute("SELECT DISTINCT rank FROM lod_levels").fetchall()} == ranks
        assert bool(levels) == bool(ranks)
        for level, width in levels:
            naive = con.execute(f"SELECT * FROM ({NAIVE_LOD}) ORDER BY ALL", [width]).fetchall()
            stored = con.execute("SELECT track_id, depth, bucket, slice_count, slice_id, min_ts_ns, max_end_ns, "
                                 "total_dur_ns FROM slice_lod WHERE level = ? ORDER BY ALL", [level]).fetchall()
            assert stored == naive, f"{path.name} level {level}"
