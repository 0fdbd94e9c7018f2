"""Several server processes over one run store (issue #18 items 1 and 6), each a real ``ascendscope serve``:

* ``--workers 2`` on one port: both processes answer (``/api/health`` names its process), an upload received by
  either is ingested once, by the one ingest queue, and a rename and a delete made through one are seen at once by
  every request, whichever process answers it;
* two servers on two ports over two paths to the same store (a symlink standing for a second mount of shared
  storage): the same, with each server addressed on its own, and the ingest queue moving to the other server when
  its leader stops.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.archives import zip_folder
from tests.conftest import free_port
from tests.server.test_cli_serve import wait_for as cli_wait_for

WAIT_S = 120.0


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    from ascendscope.sample_data.generate import generate_run

    src = tmp_path_factory.mktemp("mp-src") / "run"
    generate_run(src, ranks=2, steps=2, ops_per_step=30, seed=5)
    return src


@pytest.fixture(scope="module")
def archive(source) -> bytes:
    return zip_folder(source, "mp")


def serve(data_dir: Path, workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDSCOPE_")}
    # one query process per server process (the default is one per core): each still answers through one, and
    # every extra one is an interpreter started per server process that these tests never look at
    proc = subprocess.Popen(
        [sys.executable, "-m", "ascendscope.server.cli", "serve", "--no-browser", "--port", str(port), "--data-dir",
         str(data_dir), "--workers", str(workers), "--query-processes", "1", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"{base}/api/health", timeout=2).status_code == 200, proc=proc)
    return proc, base


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    return proc.stdout.read() if proc.stdout else ""


def wait_for(fn, timeout_s: float = WAIT_S, proc: subprocess.Popen | None = None):
    return cli_wait_for(fn, timeout_s, 0.1, proc)


def processes_answering(base: str, want: int) -> set[int]:
    """The pids of the processes behind ``base``, once ``want`` different ones have answered."""
    seen: set[int] = set()

    def enough():
        with httpx.Client(timeout=5) as c:  # new connections: each may land on another process
            seen.add(c.get(f"{base}/api/health").json()["process"])
        return len(seen) >= want

    wait_for(enough, 60)
    return seen


def upload(base: str, data: bytes) -> dict:
    r = httpx.post(f"{base}/api/runs", files={"file": ("mp.zip", data, "application/zip")}, timeout=60)
    assert r.status_code == 202, r.text
    return r.json()


def ready(base: str, run_id: str) -> dict:
    return wait_for(lambda: (r := httpx.get(f"{base}/api/runs/{run_id}", timeout=5).json())["status"]
                    in ("ready", "failed") and r)


def ingest_attempts(data_dir: Path, run_id: str) -> list[str]:
    log = (data_dir / "runs" / run_id / "ingest.log").read_text()
    return [line for line in log.splitlines() if "worker pid" in line and "ingesting" in line]


def every_answer(base: str, path: str, n: int = 16) -> list[httpx.Response]:
    """``n`` answers to ``path``, each on a new connection (so both processes answer some of them)."""
    out = []
    for _ in range(n):
        with httpx.Client(timeout=10) as c:
            out.append(c.get(f"{base}{path}"))
    return out


def test_workers_share_the_port_the_queue_and_the_store(tmp_path, archive):
    proc, base = serve(tmp_path, workers=2)
    try:
        pids = processes_answering(base, 2)
        run = upload(base, archive)
        done = ready(base, run["id"])
        assert done["status"] == "ready", done
        assert len(ingest_attempts(tmp_path, run["id"])) == 1  # one queue: ingested once
        leader = int((tmp_path / ".ingest-leader.lock").read_text())
        assert leader in pids
        assert json.loads((tmp_path / "runs" / run["id"] / "run.json").read_text())["attempts"] == 1
        for r in every_answer(base, f"/api/runs/{run['id']}/timeline/tracks"):
            assert r.status_code == 200 and r.json()["ranks"] == [0, 1]

        assert httpx.patch(f"{base}/api/runs/{run['id']}", json={"name": "renamed"}).status_code == 200
        assert {r.json()["name"] for r in every_answer(base, f"/api/runs/{run['id']}")} == {"renamed"}
        for r in every_answer(base, "/api/runs"):
            assert {x["name"] for x in r.json()["runs"] if x["id"] == run["id"]} == {"renamed"}

        assert httpx.delete(f"{base}/api/runs/{run['id']}").status_code == 204
        assert {r.status_code for r in every_answer(base, f"/api/runs/{run['id']}/timeline/tracks")} == {404}
        for r in every_answer(base, "/api/runs"):
            assert run["id"] not in {x["id"] for x in r.json()["runs"]}
    finally:
        output = stop(proc)
    assert "Traceback" not in output, output


def test_two_servers_on_two_mounts_of_one_store(tmp_path, source, archive):
    store = tmp_path / "store"
    store.mkdir()
    mount = tmp_path / "mount-b"
    mount.symlink_to(store, target_is_directory=True)  # the same store reached by another path
    a, base_a = serve(store, workers=1)
    b, base_b = serve(mount, workers=1)
    try:
        (pid_a,), (pid_b,) = processes_answering(base_a, 1), processes_answering(base_b, 1)
        leader = int((store / ".ingest-leader.lock").read_text())
        assert leader in (pid_a, pid_b)
        follower_base = base_b if leader == pid_a else base_a
        run = upload(follower_base, archive)  # received by the follower, ingested by the leader's queue
        assert ready(base_a, run["id"])["status"] == "ready"
        assert ready(base_b, run["id"])["status"] == "ready"
        assert len(ingest_attempts(store, run["id"])) == 1
        for base in (base_a, base_b):
            assert httpx.get(f"{base}/api/runs/{run['id']}/timeline/tracks", timeout=10).json()["ranks"] == [0, 1]

        assert httpx.patch(f"{base_a}/api/runs/{run['id']}", json={"name": "seen by b"}).status_code == 200
        assert httpx.get(f"{base_b}/api/runs/{run['id']}").json()["name"] == "seen by b"

        # the leader stops: the other server takes the queue over and ingests the next upload
        leader_proc, other_base = (a, base_b) if leader == pid_a else (b, base_a)
        stop(leader_proc)
        second = upload(other_base, zip_folder(source, "another"))
        assert ready(other_base, second["id"])["status"] == "ready"
        assert int((store / ".ingest-leader.lock").read_text()) != leader

        assert httpx.delete(f"{other_base}/api/runs/{run['id']}").status_code == 204
        assert not (store / "runs" / run["id"]).exists()
    finally:
        stop(a)
        stop(b)


def test_a_leaving_process_takes_no_lead(tmp_path, monkeypatch):
    """A server process whose supervisor died shuts down for seconds; if the lead freed meanwhile (that server's
    leader stopping first), it must not take it: it would start an ingest worker only to leave it behind."""
    from ascendscope.server import coordinator
    from ascendscope.server.coordinator import IngestCoordinator
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path / "data")
    monkeypatch.setattr(coordinator, "_LEAVING", threading.Event())
    first = IngestCoordinator(store).start()
    second = IngestCoordinator(store).start()
    try:
        assert first.is_leader and not second.is_leader
        coordinator.leaving()
        first.stop()  # the lead is free now
        second._try_lead()
        assert not second.is_leader
        coordinator._LEAVING.clear()
        second._try_lead()
        assert second.is_leader
    finally:
        first.stop()
        second.stop()
