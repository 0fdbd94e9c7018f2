"""On a sharded run of several ranks, a viewport query about one rank's tracks reads that rank's shard alone, not
the union of every shard (issue #18: at 8 ranks a third of the cost), and answers exactly as the single-file layout
does: slices of two ranks in one request (exact and level of detail), counters and flows; on a generated run and
on the real level1 sample, one shard per rank, and on a generated run whose two small ranks share a shard (issue #17:
both ranks are read from that shard, attached as ``r0``)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.shards import ingest_sharded
from ascendscope.server.runs import RunStore
from tests.conftest import PYTORCH_TEXT
from tests.server.test_sharded_runs import _natural_ids, _normal


@pytest.fixture(scope="module", params=["generated", "grouped", "level1"])
def layouts(request, tmp_path_factory):
    import duckdb

    from ascendscope.ingest.layout import connect
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    if request.param == "level1":
        if not (PYTORCH_TEXT / "level1").is_dir():
            pytest.skip(f"real samples not found at {PYTORCH_TEXT}")
        source = PYTORCH_TEXT / "level1"
    else:
        from ascendscope.sample_data.generate import generate_run

        source = tmp_path_factory.mktemp("routing-src") / "run"
        generate_run(source, ranks=2, steps=2, ops_per_step=60, seed=3)
    store = RunStore(tmp_path_factory.mktemp("routing"))
    single, sharded = store.create_run("single", str(source)), store.create_run("sharded", str(source))
    ingest_path(source, store.db_path(single.id))
    # a shard per rank (group_bytes=0), or the small ranks grouped as the server does by default
    grouping = {} if request.param == "grouped" else {"group_bytes": 0}
    ingest_sharded(source, store.run_dir(sharded.id), workers=2, **grouping)
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
    from ascendscope.server import api

    client, runs, layout = layouts
    executed = []
    real = api.query
    monkeypatch.setattr(api, "query", lambda cur, sql, params=(), **kw: executed.append(sql) or
                        real(cur, sql, params, **kw))
    single = answers(client, *runs["single"])
    executed.clear()
    sharded = answers(client, *runs["sharded"])
    assert single == sharded
    viewport = [sql for sql in executed if "FROM r0." in sql or "FROM r1." in sql]
    assert any('r0."slices"' in sql or 'r0."slice_lod"' in sql for sql in viewport)
    if layout == "grouped":  # one shard holds both ranks: it is attached once, as r0
        assert not any("FROM r1." in sql for sql in viewport)
    else:
        assert any('r1."slices"' in sql or 'r1."slice_lod"' in sql for sql in viewport)
    assert any('r0."counters"' in sql or 'r1."counters"' in sql for sql in viewport)
    unions = [sql for sql in executed if "slice_lod" in sql and "FROM slice_lod" in sql]
    assert not unions  # no level-of-detail query read the union of the shards
