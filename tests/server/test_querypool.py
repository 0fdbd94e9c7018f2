"""The query pool (server.querypool): at most K slots at once, first come first served, a timed-out wait or a
failed query gives its slot back; one computation per key for concurrent askers, its error reaching each of
them; a bounded cache keyed on the database file's identity. Then the same through the HTTP API, and a quick run
of the concurrency benchmark end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ascendscope.server import fastlane
from ascendscope.server.db import QueryTimeout
from ascendscope.server.querypool import QueryPool

WAIT_S = 10  # bounds how long a broken test can hang; never a timing assertion


def wait_until(predicate, timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def test_never_more_than_k_queries_at_once():
    pool, inside, most, lock = QueryPool(slots=2), [0], [0], threading.Lock()
    enough = threading.Event()

    def work(_):
        with pool.slot(WAIT_S):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                if inside[0] >= 2:
                    enough.set()
            enough.wait(WAIT_S)  # hold the slot until two are in, so that a third would have had the chance
            time.sleep(0.01)
            with lock:
                inside[0] -= 1

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(work, range(16)))
    assert most[0] == 2 and pool.peak == 2 and pool.running == 0


def test_slots_go_in_arrival_order():
    pool, order = QueryPool(slots=1), []
    release = threading.Event()

    def holder():
        with pool.slot(WAIT_S):
            release.wait(WAIT_S)

    def waiter(i):
        with pool.slot(WAIT_S):
            order.append(i)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    assert wait_until(lambda: pool.running == 1)
    for i in range(5):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        assert wait_until(lambda n=i + 1: len(pool._queue) == n)
    release.set()
    for t in threads:
        t.join(WAIT_S)
    assert order == list(range(5))


def test_a_wait_that_times_out_leaves_no_claim_on_the_slot():
    pool = QueryPool(slots=1)
    release, held = threading.Event(), threading.Event()

    def holder():
        with pool.slot(WAIT_S):
            held.set()
            release.wait(WAIT_S)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(WAIT_S)
    with pytest.raises(QueryTimeout, match="busy"):
        with pool.slot(0.05):
            pass
    release.set()
    t.join(WAIT_S)
    assert pool.running == 0
    with pool.slot(0):  # free at once: the slot was not handed to the waiter that gave up
        assert pool.running == 1


def test_a_failed_or_interrupted_query_frees_its_slot():
    pool = QueryPool(slots=1)
    for error in (QueryTimeout("query took longer than 1 s"), RuntimeError("boom")):
        def fail(keys, error=error):
            raise error

        with pytest.raises(type(error)):
            pool.shared(["k"], fail, timeout_s=1)
        assert pool.running == 0
    with pool.slot(0):
        pass


def test_nested_use_takes_no_second_slot():
    pool = QueryPool(slots=1)
    with pool.slot(1):
        with pool.slot(0):  # would wait for itself
            assert pool.running == 1


def coalesce(pool: QueryPool, n: int, compute) -> list:
    """Ask n threads for key "k" at once; compute(keys) runs once the other n - 1 are waiting for it."""
    results = [None] * n

    def ask(i):
        try:
            results[i] = pool.shared(["k"], compute, timeout_s=WAIT_S)["k"]
        except Exception as exc:  # noqa: BLE001 - the test looks at what each asker got
            results[i] = exc

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    return results


def test_identical_concurrent_asks_compute_once():
    pool, calls = QueryPool(slots=4), []

    def compute(keys):
        calls.append(keys)
        wait_until(lambda: pool.counts["coalesced"] == 7)
        return {k: np.arange(3) for k in keys}

    results = coalesce(pool, 8, compute)
    assert calls == [["k"]]
    assert all(r is results[0] for r in results) and list(results[0]) == [0, 1, 2]
    assert pool.shared(["k"], compute, timeout_s=1)["k"] is results[0]  # then cached
    assert len(calls) == 1 and pool.counts["hit"] == 1


def test_an_error_reaches_every_waiter_and_is_not_cached():
    pool, calls = QueryPool(slots=4), []

    def failing(keys):
        calls.append(keys)
        wait_until(lambda: pool.counts["coalesced"] == 5)
        raise QueryTimeout("query took longer than 10 s")

    results = coalesce(pool, 6, failing)
    assert len(calls) == 1
    assert all(isinstance(r, QueryTimeout) for r in results)
    assert pool.shared(["k"], lambda keys: {"k": 1}, timeout_s=1) == {"k": 1}  # asked again: computed again


def test_several_keys_share_what_is_cached_and_compute_the_rest_in_one_call():
    pool, calls = QueryPool(slots=1), []

    def compute(keys):
        calls.append(list(keys))
        return {k: k * 10 for k in keys}

    assert pool.shared([1, 2], compute, timeout_s=1) == {1: 10, 2: 20}
    assert pool.shared([2, 3, 4], compute, timeout_s=1) == {2: 20, 3: 30, 4: 40}
    assert calls == [[1, 2], [3, 4]]
    with pytest.raises(RuntimeError, match="left out"):
        pool.shared([5, 6], lambda keys: {5: 50}, timeout_s=1)
    assert pool.running == 0 and not pool._flights


def test_the_cache_is_bounded_in_bytes_least_recent_out():
    pool = QueryPool(slots=1, cache_bytes=4 * 8_200)  # room for four 1,000-float answers
    answer = lambda keys: {k: np.zeros(1000) for k in keys}  # noqa: E731
    for k in range(6):
        pool.shared([k], answer, timeout_s=1)
    assert pool.cached_bytes() <= pool.cache_bytes
    assert set(pool._cache) == {2, 3, 4, 5}
    pool.shared([2], answer, timeout_s=1)  # touched: now the most recent
    pool.shared([6], answer, timeout_s=1)
    assert set(pool._cache) == {4, 5, 2, 6}
    QueryPool(slots=1, cache_bytes=0).shared([1], answer, timeout_s=1)  # 0: nothing kept, still answers


# ---- through the API ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from ascendscope.bench.query import prepare_store

    return prepare_store(tmp_path_factory.mktemp("pool"), 40_000)


@pytest.fixture()
def api(synth):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data, run_id = synth
    app = create_app(Settings(data_dir=data))
    with TestClient(app) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        yield app, client, run_id, meta


def slices_params(meta, tracks, fraction=1.0):
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    return {"track_id": tracks, "start_ns": start, "end_ns": start + int((end - start) * fraction), "width_px": 800}


def counting(monkeypatch, before=None):
    from ascendscope.server.queries import timeline

    calls, real = [], timeline.viewport_slices

    def wrapped(db, tracks, *args):
        calls.append(sorted(t.track_id for t in tracks))
        if before:
            before()
        return real(db, tracks, *args)

    monkeypatch.setattr(timeline, "viewport_slices", wrapped)
    return calls


def test_concurrent_identical_viewport_requests_query_once(api, monkeypatch):
    app, client, run_id, meta = api
    # (as many as a process answers at once: the others would wait for a thread until the first has answered)
    pool, n = app.state.query_pool, fastlane.THREADS
    assert n >= 2
    tracks = [t["track_id"] for t in meta["tracks"] if t["slice_count"]][:3]
    calls = counting(monkeypatch, before=lambda: wait_until(lambda: pool.counts["coalesced"] == 3 * (n - 1)))
    url = f"/api/runs/{run_id}/timeline/slices"
    with ThreadPoolExecutor(n) as ex:
        answers = list(ex.map(lambda _: client.get(url, params=slices_params(meta, tracks, 0.3)), range(n)))
    assert [r.status_code for r in answers] == [200] * n
    assert calls == [sorted(tracks)] and pool.counts["coalesced"] == 3 * (n - 1)
    assert all(r.json() == answers[0].json() for r in answers)


def test_cached_answers_equal_fresh_ones_and_are_shared_per_track(api, monkeypatch):
    app, client, run_id, meta = api
    calls = counting(monkeypatch)
    url = f"/api/runs/{run_id}/timeline/slices"
    a, b, c = [t["track_id"] for t in meta["tracks"] if t["slice_count"]][:3]
    first = client.get(url, params=slices_params(meta, [a, b])).json()
    again = client.get(url, params=slices_params(meta, [a, b])).json()
    mixed = client.get(url, params=slices_params(meta, [c, b])).json()  # b from the cache, c computed
    assert calls == [sorted([a, b]), [c]]
    assert again == first
    assert mixed["tracks"][0]["track_id"] == c and mixed["tracks"][1]["track_id"] == b
    names = lambda body, i: [body["names"][k] for k in body["tracks"][i]["name_id"]]  # noqa: E731
    assert names(mixed, 1) == names(first, 1) and len(names(mixed, 0)) == mixed["tracks"][0]["count"]
    app.state.query_pool = QueryPool(cache_bytes=0)  # nothing cached: computed afresh
    fresh = client.get(url, params=slices_params(meta, [c, b])).json()
    assert fresh == mixed


def test_a_rewritten_database_is_not_answered_from_the_cache(api, monkeypatch, synth):
    from ascendscope.server.runs import RunStore

    app, client, run_id, meta = api
    calls = counting(monkeypatch)
    url = f"/api/runs/{run_id}/timeline/slices"
    tid = next(t["track_id"] for t in meta["tracks"] if t["slice_count"])
    client.get(url, params=slices_params(meta, [tid]))
    path = RunStore(synth[0]).db_path(run_id)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # as a re-ingest would leave it
    client.get(url, params=slices_params(meta, [tid]))
    assert calls == [[tid], [tid]]


# ---- the benchmark -------------------------------------------------------------------------------------------

def test_concurrency_benchmark_runs_end_to_end(tmp_path):
    """`ascendscope bench concurrency --quick` serves a small generated run to wrk walks (the page's request mix),
    with no index files and with them written ahead (timed), and reports every measurement, with each request's
    own latency beside wrk's, the server's CPU per request and /api/health beside the load."""
    # 1 s per measurement (as the suite's smoke test) and one client count (each measurement is a server of its
    # own; a second count runs the same code again): every row still has requests, latencies and health
    done = subprocess.run([sys.executable, "-m", "ascendscope.server.cli", "bench", "concurrency", "--quick",
                           "--seconds", "1", "--clients", "4", "--cache", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(r["version"], r["clients"]) for r in report["results"]] == [("after", 4), ("ahead", 4)]
    for r in report["results"]:
        assert r["requests"] > 0 and r["errors"] == 0, r
        assert (r["prewarm_s"] is not None and r["prewarm_s"] > 0) == (r["version"] == "ahead")
        for key in ("request_ms", "latency_ms"):  # each request's own, and wrk's (corrected)
            ms = r[key]
            assert 0 < ms["p50"] <= ms["p95"] <= ms["p99"] <= ms["max"], key
        assert r["request_ms"]["count"] == r["requests"]  # every answer timed by the script
        assert r["cpu_ms_per_request"] > 0 and r["kb_per_request"] > 0
    assert report["results"][-1]["health"]["p99"] > 0
    assert "medians:" in done.stdout
