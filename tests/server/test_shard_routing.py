"""On a sharded run of several ranks, a viewport query about one rank's tracks reads that rank's shard alone, not
the union of every shard (issue #18: at 8 ranks a third of the cost), and answers exactly as the single-file layout
does: slices of two ranks in one request (exact and level of detail), counters and flows; on a generated run and
on the real level1 sample, one shard per rank, on a generated run whose two small ranks share a shard (issue #17:
both ranks are read from that shard, attached as ``r0``), and on one of four ranks in two shards of two (ranks 2
and 3 are read from the second, attached as ``r2``: a rank that is not its shard's first still finds it)."""

from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient

from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.shards import ingest_sharded
from ascendscope.server.runs import INDEX_DIR, RunStore
from tests.conftest import PYTORCH_TEXT
from tests.server.test_sharded_runs import _natural_ids, _normal


def generated_source(tmp_path_factory, ranks: int):
    """A generated run of ``ranks`` ranks and its single-file database: ``(source, run.duckdb)``."""
    from ascendscope.sample_data.generate import generate_run

    root = tmp_path_factory.mktemp("routing-src")
    generate_run(root / "run", ranks=ranks, steps=2, ops_per_step=60, seed=3)
    ingest_path(root / "run", root / "run.duckdb")
    return root / "run", root / "run.duckdb"


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The generated two-rank run (and its single-file database) that two layouts shard differently."""
    return generated_source(tmp_path_factory, 2)


@pytest.fixture(scope="module", params=["generated", "grouped", "two groups", "level1"])
def layouts(request, tmp_path_factory):
    import duckdb

    from ascendscope.ingest.layout import connect
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    if request.param == "level1":
        if not (PYTORCH_TEXT / "level1").is_dir():
            pytest.skip(f"real samples not found at {PYTORCH_TEXT}")
        # its single-file database is the session's (ingest_path of the same folder)
        source, single_db = PYTORCH_TEXT / "level1", request.getfixturevalue("level1_db")
    elif request.param == "two groups":
        source, single_db = generated_source(tmp_path_factory, 4)
    else:
        source, single_db = request.getfixturevalue("two_ranks")
    store = RunStore(tmp_path_factory.mktemp("routing"))
    single, sharded = store.create_run("single", str(source)), store.create_run("sharded", str(source))
    shutil.copy(single_db, store.db_path(single.id))
    # a shard per rank (group_bytes=0), the small ranks grouped as the server does by default, or two per shard
    grouping = {"grouped": {}, "two groups": {"group_bytes": int(2.5 * _largest_rank_bytes(source))}}.get(
        request.param, {"group_bytes": 0})
    ingest_sharded(source, store.run_dir(sharded.id), workers=2, **grouping)
    if request.param == "two groups":
        from ascendscope.ingest.layout import read_manifest

        assert [e["ranks"] for e in read_manifest(store.run_dir(sharded.id))["shards"]] == [[0, 1], [2, 3]]
    for run in (single, sharded):
        store.set_status(run.id, "ready")
    with duckdb.connect(str(store.db_path(single.id)), read_only=True) as con:
        single_ids = _natural_ids(con)
    con, _ = connect(store.run_dir(sharded.id))
    sharded_ids = _natural_ids(con)
    con.close()
    app = create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)), store=store)
    with TestClient(app) as client:
        yield client, {"single": (single.id, single_ids), "sharded": (sharded.id, sharded_ids)}, request.param


def _largest_rank_bytes(source) -> int:
    return max(sum(f.stat().st_size for f in rank.rglob("*") if f.is_file()) for rank in source.iterdir())


def answers(client, run_id: str, names: dict) -> list:
    base = f"/api/runs/{run_id}/timeline"
    meta = client.get(f"{base}/tracks").json()
    by_rank: dict[int, list] = {}
    for t in meta["tracks"]:
        if t["kind"] != "counter" and t["slice_count"]:
            by_rank.setdefault(t["rank"], []).append(t["track_id"])
    mixed = [ids[0] for ids in by_rank.values()] + [ids[-1] for ids in by_rank.values()]  # both ranks at once
    counters = [t["track_id"] for t in meta["tracks"] if t["kind"] == "counter"]
    t0, t1 = int(meta["start_ns"]), int(meta["end_ns"])
    out = []
    for window in ({}, {"start_ns": t0 + (t1 - t0) // 3, "end_ns": t0 + (t1 - t0) // 3 + (t1 - t0) // 100}):
        for width in (1600, 30):
            out.append(client.get(f"{base}/slices", params={"track_id": mixed, "width_px": width, **window}).json())
        out.append(client.get(f"{base}/counters", params={"track_id": counters, **window}).json())
        out.append(client.get(f"{base}/flows", params=window).json())
    return [_normal(a, names) for a in out]


def test_each_rank_is_read_from_its_shard_with_the_same_answers(layouts, monkeypatch):
    from ascendscope.server.api import deps as api
    from ascendscope.server.querypool import QueryPool

    client, runs, layout = layouts
    executed = []
    real = api.query
    monkeypatch.setattr(api, "query", lambda cur, sql, params=(), **kw: executed.append(sql) or
                        real(cur, sql, params, **kw))
    single = answers(client, *runs["single"])
    executed.clear()
    sharded = answers(client, *runs["sharded"])
    assert single == sharded
    viewport = [sql for sql in executed if any(f"FROM r{r}." in sql for r in range(4))]
    assert any('r0."slices"' in sql or 'r0."slice_lod"' in sql for sql in viewport)
    if layout == "grouped":  # one shard holds both ranks: it is attached once, as r0
        assert not any("FROM r1." in sql for sql in viewport)
    elif layout == "two groups":  # ranks 0-1 from r0, ranks 2-3 from r2; no r1 or r3 exists
        assert any('r2."slices"' in sql or 'r2."slice_lod"' in sql for sql in viewport)
        assert not any("FROM r1." in sql or "FROM r3." in sql for sql in viewport)
        # rank 3 alone, exact and level of detail: read from r2, never from the union of the shards
        run_id = runs["sharded"][0]
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        rank3 = [t["track_id"] for t in meta["tracks"] if t["rank"] == 3 and t["kind"] != "counter"
                 and t["slice_count"]]
        for width, pool in ((1600, QueryPool(cache_bytes=0)), (30, QueryPool(cache_bytes=0)),
                            (1600, QueryPool(cache_bytes=0, index_bytes=10**8)),
                            (30, QueryPool(cache_bytes=0, index_bytes=10**8))):
            client.app.state.query_pool = pool  # queries, then whole tracks read into memory: from r2 either way
            # (and not mapped from the index files an earlier pool wrote: server.indexfiles)
            shutil.rmtree(client.app.state.store.run_dir(run_id) / INDEX_DIR, ignore_errors=True)
            executed.clear()
            got = client.get(f"/api/runs/{run_id}/timeline/slices", params={"track_id": rank3, "width_px": width})
            assert got.status_code == 200 and any(t["count"] for t in got.json()["tracks"])
            reads = [sql for sql in executed if "slice" in sql]
            assert reads and all('r2."slice' in sql for sql in reads), reads
    else:
        assert any('r1."slices"' in sql or 'r1."slice_lod"' in sql for sql in viewport)
    assert any(f'r{r}."counters"' in sql for sql in viewport for r in range(4))
    unions = [sql for sql in executed if "slice_lod" in sql and "FROM slice_lod" in sql]
    assert not unions  # no level-of-detail query read the union of the shards
