"""Query processes (server.queryprocs): a server process of ``ascendscope serve`` hands the short path's viewport
requests to processes of its own, whose answers are the router's, byte for byte, in JSON and in the binary
columns format, on the real level1 sample (or its twin) and a generated run; a query process that dies costs no
request (the router answers what it held) and is replaced; an app built without them answers on its threads; and
the server's default process count follows from them."""

from __future__ import annotations

import os
import signal
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from ascendscope.server import queryprocs
from ascendscope.server.app import create_app
from ascendscope.server.settings import Settings, cores, query_process_count, worker_count
from tests.server.test_fastlane import BINARY, asks

READY_S = 60


@pytest.fixture()
def handed(monkeypatch):
    """The answers query processes gave (None: none could, the router answered)."""
    got = []
    real = queryprocs.QueryProcesses.answer

    async def spy(self, message, gone=None):
        answer = await real(self, message, gone)
        got.append(answer)
        return answer

    monkeypatch.setattr(queryprocs.QueryProcesses, "answer", spy)
    return got


def served_client(data_dir, processes: int = 2) -> TestClient:
    settings = Settings.from_env(environ={}, data_dir=str(data_dir), query_processes=processes)
    return TestClient(create_app(settings, query_processes=True))


def wait_for_processes(client, url: str, handed: list, processes: int) -> None:
    """Ask until the query processes answer (they start in the background; meanwhile threads answer)."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        before = len(handed)
        assert client.get(url).status_code == 200
        if len(handed) > before and handed[-1] is not None and len(live(client)) == processes:
            return
        time.sleep(0.1)
    raise AssertionError("the query processes did not start")


def live(client) -> list:
    pools = list(queryprocs._pools.values())
    return [p for pool in pools for p in pool.procs if p.alive]


@pytest.fixture(scope="class")
def served(runs):
    """An app with two query processes for the tests of one class (stopped once the class is done)."""
    with served_client(runs.data_dir) as client:
        yield client


class TestOneApp:
    """Both samples asked of one app and its two query processes (started once; the other tests, which need an app
    of their own, come after this class has stopped it)."""

    @pytest.mark.parametrize("name", ["level1", "generated"])
    def test_query_processes_answer_byte_for_byte_as_the_router(self, runs, served, handed, name):
        run_id = runs.ids[name]
        client = served
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        kind, params = asks(meta)[0]
        wait_for_processes(client, f"/api/runs/{run_id}/timeline/{kind}?" + "&".join(f"{k}={v}" for k, v in params),
                           handed, 2)
        pids = {p.proc.pid for p in live(client)}
        assert len(pids) == 2 and os.getpid() not in pids
        for kind, params in asks(meta):
            url = f"/api/runs/{run_id}/timeline/{kind}"
            for headers in ({}, BINARY):
                before = len(handed)
                short = client.get(url, params=params, headers=headers)
                assert len(handed) == before + 1 and handed[-1] is not None, (kind, params)  # a process answered
                routed = client.get(url, params=params + [("unused", "1")], headers=headers)  # (the router)
                assert len(handed) == before + 1
                assert short.status_code == routed.status_code == 200, short.text
                assert short.content == routed.content, (kind, params, headers)
                assert short.headers["content-type"] == routed.headers["content-type"]
                for header in ("content-security-policy", "x-content-type-options", "cache-control", "vary"):
                    assert short.headers.get(header) == routed.headers.get(header), header
        # an unknown run is the router's 404, as on the thread path
        missing = client.get("/api/runs/nope/timeline/slices", params=[("track_id", 1)])
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"


def test_they_start_with_the_app_in_a_session_of_their_own(runs, handed):
    """Started with the app, not by a user's first viewport (whose answers would wait for their start-up), and
    out of the terminal's process group: a Ctrl+C there reaches the server, which stops them, not them."""
    with served_client(runs.data_dir) as client:
        deadline = time.monotonic() + READY_S
        while len(live(client)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        procs = live(client)
        assert len(procs) == 2 and handed == []
        assert client.get("/api/health").json()["query_processes"] == {"ready": 2, "wanted": 2}
        for p in procs:
            assert os.getsid(p.proc.pid) == p.proc.pid != os.getsid(0)
    assert live(client) == [] and all(p.proc.poll() is not None for p in procs)  # and stopped with it


def test_a_query_process_that_dies_costs_no_request_and_is_replaced(runs, handed):
    run_id = runs.ids["generated"]
    with served_client(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        kind, params = asks(meta)[0]
        url = f"/api/runs/{run_id}/timeline/{kind}"
        wait_for_processes(client, f"{url}?" + "&".join(f"{k}={v}" for k, v in params), handed, 2)
        expected = client.get(url, params=params + [("unused", "1")]).content  # the router's
        victims = {p.proc.pid for p in live(client)}
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        for _ in range(20):  # whatever they held or were given meanwhile: answered all the same
            answer = client.get(url, params=params)
            assert answer.status_code == 200 and answer.content == expected
        wait_for_processes(client, f"{url}?" + "&".join(f"{k}={v}" for k, v in params), handed, 2)
        assert not victims & {p.proc.pid for p in live(client)}  # two new ones
        assert client.get(url, params=params).content == expected


SLOW_SLICES = """
import os
from pathlib import Path

marks = os.environ.get("QUERYPROCS_TEST_MARKS")
if marks:  # (a query process of the test below: its slices query runs for minutes unless interrupted)
    from ascendscope.server.api import timeline
    from ascendscope.server.requestclock import ClientGone

    def slices(run_id, db, accept=None, **args):
        (Path(marks) / f"started-{os.getpid()}").touch()
        try:
            db.one("SELECT sum(a.i * b.i) FROM range(100000000) a(i), range(1000) b(i)")
        except ClientGone:
            (Path(marks) / "client-gone").touch()
            raise
        (Path(marks) / "finished").touch()

    timeline.slices = slices
"""


def test_a_client_that_goes_away_stops_the_query_its_process_runs(runs, tmp_path, monkeypatch):
    """A slices query that would run for minutes in a query process (made so by a ``sitecustomize`` that only
    the query processes of this test load); its client hangs up once it runs: the process is told, the DuckDB
    query is interrupted there (ClientGone) and the process answers the next request."""
    from tests.conftest import serving

    hook, marks = tmp_path / "hook", tmp_path / "marks"
    hook.mkdir()
    marks.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_SLICES)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("QUERYPROCS_TEST_MARKS", str(marks))
    run_id = runs.ids["generated"]
    settings = Settings.from_env(environ={}, data_dir=str(runs.data_dir), query_processes=1, query_timeout_s=120.0)
    app = create_app(settings, query_processes=True)
    with serving(app) as base:
        deadline = time.monotonic() + READY_S
        while not list(queryprocs._pools.values()) or not live(None):
            assert time.monotonic() < deadline, "the query process did not start"
            time.sleep(0.1)
        tracks = httpx.get(f"{base}/api/runs/{run_id}/timeline/tracks").json()
        track = next(t["track_id"] for t in tracks["tracks"] if t["kind"] != "counter" and t["slice_count"])
        url = urlsplit(base)
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(f"GET /api/runs/{run_id}/timeline/slices?track_id={track} HTTP/1.1\r\n"
                         "Host: 127.0.0.1\r\n\r\n".encode())
            while not list(marks.glob("started-*")):
                assert time.monotonic() < deadline, "the query did not start in the query process"
                time.sleep(0.05)
            time.sleep(0.2)  # the query runs now
        while not (marks / "client-gone").exists():
            assert time.monotonic() < deadline and not (marks / "finished").exists(), "the query was not stopped"
            time.sleep(0.05)
        (pid,) = {p.proc.pid for p in live(None)}
        assert list(marks.glob("started-*")) == [marks / f"started-{pid}"]  # it ran there, not on a thread
        # the process is free again: it takes the next request (that query again, interrupted the same way)
        assert httpx.get(f"{base}/api/health").status_code == 200
        for p in live(None):
            assert not p.waiting


def test_a_query_process_whose_server_dies_mid_query_exits(runs, tmp_path):
    """Its server process gone (here: the socket's other end closed, as when it is killed) while a query runs
    for minutes: the query is interrupted and the process exits, not left computing."""
    import pickle
    import subprocess
    import sys
    from multiprocessing.connection import Connection

    from ascendscope.server import fastlane

    hook, marks = tmp_path / "hook", tmp_path / "marks"
    hook.mkdir()
    marks.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_SLICES)
    env = dict(os.environ, QUERYPROCS_TEST_MARKS=str(marks),
               PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    run_id = runs.ids["generated"]
    settings = Settings.from_env(environ={}, data_dir=str(runs.data_dir), query_timeout_s=120.0)
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", queryprocs.QUERY_SERVER, str(theirs.fileno())],
                            pass_fds=[theirs.fileno()], env=env, start_new_session=True)
    theirs.close()
    try:
        conn = Connection(ours.detach())
        conn.send_bytes(pickle.dumps(settings))
        assert conn.recv_bytes() == b""  # ready
        query = b"track_id=1"
        message = (run_id, "slices", fastlane.parse("slices", query), f"/api/runs/{run_id}/timeline/slices", query,
                   [(b"host", b"127.0.0.1")], time.monotonic())
        conn.send_bytes(pickle.dumps((1, message)))
        deadline = time.monotonic() + READY_S
        while not list(marks.glob("started-*")):
            assert time.monotonic() < deadline and proc.poll() is None, "the query did not start"
            time.sleep(0.05)
        time.sleep(0.2)  # the query runs now
        conn.close()
        assert proc.wait(timeout=READY_S) == 0
        assert (marks / "client-gone").exists() and not (marks / "finished").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_query_processes_that_cannot_start_leave_the_threads_answering(runs, handed, monkeypatch, caplog):
    """A query process that exits before it is ready (here: it runs a module that does not exist) is given up
    after its starts; every request is answered on the threads meanwhile, and the failure is logged."""
    monkeypatch.setattr(queryprocs, "QUERY_SERVER", "ascendscope.server.no_such_module")
    run_id = runs.ids["generated"]
    with served_client(runs.data_dir) as client:
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        kind, params = asks(meta)[0]
        url = f"/api/runs/{run_id}/timeline/{kind}"
        expected = client.get(url, params=params + [("unused", "1")]).content  # the router's
        (pool,) = queryprocs._pools.values()
        deadline = time.monotonic() + READY_S
        while pool.starts_left or pool.starting:
            assert time.monotonic() < deadline, "the starts did not end"
            answer = client.get(url, params=params)
            assert answer.status_code == 200 and answer.content == expected
            time.sleep(0.05)
        assert live(client) == [] and handed == []
        assert client.get(url, params=params).content == expected
        assert client.get("/api/health").json()["query_processes"] == {"ready": 0, "wanted": 2}
    assert "a query process could not start" in caplog.text


def test_an_app_built_without_them_answers_on_its_threads(runs, handed):
    run_id = runs.ids["generated"]
    settings = Settings.from_env(environ={}, data_dir=str(runs.data_dir), query_processes=2)
    with TestClient(create_app(settings)) as client:  # (not a server process of `ascendscope serve`)
        meta = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        kind, params = asks(meta)[0]
        assert client.get(f"/api/runs/{run_id}/timeline/{kind}", params=params).status_code == 200
        assert handed == [] and client.app.state.query_processes == 0
        assert "query_processes" not in client.get("/api/health").json()


def test_the_process_counts_follow_from_the_settings():
    def settings(**kw):
        return Settings.from_env(environ={}, data_dir="/tmp/unused", **kw)

    assert query_process_count(settings()) == cores()  # default: one per core
    assert worker_count(settings()) == 1  # ... beside one server process
    assert query_process_count(settings(query_processes=0)) == 0
    assert worker_count(settings(query_processes=0)) == cores()  # threads: a server process per core
    assert worker_count(settings(workers=3)) == 3 and query_process_count(settings(query_processes=3)) == 3
    env = Settings.from_env(environ={"ASCENDSCOPE_QUERY_PROCESSES": "0"}, data_dir="/tmp/unused")
    assert env.query_processes == 0
