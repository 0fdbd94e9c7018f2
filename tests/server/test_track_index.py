"""Tracks kept in memory (server.queries.track_index) answer every viewport exactly as the SQL path does: the
same rows, order, columns, names, caps and flags, on the real samples (or their twins), a generated run and a
40,000-slice synthetic run, at every zoom. Then: a track once read is answered without a query, the budget bounds
what is kept, and a track too large for it keeps the SQL path."""

from __future__ import annotations

import random
import shutil

import pytest
from fastapi.testclient import TestClient

from ascendscope.server.app import create_app
from ascendscope.server.settings import Settings

WIDTHS = (300, 1600)
DENSE_SLICES = 40_000


@pytest.fixture(scope="module", autouse=True)
def no_asset_warming():
    """The ~40 apps of this module serve no page: plotly.js compressed ahead at each one's start (``assets.warm``,
    a thread of ~0.2 CPU-s per app) would only take the CPU from the comparisons."""
    from ascendscope.server import assets

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(assets, "warm", lambda _assets: None)
        yield


def client_for(data_dir, background: bool = False, **settings) -> TestClient:
    """A client of a server over ``data_dir`` with no answer cache; its index entries read by the request that
    first needs them (``background=False``: deterministic), or by the pool's background thread as served."""
    app = create_app(Settings.from_env(environ={}, data_dir=str(data_dir), query_cache_mb=0, **settings))
    app.state.query_pool.background_index = background
    return TestClient(app)


def windows(meta, rng: random.Random, n: int = 12) -> list[tuple[int, int]]:
    """The whole run, the edges, outside it, and random windows at every zoom from the run to a few µs."""
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    span = end - start
    out = [(start, end), (start - span, start + 1), (end - 1, end + span), (start - 2 * span, start - span),
           (start + span // 2, start + span // 2 + 1)]
    for _ in range(n):
        width = max(1, int(span / 4 ** rng.uniform(0, 8)))
        lo = start + int(rng.uniform(-0.1, 1.0) * span)
        out.append((lo, lo + width))
    return out


def compare_everywhere(data_dir, run_id, seed: int, track_cache_mb: int = 256, **settings) -> int:
    """Every slice track, in groups of 4, at every window and width: memory against SQL. Returns how many
    answers came from LOD rows (so a test can check both paths were exercised)."""
    lod = 0
    with client_for(data_dir, track_cache_mb=track_cache_mb, **settings) as mem, \
            client_for(data_dir, track_cache_mb=0, **settings) as sql:
        url = f"/api/runs/{run_id}/timeline/slices"
        meta = sql.get(f"/api/runs/{run_id}/timeline/tracks").json()
        tracks = [t["track_id"] for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"]]
        assert tracks
        rng = random.Random(seed)
        for lo, hi in windows(meta, rng):
            for width in WIDTHS:
                for i in range(0, len(tracks), 4):
                    params = {"track_id": tracks[i:i + 4], "start_ns": lo, "end_ns": hi, "width_px": width}
                    a, b = mem.get(url, params=params), sql.get(url, params=params)
                    assert a.status_code == b.status_code == 200, (a.text, b.text)
                    assert a.json() == b.json(), (lo, hi, width, tracks[i:i + 4])
                    lod += sum(t["lod"] for t in a.json()["tracks"])
        assert mem.app.state.query_pool.index_used() > 0  # the memory path did answer
    return lod


@pytest.fixture(scope="module")
def dense_db(tmp_path_factory):
    """The 40,000-slice synthetic run's database, built once for the module."""
    from ascendscope.bench.query import prepare_store

    cache = tmp_path_factory.mktemp("dense")
    prepare_store(cache, DENSE_SLICES)
    return cache / f"synth_{DENSE_SLICES}.duckdb"


@pytest.fixture()
def dense(dense_db, tmp_path):
    """``(data dir, run id)``: a store of its own holding a copy of the dense run (a test's index files and
    answers stay its own)."""
    from ascendscope.bench.query import prepare_store

    shutil.copy(dense_db, tmp_path / dense_db.name)  # (found there: prepare_store does not build it again)
    return prepare_store(tmp_path, DENSE_SLICES)


@pytest.mark.parametrize("name", ["level1", "level0", "generated"])
def test_memory_answers_equal_the_sql_answers_on_the_samples(runs, name):
    compare_everywhere(runs.data_dir, runs.ids[name], seed=1)


def test_memory_answers_equal_the_sql_answers_on_a_dense_run_with_lod_and_caps(dense):
    data, run_id = dense
    assert compare_everywhere(data, run_id, seed=2) > 0
    # a cap small enough that exact and LOD answers are cut: the same rows kept, the same flags
    assert compare_everywhere(data, run_id, seed=3, max_slices_per_track=40) > 0


def test_a_track_once_read_is_answered_without_a_query(runs, monkeypatch):
    from ascendscope.server.api.deps import RunDb

    run_id = runs.ids["generated"]
    calls = []
    real = RunDb.arrays

    def counting(self, sql, params=()):
        calls.append(sql)
        return real(self, sql, params)

    monkeypatch.setattr(RunDb, "arrays", counting)
    with client_for(runs.data_dir, index_files=False) as client:  # (memory only: the files are tested below)
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        tid = max((t for t in meta["tracks"] if t["kind"] != "counter"), key=lambda t: t["slice_count"])["track_id"]
        start, end = int(meta["start_ns"]), int(meta["end_ns"])
        url = f"/api/runs/{run_id}/timeline/slices"
        for k in range(1, 6):  # five different windows: no answer can come from the answer cache (it is off)
            lo = start + (end - start) * k // 12
            body = client.get(url, params={"track_id": tid, "start_ns": lo, "end_ns": lo + (end - start) // 5,
                                           "width_px": 1600}).json()
            assert body["tracks"][0]["count"] > 0
    reads = [s for s in calls if "FROM" in s]
    assert len(reads) == 1 and "ORDER BY slice_id" in reads[0], reads


def test_the_budget_bounds_what_is_kept_and_a_track_too_large_keeps_the_sql_path(dense, monkeypatch):
    from ascendscope.server.queries import track_index
    from ascendscope.server.querypool import QueryPool

    budget = 300_000  # a quarter holds a track of ~2,300 slices: this run has tracks of 400 to 2,996
    data, run_id = dense
    loads = []
    for name in ("load_slices", "load_lod"):
        real = getattr(track_index, name)
        monkeypatch.setattr(track_index, name, lambda *a, real=real: loads.append(a[1:]) or real(*a))
    with client_for(data, index_files=False) as client:
        pool = client.app.state.query_pool = QueryPool(index_bytes=budget, cache_bytes=0)
        pool.background_index = False
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        tracks = [t for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"]]
        big = {t["track_id"] for t in tracks if t["slice_count"] * track_index.BYTES_PER_SLICE > budget // 4}
        assert big and len(big) < len(tracks)
        url = f"/api/runs/{run_id}/timeline/slices"
        for t in tracks:
            for width in (300, 20_000):  # LOD, then exact
                assert client.get(url, params={"track_id": t["track_id"], "width_px": width}).status_code == 200
        kept = {key[-1] for key in pool._index}
        assert kept and not kept & big
        # every track was used within the last seconds: none was pushed out for another (they would take turns
        # being read again), so what did not fit was answered by SQL and the store stays within its budget
        assert 0 < pool.index_used() <= budget
        assert len(loads) == len(pool._index)
    # and at a small budget the answers are the SQL ones too
    compare_everywhere(data, run_id, seed=4, track_cache_mb=1)


def test_one_dense_track_does_not_use_up_the_rows_of_the_others_on_the_sql_path(dense):
    """The batched SQL queries cap each track, not the batch: with a cap of 40 rows, four dense tracks asked for
    together each get their 40 rows and say they were cut (before, the first took all 161 and the others came back
    empty, not marked truncated)."""
    data, run_id = dense
    with client_for(data, track_cache_mb=0, max_slices_per_track=40) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        tracks = [t["track_id"] for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"] > 400][:4]
        assert len(tracks) == 4
        for width in (300, 20_000):  # LOD rows, then exact rows
            body = client.get(f"/api/runs/{run_id}/timeline/slices",
                              params={"track_id": tracks, "width_px": width}).json()
            assert [(t["count"], t["truncated"]) for t in body["tracks"]] == [(40, True)] * 4, width
            assert {t["lod"] for t in body["tracks"]} == {width == 300}


def test_the_index_store_admits_an_entry_only_by_pushing_out_entries_not_used_lately(monkeypatch):
    import numpy as np

    from ascendscope.server import querypool
    from ascendscope.server.querypool import QueryPool

    pool = QueryPool(slots=1, index_bytes=10_000)
    block = lambda keys: {k: np.zeros(300) for k in keys}  # noqa: E731 (2,400 bytes each)
    assert pool.index_admits("a", 2_400) and not pool.index_admits("huge", 2_600)  # > a quarter of the budget
    for key in "abcd":
        pool.shared([key], block, timeout_s=1, store="index")
    assert pool.index_used() == 4 * 2_400
    assert not pool.index_admits("e", 2_400)  # full of entries used just now
    assert pool.index_admits("a", 2_400)  # kept already
    monkeypatch.setattr(querypool, "INDEX_HOT_S", 0.0)  # now every entry counts as not used lately
    assert pool.index_admits("e", 2_400)
    pool.shared(["e"], block, timeout_s=1, store="index")
    assert list(pool._index) == ["b", "c", "d", "e"] and pool.cached_bytes() == 0  # the answers store untouched


def _by_series(body: dict) -> dict:
    """A counters answer with each track's series keyed by name (the SQL path lists series that only have edge
    samples in the order its GROUP BY gives them)."""
    return {**body, "tracks": [{**t, "series": {s["series"]: s for s in t["series"]}} for t in body["tracks"]]}


@pytest.mark.parametrize("name", ["level1", "generated"])
def test_counter_answers_from_memory_equal_the_sql_answers(runs, name):
    run_id = runs.ids[name]
    with client_for(runs.data_dir) as mem, client_for(runs.data_dir, track_cache_mb=0) as sql:
        meta = sql.get(f"/api/runs/{run_id}/timeline/tracks").json()
        counters = [t["track_id"] for t in meta["tracks"] if t["kind"] == "counter"]
        assert counters
        url = f"/api/runs/{run_id}/timeline/counters"
        kinds = set()
        for lo, hi in windows(meta, random.Random(5)):
            for width in (40, 1600):
                params = {"track_id": counters, "start_ns": lo, "end_ns": hi, "width_px": width}
                a, b = mem.get(url, params=params), sql.get(url, params=params)
                assert a.status_code == b.status_code == 200, (a.text, b.text)
                assert _by_series(a.json()) == _by_series(b.json()), (lo, hi, width)
                kinds |= {(t["lod"], bool(t["series"])) for t in a.json()["tracks"]}
        assert (True, True) in kinds and (False, True) in kinds  # bucketed and exact answers both compared
        assert any(key[2] == "counter_samples" for key in mem.app.state.query_pool._index)


def test_counter_answers_from_memory_keep_the_sql_cap(runs):
    run_id = runs.ids["generated"]
    with client_for(runs.data_dir, max_counter_points=2) as mem, \
            client_for(runs.data_dir, track_cache_mb=0, max_counter_points=2) as sql:
        meta = sql.get(f"/api/runs/{run_id}/timeline/tracks").json()
        counters = [t["track_id"] for t in meta["tracks"] if t["kind"] == "counter"]
        for width in (2, 1600):
            params = {"track_id": counters, "width_px": width}
            a = mem.get(f"/api/runs/{run_id}/timeline/counters", params=params).json()
            b = sql.get(f"/api/runs/{run_id}/timeline/counters", params=params).json()
            assert _by_series(a) == _by_series(b)
            assert any(t["truncated"] for t in a["tracks"])


def test_an_entry_larger_than_its_estimate_is_refused_once_not_read_for_every_request():
    import numpy as np

    from ascendscope.server.querypool import QueryPool

    pool = QueryPool(slots=1, index_bytes=10_000)
    reads = []

    def big(keys):  # estimated at 1,000 bytes, but 8,000: more than a quarter of the budget
        reads.extend(keys)
        return {k: np.zeros(1_000) for k in keys}

    assert pool.index_admits("t", 1_000)
    pool.shared(["t"], big, timeout_s=1, store="index")
    assert pool.index_used() == 0 and reads == ["t"]
    assert not pool.index_admits("t", 1_000)  # the caller takes its other path from now on


FLOW_CATEGORIES = ([], ["async_npu"], ["fwdbwd", "HostToDevice"], ["no such category"])


def compare_flows(data_dir, run_id, seed: int, **settings) -> int:
    """Flows of every window and category filter: memory against SQL. Returns the flows compared."""
    seen = 0
    with client_for(data_dir, **settings) as mem, client_for(data_dir, track_cache_mb=0, **settings) as sql:
        meta = sql.get(f"/api/runs/{run_id}/timeline/tracks").json()
        url = f"/api/runs/{run_id}/timeline/flows"
        for lo, hi in windows(meta, random.Random(seed)):
            for cats in FLOW_CATEGORIES:
                params = {"start_ns": lo, "end_ns": hi, "cat": cats}
                a, b = mem.get(url, params=params), sql.get(url, params=params)
                assert a.status_code == b.status_code == 200, (a.text, b.text)
                assert a.json() == b.json(), (lo, hi, cats)
                seen += a.json()["count"]
        assert any(key[2] == "flows" for key in mem.app.state.query_pool._index)  # the memory path did answer
    return seen


@pytest.mark.parametrize("name", ["level1", "level0", "generated"])
def test_flow_answers_from_memory_equal_the_sql_answers(runs, name):
    assert compare_flows(runs.data_dir, runs.ids[name], seed=6) > 0
    # a cap small enough that most windows are cut: the same first flows by flow_id, the same flag
    assert compare_flows(runs.data_dir, runs.ids[name], seed=7, max_flows=7) > 0


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """A generated run of four ranks (only read: each test ingests it into a store of its own)."""
    from ascendscope.sample_data.generate import generate_run

    source = tmp_path_factory.mktemp("flowshards-src") / "run"
    generate_run(source, ranks=4, steps=2, ops_per_step=60, seed=5)
    return source


@pytest.mark.parametrize("group", [False, True])
def test_flow_answers_from_memory_equal_the_sql_answers_over_several_shards(four_ranks, tmp_path_factory, group):
    """Four ranks in a shard each, or in two shards of two: flows come from each shard's table in order of their
    ids, and reading stops once the cap is reached with smaller ids than the next shard's."""
    from ascendscope.ingest.shards import ingest_sharded
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path_factory.mktemp("flowshards"))
    source = four_ranks
    run = store.create_run("flows", str(source))
    rank_bytes = max(sum(f.stat().st_size for f in r.rglob("*") if f.is_file()) for r in source.iterdir())
    ingest_sharded(source, store.run_dir(run.id), workers=2,
                   group_bytes=int(2.5 * rank_bytes) if group else 0)
    store.set_status(run.id, "ready")
    assert compare_flows(store.data_dir, run.id, seed=8) > 0
    assert compare_flows(store.data_dir, run.id, seed=9, max_flows=5) > 0


def test_flows_once_read_are_answered_without_a_query(runs, monkeypatch):
    from ascendscope.server.api.deps import RunDb

    run_id = runs.ids["generated"]
    calls = []
    real = RunDb.arrays
    monkeypatch.setattr(RunDb, "arrays", lambda self, sql, params=(): calls.append(sql) or real(self, sql, params))
    with client_for(runs.data_dir, index_files=False) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        start, end = int(meta["start_ns"]), int(meta["end_ns"])
        for k in range(1, 6):
            lo = start + (end - start) * k // 12
            body = client.get(f"/api/runs/{run_id}/timeline/flows",
                              params={"start_ns": lo, "end_ns": lo + (end - start) // 5}).json()
            assert body["count"] > 0
    # one read of the flows (the category as codes) and one of the slices' depths, then none
    assert len(calls) == 2 and "ORDER BY flow_id" in calls[0] and "depth" in calls[1], calls


def test_as_served_a_first_look_is_answered_by_sql_while_the_track_and_flows_are_read_in_the_background(
        runs, monkeypatch):
    """A server reads a large track (or a table's flows) into memory on its background thread: the request that
    first needs it is answered by the SQL path (the same answer) instead of waiting for the whole read; once the read
    is done, the same windows are answered with no query at all."""
    import threading

    from ascendscope.server.api.deps import RunDb

    run_id = runs.ids["generated"]
    calls = []
    real = RunDb.arrays
    monkeypatch.setattr(RunDb, "arrays", lambda self, sql, params=(): calls.append(
        (threading.current_thread().name, sql)) or real(self, sql, params))
    with client_for(runs.data_dir, background=True, index_files=False) as client, \
            client_for(runs.data_dir, track_cache_mb=0) as sql:
        pool = client.app.state.query_pool
        pool.foreground_bytes = 0  # (as for a track of a large run: this one is small)
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        tid = max((t for t in meta["tracks"] if t["kind"] != "counter"), key=lambda t: t["slice_count"])["track_id"]
        start, end = int(meta["start_ns"]), int(meta["end_ns"])
        asks = [("slices", {"track_id": tid, "start_ns": start + (end - start) // 3,
                            "end_ns": start + (end - start) // 3 + (end - start) // 50, "width_px": 1600}),
                ("flows", {"start_ns": start + (end - start) // 3, "end_ns": start + (end - start) // 2})]
        first = [client.get(f"/api/runs/{run_id}/timeline/{kind}", params=p).json() for kind, p in asks]
        assert pool.index_settled(60)
        # the whole reads of track_index (a track, a shard's flows, its slices' depths): on the loader thread only
        whole = {name for name, sql in calls
                 if "JOIN n ON" in sql or "list_position" in sql or "slice_id, depth" in sql}
        assert whole == {"ascendscope-index-loader"}, calls
        kept = {key[2] for key in pool._index}
        assert {"track_slices", "flows"} <= kept, kept
        calls.clear()
        again = [client.get(f"/api/runs/{run_id}/timeline/{kind}", params=p).json() for kind, p in asks]
        assert calls == []  # from memory now
        assert first == again == [sql.get(f"/api/runs/{run_id}/timeline/{kind}", params=p).json()
                                  for kind, p in asks]
        assert first[0]["tracks"][0]["count"] > 0 and first[1]["count"] > 0
