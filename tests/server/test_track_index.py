"""Tracks kept in memory (server.queries.track_index) answer every viewport exactly as the SQL path does: the
same rows, order, columns, names, caps and flags, on the real samples (or their twins), a generated run and a
40,000-slice synthetic run, at every zoom. Then: a track once read is answered without a query, the budget bounds
what is kept, and a track too large for it keeps the SQL path."""

from __future__ import annotations

import random

import pytest
from fastapi.testclient import TestClient

from ascendscope.server.app import create_app
from ascendscope.server.settings import Settings

WIDTHS = (300, 1600)


def client_for(data_dir, **settings) -> TestClient:
    return TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir), query_cache_mb=0,
                                                   **settings)))


def windows(meta, rng: random.Random, n: int = 24) -> list[tuple[int, int]]:
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


@pytest.mark.parametrize("name", ["level1", "level0", "generated"])
def test_memory_answers_equal_the_sql_answers_on_the_samples(runs, name):
    compare_everywhere(runs.data_dir, runs.ids[name], seed=1)


def test_memory_answers_equal_the_sql_answers_on_a_dense_run_with_lod_and_caps(tmp_path_factory):
    from ascendscope.bench.query import prepare_store

    data, run_id = prepare_store(tmp_path_factory.mktemp("trackindex"), 40_000)
    assert compare_everywhere(data, run_id, seed=2) > 0
    # a cap small enough that exact and LOD answers are cut: the same rows kept, the same flags
    assert compare_everywhere(data, run_id, seed=3, max_slices_per_track=40) > 0


def test_a_track_once_read_is_answered_without_a_query(runs, monkeypatch):
    from ascendscope.server.api import RunDb

    run_id = runs.ids["generated"]
    calls = []
    real = RunDb.arrays

    def counting(self, sql, params=()):
        calls.append(sql)
        return real(self, sql, params)

    monkeypatch.setattr(RunDb, "arrays", counting)
    with client_for(runs.data_dir) as client:
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


def test_the_budget_bounds_what_is_kept_and_a_track_too_large_keeps_the_sql_path(tmp_path_factory, monkeypatch):
    from ascendscope.bench.query import prepare_store
    from ascendscope.server.queries import track_index
    from ascendscope.server.querypool import QueryPool

    budget = 400_000  # a quarter holds a track of ~2,000 slices: this run has tracks of 400 to 2,996
    data, run_id = prepare_store(tmp_path_factory.mktemp("trackbudget"), 40_000)
    loads = []
    for name in ("_load_slices", "_load_lod"):
        real = getattr(track_index, name)
        monkeypatch.setattr(track_index, name, lambda *a, real=real: loads.append(a[1:]) or real(*a))
    with client_for(data) as client:
        pool = client.app.state.query_pool = QueryPool(index_bytes=budget, cache_bytes=0)
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


def test_one_dense_track_does_not_use_up_the_rows_of_the_others_on_the_sql_path(tmp_path_factory):
    """The batched SQL queries cap each track, not the batch: with a cap of 40 rows, four dense tracks asked for
    together each get their 40 rows and say they were cut (before, the first took all 161 and the others came back
    empty, not marked truncated)."""
    from ascendscope.bench.query import prepare_store

    data, run_id = prepare_store(tmp_path_factory.mktemp("trackcap"), 40_000)
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
