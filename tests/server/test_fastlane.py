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
    real = fastlane._respond

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

    monkeypatch.setattr(fastlane, "_respond", slow)
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
