"""A sharded run (issue #11) is served like a single-file run: the same answers, ids aside; a request scoped to
some ranks attaches only their shards; the ingest worker writes the sharded layout and a retry replaces it."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest.layout import connect
from ascendscope.ingest.shards import ingest_sharded, read_manifest
from ascendscope.server.db import Databases, parse_ranks, request_scope
from ascendscope.server.runs import RunStore
from tests.conftest import PYTORCH_TEXT

SOURCE = PYTORCH_TEXT / "level1"
ID_KEYS = {"track_id", "slice_id", "parent_id", "flow_id", "src_slice_id", "dst_slice_id", "src_track_id",
           "dst_track_id", "id"}
VARYING = {"run_id", "created_at", "ingest_seconds", "loaded_ranks"}  # differ between two ingests of one source


@pytest.fixture(scope="module")
def served(tmp_path_factory, level1_db):
    """The level1 sample as two ready runs of one store: ``single`` (run.duckdb: a copy of the session's
    ``level1_db``, ``ingest_path`` of the same folder) and ``sharded``; a client."""
    if not SOURCE.is_dir():
        pytest.skip(f"real sample {SOURCE} not found")
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data_dir = tmp_path_factory.mktemp("sharded-data")
    store = RunStore(data_dir)
    single = store.create_run("single", str(SOURCE))
    shutil.copy(level1_db, store.db_path(single.id))
    sharded = store.create_run("sharded", str(SOURCE))
    # one shard per rank (group_bytes=0), so that a rank's scope is its own shard
    summary = ingest_sharded(SOURCE, store.run_dir(sharded.id), workers=2, group_bytes=0)
    for run in (single, sharded):  # (the same source: the same ranks)
        store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    assert store.db_path(sharded.id).name == "cluster.duckdb"
    app = create_app(Settings.from_env(environ={}, data_dir=str(data_dir)))
    with TestClient(app) as client:
        yield {"client": client, "store": store, "app": app, "ids": {"single": single.id, "sharded": sharded.id}}


def _natural_ids(con) -> dict[int, tuple]:
    """id → (kind, rank, id within the rank): the same for both layouts of one source."""
    out = {}
    for kind, sql in (("t", "SELECT track_id, rank, track_id - min(track_id) OVER (PARTITION BY rank) FROM tracks"),
                      ("s", "SELECT slice_id, rank, slice_id - min(slice_id) OVER (PARTITION BY rank) FROM slices"),
                      ("f", "SELECT flow_id, rank, flow_id - min(flow_id) OVER (PARTITION BY rank) FROM flows")):
        for i, rank, local in con.execute(sql).fetchall():
            out[(kind, i)] = (kind, rank, local)
    return out


@pytest.fixture(scope="module")
def ids(served):
    store = served["store"]
    with duckdb.connect(str(store.db_path(served["ids"]["single"])), read_only=True) as con:
        single = _natural_ids(con)
    con, _ = connect(store.run_dir(served["ids"]["sharded"]))
    try:
        sharded = _natural_ids(con)
    finally:
        con.close()
    return {"single": single, "sharded": sharded}


def _kind(key: str) -> str:
    return "t" if "track" in key else "f" if key == "flow_id" else "s"


def _normal(value, names: dict, key: str | None = None):
    """The answer with every id replaced by its natural key, in links too (and what differs per ingest
    dropped)."""
    if isinstance(value, dict):
        return {k: _normal(v, names, k) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [_normal(v, names, key) for v in value]
    if key in ID_KEYS and isinstance(value, int):
        return names.get((_kind(key), value), value)
    if isinstance(value, str) and value.startswith("/runs/"):
        value = re.sub(r"^/runs/[a-z0-9-]+/", "/runs/RUN/", value)
        return re.sub(r"slice=(\d+)", lambda m: f"slice={names.get(('s', int(m[1])))}", value)
    return value


def _get(client, path: str, **params):
    r = client.get(path, params=params)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def _track(client, run_id: str, rank: int, kind: str) -> dict:
    body = _get(client, f"/api/runs/{run_id}/timeline/tracks")
    return max((t for t in body["tracks"] if t["rank"] == rank and t["kind"] == kind), key=lambda t: t["slice_count"])


VIEWS = [("timeline/tracks", {}), ("summary", {}), ("summary", {"rank": 1}), ("operators", {"rank": 0}),
         ("operators/groups", {"rank": 1}), ("operators/torch", {"rank": 0}), ("memory", {"rank": 0}),
         ("communication", {}), ("communication/ops", {}), ("advice", {})]


@pytest.mark.parametrize(("view", "params"), VIEWS, ids=[f"{v}-{p}" for v, p in VIEWS])
def test_views_answer_the_same_on_both_layouts(served, ids, view, params):
    client, run = served["client"], served["ids"]
    a = _get(client, f"/api/runs/{run['single']}/{view}", **params)
    b = _get(client, f"/api/runs/{run['sharded']}/{view}", **params)
    assert _normal(a, ids["single"]) == _normal(b, ids["sharded"])


@pytest.mark.parametrize("kind", ["python", "hardware"])
@pytest.mark.parametrize("zoom", ["exact", "lod"])
def test_timeline_slices_answer_the_same_on_both_layouts(served, ids, kind, zoom):
    client, run = served["client"], served["ids"]
    answers = []
    for layout in ("single", "sharded"):
        track = _track(client, run[layout], 1, kind)
        tracks = _get(client, f"/api/runs/{run[layout]}/timeline/tracks")
        origin = int(tracks["origin_ns"])
        lo, hi = origin + track["min_ts_ns"], origin + track["max_end_ns"]
        start, end = (lo + (hi - lo) * 3 // 10, lo + (hi - lo) * 32 // 100) if zoom == "exact" else (lo, hi)
        body = _get(client, f"/api/runs/{run[layout]}/timeline/slices", track_id=track["track_id"],
                    start_ns=start, end_ns=end, width_px=2000 if zoom == "exact" else 10)
        (t,) = body["tracks"]
        assert t["lod"] is (zoom == "lod")
        answers.append(_normal(body, ids[layout]))
    assert answers[0] == answers[1]


def test_run_info_lists_every_rank_and_the_same_range(served):
    client, run = served["client"], served["ids"]
    a = _get(client, f"/api/runs/{run['single']}")
    b = _get(client, f"/api/runs/{run['sharded']}")
    for key in ("ranks", "start_ns", "end_ns", "origin_ns", "duration_ns"):
        assert a[key] == b[key], key
    assert a["warnings"]["count"] == b["warnings"]["count"]


def test_a_request_for_rank_1_attaches_only_its_shard(served):
    """``ranks=1`` opens a connection with cluster.duckdb and rank 1's shard, not rank 0's."""
    client, run, app = served["client"], served["ids"], served["app"]
    body = _get(client, f"/api/runs/{run['sharded']}/timeline/tracks", ranks="1")
    assert {t["rank"] for t in body["tracks"]} == {1} and body["loaded_ranks"] == [1]
    assert _get(client, f"/api/runs/{run['sharded']}/timeline/tracks")["loaded_ranks"] == [0, 1]
    assert _get(client, f"/api/runs/{run['single']}/timeline/tracks")["loaded_ranks"] is None  # one file: all
    assert _get(client, f"/api/runs/{run['sharded']}")["loaded_ranks"] == [0, 1]  # the run's default scope
    databases: Databases = app.state.databases
    path = served["store"].db_path(run["sharded"])
    scope = databases.scope(path, (1,))
    assert scope == (1,)
    cur = databases.cursor(run["sharded"], path, scope)
    try:
        attached = {d for (d,) in cur.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal"
                                              ).fetchall()}
    finally:
        cur.close()
    assert attached == {"memory", "cluster", "r1"}  # a shard is attached as r<its first rank>
    assert databases.info(run["sharded"], path, scope).loaded_ranks == [1]
    assert databases.info(run["sharded"], path, scope).ranks == [0, 1]  # the rank picker still offers both


@pytest.fixture(scope="module")
def grouped(tmp_path_factory) -> Path:
    """The level1 sample ingested sharded as the server does by default (its two small ranks share a shard), in a
    run folder of its own (only read: a test that changes it works on a copy)."""
    if not SOURCE.is_dir():
        pytest.skip(f"real sample {SOURCE} not found")
    out = tmp_path_factory.mktemp("grouped") / "run"
    ingest_sharded(SOURCE, out, workers=1)
    return out


@pytest.mark.parametrize("sample", ["level1", "generated"])
def test_a_shard_of_several_ranks_loads_them_all(request, tmp_path, sample):
    """Small ranks share a shard: asking for one attaches that shard, and the answer says both are loaded."""
    if sample == "generated":
        from ascendscope.sample_data.generate import generate_run

        generate_run(tmp_path / "gen", ranks=2, steps=2, ops_per_step=30)
        run_dir = tmp_path / "run"
        ingest_sharded(tmp_path / "gen", run_dir, workers=1)
    else:
        run_dir = request.getfixturevalue("grouped")
    (entry,) = read_manifest(run_dir)["shards"]
    assert entry["ranks"] == [0, 1] and entry["file"] == "shards/ranks_00000-00001.duckdb"
    databases = Databases(max_loaded_ranks=1)
    path = run_dir / "cluster.duckdb"
    info = databases.info("grouped", path, databases.scope(path, (1,)))
    assert info.loaded_ranks == [0, 1] and {t.rank for t in info.tracks.values()} == {0, 1}
    databases.close_all()


def test_above_the_limit_the_default_scope_is_the_first_rank(served):
    path = served["store"].db_path(served["ids"]["sharded"])
    small = Databases(max_loaded_ranks=1)
    assert small.scope(path) == (0,)
    assert small.scope(path, None, (1,)) == (1,)  # a request about rank 1 loads rank 1
    assert small.scope(path, None, (7,)) == (0,)  # a rank the run does not have: the default
    assert small.scope(path, (0, 1)) == (0, 1)
    info = small.info(served["ids"]["sharded"], path)
    assert info.loaded_ranks == [0] and info.ranks == [0, 1]
    assert {t.rank for t in info.tracks.values()} == {0}
    assert Databases(max_loaded_ranks=64).scope(path) is None  # the whole run
    small.close_all()


def test_a_request_is_about_the_ranks_of_its_rank_track_and_slice_ids():
    from starlette.datastructures import QueryParams

    q = QueryParams([("track_id", str((3 << 16) + 5)), ("track_id", str((9 << 16) + 1)), ("rank", "4")])
    assert request_scope(q, {"slice_id": str((11 << 36) + 7)}) == (None, (3, 4, 9, 11))
    assert request_scope(QueryParams("ranks=2,1&rank=x"), {}) == ((1, 2), None)


def test_bad_ranks_parameter_is_422(served):
    client, run = served["client"], served["ids"]
    r = client.get(f"/api/runs/{run['sharded']}/timeline/tracks", params={"ranks": "1,x"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_parameter"
    assert parse_ranks(" 3, 1,3 ") == (1, 3) and parse_ranks("") is None
    with pytest.raises(ValueError):
        parse_ranks("-1")


def test_retry_removes_the_sharded_layout(served, grouped, tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run("x", str(SOURCE))
    shutil.copytree(grouped, store.run_dir(run.id), dirs_exist_ok=True)  # (the sharded layout, as ingested)
    (store.run_dir(run.id) / "shards" / "rank_00000.duckdb.tmp-1-2").write_text("left by a killed worker")
    store.set_status(run.id, "failed", error="boom")
    store.remove_scratch(run.id)
    assert not list((store.run_dir(run.id) / "shards").glob("*.tmp-*"))
    store.reset_for_retry(run.id)
    left = {p.name for p in store.run_dir(run.id).iterdir()}
    assert not left & {"manifest.json", "cluster.duckdb", "shards", "run.duckdb"}
    assert store.db_path(run.id).name == "run.duckdb"


def test_the_ingest_worker_writes_a_sharded_run(tmp_path):
    """A queued run goes through the worker (a process that starts its own pool) and opens sharded."""
    if not SOURCE.is_dir():
        pytest.skip(f"real sample {SOURCE} not found")
    from ascendscope.server.worker import IngestQueue

    store = RunStore(tmp_path)
    src = tmp_path / "src"
    shutil.copytree(SOURCE, src)
    run = store.create_run("w", str(src))
    queue = IngestQueue(store, workers=1).start(resume=False)
    try:
        queue.enqueue(run.id)
        assert queue.wait_idle(300)
    finally:
        queue.stop()
    done = store.get(run.id)
    assert done.status == "ready", done.error
    assert done.rank_count == 2 and done.summary["shards_failed"] == 0 and "shards" not in done.summary
    assert (store.run_dir(run.id) / "manifest.json").is_file()
    assert store.db_path(run.id).name == "cluster.duckdb"
    databases = Databases()
    info = databases.info(run.id, store.db_path(run.id))
    assert info.ranks == [0, 1] and info.loaded_ranks == [0, 1] and info.tracks
    databases.close_all()
    assert time.time() >= done.finished


def test_max_loaded_ranks_setting_scopes_requests(served):
    """ASCENDSCOPE_MAX_LOADED_RANKS=1: a request loads the first rank, or the rank its ids belong to."""
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    store, run = served["store"], served["ids"]["sharded"]
    app = create_app(Settings.from_env(environ={"ASCENDSCOPE_MAX_LOADED_RANKS": "1"}, data_dir=str(store.data_dir)))
    with TestClient(app) as client:
        assert app.state.databases.max_loaded_ranks == 1
        body = _get(client, f"/api/runs/{run}/timeline/tracks")
        assert body["loaded_ranks"] == [0] and {t["rank"] for t in body["tracks"]} == {0}
        rank1 = _get(client, f"/api/runs/{run}/timeline/tracks", ranks="1")["tracks"]
        track = max(rank1, key=lambda t: t["slice_count"])
        slices = _get(client, f"/api/runs/{run}/timeline/slices", track_id=track["track_id"], width_px=100)
        (answer,) = slices["tracks"]
        assert answer["track_id"] == track["track_id"] and len(answer["slice_id"]) > 0
        assert all(s >> 36 == 1 for s in answer["slice_id"])
