"""The short path for viewport requests (server.fastlane) answers exactly as the router does, byte for byte, in
JSON and in the binary columns format, on the real level1 sample (or its twin) and a generated run; it leaves
every request it does not take (an unknown or invalid parameter, another path or method) to the router, whose
answers and errors are unchanged; and it sits inside the security middleware (a token is still required)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from ascendscope.server import columns, fastlane
from ascendscope.server.app import create_app
from ascendscope.server.settings import Settings

BINARY = {"Accept": columns.MEDIA_TYPE}


def client_for(data_dir, **settings) -> TestClient:
    return TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir), **settings)))


@pytest.fixture()
def taken(monkeypatch):
    """How many requests the short path answered itself."""
    count = []
    real = fastlane.FastLane._answer

    async def counting(scope, run_id, kind):
        response = await real(scope, run_id, kind)
        count.append(kind)
        return response

    monkeypatch.setattr(fastlane.FastLane, "_answer", staticmethod(counting))
    return count


def asks(meta: dict) -> list[tuple[str, list]]:
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    slices = [t["track_id"] for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"]][:4]
    counters = [t["track_id"] for t in meta["tracks"] if t["kind"] == "counter"][:3]
    mid = start + (end - start) // 3
    out = [("slices", [("track_id", t) for t in slices] + [("width_px", 1600)]),
           ("slices", [("track_id", slices[0]), ("start_ns", mid), ("end_ns", mid + (end - start) // 40),
                       ("width_px", 300)]),
           ("flows", [("start_ns", start), ("end_ns", end)]),
           ("flows", [("start_ns", mid), ("end_ns", mid + (end - start) // 10), ("cat", "async_npu"),
                      ("cat", "HostToDevice")])]
    if counters:
        out.append(("counters", [("track_id", t) for t in counters] + [("start_ns", start), ("end_ns", end)]))
    return out


@pytest.mark.parametrize("name", ["level1", "generated"])
def test_the_short_path_answers_byte_for_byte_as_the_router(runs, taken, name):
    run_id = runs.ids[name]
    with client_for(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        for kind, params in asks(meta):
            url = f"/api/runs/{run_id}/timeline/{kind}"
            for headers in ({}, BINARY):
                before = len(taken)
                short = client.get(url, params=params, headers=headers)
                assert len(taken) == before + 1, (kind, params)  # the short path answered
                # an unknown parameter (the router ignores it) sends the same request to the router
                routed = client.get(url, params=params + [("unused", "1")], headers=headers)
                assert len(taken) == before + 1
                assert short.status_code == routed.status_code == 200, short.text
                assert short.content == routed.content, (kind, params, headers)
                assert short.headers["content-type"] == routed.headers["content-type"]
                for header in ("content-security-policy", "x-content-type-options", "cache-control"):
                    assert short.headers.get(header) == routed.headers.get(header), header


def test_requests_it_does_not_take_get_the_routers_answers_and_errors(runs, taken):
    run_id = runs.ids["generated"]
    with client_for(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        track = next(t["track_id"] for t in meta["tracks"] if t["kind"] != "counter")
        base = f"/api/runs/{run_id}/timeline"
        cases = [
            (f"{base}/slices", {"track_id": track, "width_px": 0}, 422),  # out of range
            (f"{base}/slices", {"track_id": "abc"}, 422),  # not an integer
            (f"{base}/slices", {"track_id": track, "start_ns": 2 ** 63}, 422),  # past int64
            (f"{base}/slices", {}, 422),  # no track
            (f"{base}/counters", {}, 422),
            (f"{base}/slices", {"track_id": 999_999_999}, 404),  # validates, then fails: the router says why
            ("/api/runs/no-such-run/timeline/flows", {}, 404),
        ]
        for url, params, status in cases:
            resp = client.get(url, params=params)
            assert resp.status_code == status, (url, params, resp.text)
            assert resp.json()["error"]["code"], resp.text
        assert taken == []  # none of them was answered by the short path
        assert client.post(f"{base}/flows").status_code == 405  # another method: the router's answer


def test_the_short_path_is_behind_the_token(runs, taken):
    run_id = runs.ids["generated"]
    with client_for(runs.data_dir, token="fastlane-token") as client:
        url = f"/api/runs/{run_id}/timeline/flows"
        refused = client.get(url)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "token_required"
        assert taken == []
        allowed = client.get(url, headers={"Authorization": "Bearer fastlane-token"})
        assert allowed.status_code == 200 and taken == ["flows"]


def test_parse_keeps_only_plain_well_formed_parameters():
    assert fastlane.parse("slices", b"track_id=1&track_id=-2&start_ns=5&width_px=20000") == {
        "track_id": [1, -2], "start_ns": 5, "width_px": 20000}
    assert fastlane.parse("flows", b"cat=a&cat=&end_ns=7") == {"cat": ["a", ""], "end_ns": 7}
    for kind, query in [("slices", b"track_id=1&width_px=20001"), ("slices", b"track_id=1.5"),
                        ("slices", b"track_id=1&start_ns=1&start_ns=2"), ("flows", b"track_id=1"),
                        ("counters", b"width_px=3"), ("slices", b"track_id=99999999999999999999")]:
        with pytest.raises(fastlane.Unusual):
            fastlane.parse(kind, query)


def test_the_event_loop_makes_no_system_call_for_a_viewport_request(runs, taken, monkeypatch):
    """Under many users each system call on the event loop costs it a wait for the GIL (docs/benchmarks.md,
    issue #18): the short path finds the run and its database, answers and closes the cursor on its worker
    thread. The router's path, as a control, still stats run.json on the loop (so the probe sees such calls)."""
    import asyncio
    import os

    on_loop: list[str] = []
    real_stat = os.stat

    def probe(path, *args, **kwargs):
        if asyncio._get_running_loop() is not None:  # called from the thread running the event loop
            on_loop.append(str(path))
        return real_stat(path, *args, **kwargs)

    run_id = runs.ids["generated"]
    with client_for(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        kinds = []
        monkeypatch.setattr(os, "stat", probe)
        for kind, params in asks(meta):
            for _ in range(2):  # the first opens what the second finds open
                resp = client.get(f"/api/runs/{run_id}/timeline/{kind}", params=params)
                assert resp.status_code == 200, resp.text
                kinds.append(kind)
        assert taken == kinds and on_loop == []
        assert client.get(f"/api/runs/{run_id}/timeline/tracks").status_code == 200  # the router's path
        assert any(p.endswith("run.json") for p in on_loop), on_loop


def test_viewport_requests_run_on_a_few_threads_at_once(runs, monkeypatch):
    """At most fastlane.THREADS requests of the short path run at once in a process, however many arrive; the
    others wait their turn and are answered as well."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    running, peak, lock = [0], [0], threading.Lock()
    real = fastlane.respond

    def slow(*args, **kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.05)
            return real(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(fastlane, "respond", slow)
    run_id = runs.ids["generated"]
    with client_for(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        url = f"/api/runs/{run_id}/timeline/flows"
        params = {"start_ns": meta["start_ns"], "end_ns": meta["end_ns"]}
        with ThreadPoolExecutor(4 * fastlane.THREADS) as pool:
            answers = list(pool.map(lambda _: client.get(url, params=params), range(8 * fastlane.THREADS)))
    assert [a.status_code for a in answers] == [200] * (8 * fastlane.THREADS)
    assert len({a.content for a in answers}) == 1
    assert peak[0] == fastlane.THREADS


def test_a_request_whose_client_left_while_it_waited_for_a_thread_costs_no_work(runs, monkeypatch):
    """Every thread of the short path busy, a viewport request queues; its client disconnects meanwhile. Once a
    thread is free the request is answered 499 (nobody reads it) without being looked up or answered, and the
    router does not take it over; the requests that held the threads are answered as usual."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    release, started, called = threading.Event(), threading.Semaphore(0), []
    real = fastlane.respond

    def held(request, run_id, kind, args):
        started.release()
        release.wait(30)
        return real(request, run_id, kind, args)

    real_flows = fastlane.endpoints.flows

    def flows(*args, **kwargs):
        called.append(kwargs.get("start_ns"))
        return real_flows(*args, **kwargs)

    run_id = runs.ids["generated"]
    with client_for(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        url = f"/api/runs/{run_id}/timeline/flows"
        start, end = int(meta["start_ns"]), int(meta["end_ns"])
        monkeypatch.setattr(fastlane, "respond", held)
        monkeypatch.setattr(fastlane.endpoints, "flows", flows)
        routed = []
        router = client.app.middleware_stack  # (built by the first request)
        lane = router
        while not isinstance(lane, fastlane.FastLane):
            lane = lane.app
        inner = lane.app

        async def counting_router(scope, receive, send):
            routed.append(scope["path"])
            await inner(scope, receive, send)

        monkeypatch.setattr(lane, "app", counting_router)
        with ThreadPoolExecutor(fastlane.THREADS) as pool:
            busy = [pool.submit(client.get, url, params={"start_ns": start, "end_ns": end})
                    for _ in range(fastlane.THREADS)]
            for _ in range(fastlane.THREADS):
                assert started.acquire(timeout=30)  # every thread of the short path is held

            async def gone() -> list[dict]:
                import anyio

                sent: list[dict] = []
                disconnected = anyio.Event()

                async def receive():
                    disconnected.set()
                    return {"type": "http.disconnect"}

                async def send(message):
                    sent.append(message)

                query = f"start_ns={start + 1}&end_ns={end}".encode()
                scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                         "scheme": "http", "path": url, "raw_path": url.encode(), "query_string": query,
                         "root_path": "", "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 50000),
                         "server": ("testserver", 80)}
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client.app, scope, receive, send)
                    await disconnected.wait()
                    await anyio.sleep(0.2)  # the request waits for a thread; its client has gone
                    release.set()
                return sent

            sent = client.portal.call(gone)
            answers = [f.result(timeout=30) for f in busy]
    assert [a.status_code for a in answers] == [200] * fastlane.THREADS
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499
    assert b"client_closed_request" in b"".join(m.get("body", b"") for m in sent[1:])
    assert start + 1 not in called and called.count(start) == fastlane.THREADS  # the gone one was never answered
    assert routed == []  # and the router did not take it over


@pytest.mark.parametrize("unusual", [False, True])
def test_an_answer_kept_in_memory_is_not_encoded_for_a_client_that_left(runs, monkeypatch, unusual):
    """A viewport answered from memory (no query left to interrupt), asked again by a client that has gone by
    the time the work starts: 499 on the short path and on the router's (an unknown parameter sends it there)."""
    from ascendscope.server import requestclock

    run_id = runs.ids["generated"]
    with client_for(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        track = next(t["track_id"] for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"])
        url = f"/api/runs/{run_id}/timeline/slices"
        params = {"track_id": track, "width_px": 800, **({"unused": 1} if unusual else {})}
        for _ in range(3):  # read, then kept in memory
            assert client.get(url, params=params).status_code == 200
        gone = requestclock.CancelToken()
        gone.cancel()
        monkeypatch.setattr(requestclock, "token", lambda scope: gone)
        r = client.get(url, params=params)
    assert r.status_code == 499, r.text
    assert r.json()["error"]["code"] == "client_closed_request"
