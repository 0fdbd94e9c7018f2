"""A request's budget (issue #18 item 4): its deadline counts from its arrival (time waiting for a query slot
included) and answers 504 with a clear message; a request whose client went away stops its DuckDB query at once;
heavy views (System View, Range Stats, search, Advice, Compare) take heavy slots, so while they are all busy a
viewport request is still answered and another heavy view waits its deadline out."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from ascendscope.server.requestclock import ClientGone
from tests.conftest import store_with_copy

WAIT_S = 30  # bounds a broken test; never a timing assertion


@pytest.fixture(scope="module")
def store(generated_db, tmp_path_factory):
    return store_with_copy(generated_db, tmp_path_factory.mktemp("budget"))


def make_app(store, **settings):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    return create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir), **settings), store=store)


def hold(cm_factory, release: threading.Event) -> threading.Thread:
    """Holds what ``cm_factory()`` enters on another thread until ``release`` is set."""
    entered = threading.Event()

    def run():
        with cm_factory():
            entered.set()
            release.wait(WAIT_S)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert entered.wait(WAIT_S)
    return thread


def test_waiting_for_a_slot_counts_against_the_deadline(store):
    s, run_id = store
    app = make_app(s, query_slots=1, query_timeout_s=1.0)
    release = threading.Event()
    with TestClient(app) as client:
        busy = hold(lambda: app.state.query_pool.slot(WAIT_S), release)
        try:
            r = client.get(f"/api/runs/{run_id}/timeline/tracks")
        finally:
            release.set()
            busy.join(WAIT_S)
        assert r.status_code == 504 and r.json()["error"]["code"] == "query_timeout"
        assert "no database slot became free within" in r.json()["error"]["message"]
        assert client.get(f"/api/runs/{run_id}/timeline/tracks").status_code == 200


def test_a_request_past_its_deadline_runs_no_query(store, monkeypatch):
    """Arrival is stamped before the app runs: a request that arrives with its time already spent (here the
    clock says it arrived 60 s ago) answers 504 naming the rule, without running a query."""
    from ascendscope.server import requestclock
    from ascendscope.server.api import deps as api

    s, run_id = store
    app = make_app(s, query_timeout_s=2.0)
    executed = []
    real = api.query
    monkeypatch.setattr(api, "query", lambda *a, **kw: executed.append(a[1]) or real(*a, **kw))
    monkeypatch.setattr(requestclock, "arrival", lambda scope: time.monotonic() - 60)
    with TestClient(app) as client:
        r = client.get(f"/api/runs/{run_id}/timeline/tracks")
    assert r.status_code == 504, r.text
    assert "of the request's arrival" in r.json()["error"]["message"]
    assert executed == []


def test_heavy_views_never_hold_up_viewport_requests(store):
    s, run_id = store
    app = make_app(s, heavy_slots=1, query_timeout_s=1.0)
    release = threading.Event()
    with TestClient(app) as client:
        tracks = client.get(f"/api/runs/{run_id}/timeline/tracks").json()["tracks"]
        tid = next(t["track_id"] for t in tracks if t["slice_count"])
        busy = hold(lambda: app.state.query_pool.slot(WAIT_S, heavy=True), release)  # every heavy slot taken
        try:
            viewport = client.get(f"/api/runs/{run_id}/timeline/slices", params={"track_id": tid})
            heavy = client.get(f"/api/runs/{run_id}/advice")
            search = client.get(f"/api/runs/{run_id}/timeline/search", params={"q": "aten"})
        finally:
            release.set()
            busy.join(WAIT_S)
        assert viewport.status_code == 200
        for r in (heavy, search):
            assert r.status_code == 504 and "heavy query slot" in r.json()["error"]["message"], r.text
        assert client.get(f"/api/runs/{run_id}/advice").status_code == 200


def test_a_client_that_goes_away_stops_its_query(store, monkeypatch):
    """A search whose SQL would run for minutes; the client hangs up after sending it: the DuckDB query is
    interrupted (ClientGone reaches the handler) and its slot is free again, long before the deadline."""
    from ascendscope.server.queries import timeline_details as td
    from tests.conftest import serving

    s, run_id = store
    app = make_app(s, query_timeout_s=120.0)
    outcome: list = []
    started = threading.Event()

    def endless_search(db, q, limit, after, before):
        started.set()
        try:
            db.one("SELECT sum(a.i * b.i) FROM range(100000000) a(i), range(1000) b(i)")
            outcome.append("finished")
        except ClientGone:
            outcome.append("client gone")
            raise
        return {}

    monkeypatch.setattr(td, "search", endless_search)
    with serving(app) as base:
        url = urlsplit(base)
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(f"GET /api/runs/{run_id}/timeline/search?q=x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            assert started.wait(WAIT_S)
            time.sleep(0.2)  # the query is running now
        deadline = time.monotonic() + WAIT_S
        while not outcome and time.monotonic() < deadline:
            time.sleep(0.02)
        assert outcome == ["client gone"]
        with app.state.query_pool.slot(1.0, heavy=True):  # its heavy slot is free again
            pass
        assert httpx.get(f"{base}/api/health").status_code == 200
