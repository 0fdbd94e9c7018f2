"""The ingest worker and its persistent queue: progress in run.json, SIGKILL mid-ingest (no half run; failed with
the reason, or retried to ready), delete during an ingest, restart-resume of queued / interrupted / uploaded runs,
bounded concurrency, and serving other runs while one ingests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from ascendscope.server.worker import _group_alive, end_group
from tests.conftest import PYTORCH_TEXT, needs_samples
from tests.run_helpers import wait

pytestmark = needs_samples
OPS_PER_STEP = 6000  # a generated rank whose trace takes a few seconds to ingest: time to kill the worker
LEFTOVER_OK = {"run.json", "ingest.log", ".run.lock", ".ingest.lock"}
RUN_DATABASE = {"run.duckdb", "manifest.json", "cluster.duckdb", "shards", "index"}  # either layout, its index files


@pytest.fixture(scope="module")
def big_source(tmp_path_factory) -> Path:
    from ascendscope.sample_data.generate import generate_run

    path = tmp_path_factory.mktemp("big") / "big_ascend_pt_run"
    generate_run(path, ranks=1, ops_per_step=OPS_PER_STEP)
    return path


@contextmanager
def running_queue(store, **options):
    from ascendscope.server.worker import IngestQueue

    queue = IngestQueue(store, **options).start(resume=True)
    try:
        yield queue
    finally:
        queue.stop()


def reading(store, run_id):
    """The run once its worker is reading files (so a kill lands mid-ingest)."""
    run = store.get(run_id)
    progress = run.progress if isinstance(run.progress, dict) else {}
    return run if run.status == "ingesting" and progress.get("phase") == "reading" and run.worker_pid else None


def test_sigkill_mid_ingest_leaves_no_run_and_fails_with_the_reason(tmp_path, big_source):
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    run = store.create_run_from_path(big_source)
    with running_queue(store, retries=0):
        seen = wait(lambda: reading(store, run.id))
        assert seen.progress["total_bytes"] > 10_000_000 and seen.progress["ranks"] == 1
        assert 0 <= seen.progress["percent"] < 90 and seen.progress["text"].startswith("reading")
        assert os.getpgid(seen.worker_pid) == seen.worker_pid  # a process group of its own, its pool's too
        os.kill(seen.worker_pid, signal.SIGKILL)
        failed = wait(lambda: (r := store.get(run.id)).status == "failed" and r)
        assert not _group_alive(seen.worker_pid)  # its pool had ended before the queue cleaned up after it
    assert "SIGKILL" in failed.error and failed.attempts == 1 and failed.progress is None
    run_dir = store.run_dir(run.id)
    assert not store.db_path(run.id).exists()
    assert {p.name for p in run_dir.iterdir()} <= LEFTOVER_OK  # no temp database, no scratch folder


def test_the_queue_waits_for_an_exited_workers_group_and_kills_what_hangs():
    # a leader that exits at once, leaving a process of its group that lives 0.5 s more (a pool worker noticing
    # late that its owner is gone), then one that would live a minute
    for lives, patience, ends_by_itself in ((0.5, 10.0, True), (60, 0.3, False)):
        leader = subprocess.Popen(["sh", "-c", f"sleep {lives} & exit 0"], start_new_session=True)
        leader.wait()
        assert _group_alive(leader.pid)
        t0 = time.monotonic()
        assert end_group(leader.pid, timeout_s=patience) is ends_by_itself
        assert not _group_alive(leader.pid)
        assert time.monotonic() - t0 < (5 if ends_by_itself else 0.3 + 5)
    assert end_group(leader.pid) is True  # no group: nothing to wait for


def test_sigkill_is_retried_once_and_other_runs_keep_being_served(tmp_path, big_source, level1_db):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    store = RunStore(tmp_path)
    other = store.create_run("level1", str(PYTORCH_TEXT / "level1"))
    shutil.copy(level1_db, store.db_path(other.id))
    store.set_status(other.id, "ready")
    run = store.create_run_from_path(big_source)
    with running_queue(store, retries=1) as queue, \
            TestClient(create_app(Settings.from_env(environ={}, data_dir=str(tmp_path)), store=store,
                                  ingest_queue=queue)) as client:
        first = wait(lambda: reading(store, run.id))
        os.kill(first.worker_pid, signal.SIGKILL)
        second = wait(lambda: (r := reading(store, run.id)) and r.worker_pid != first.worker_pid and r)
        assert second.attempts == 2
        slowest = 0.0
        while store.get(run.id).status == "ingesting":  # the web process answers while the worker works
            t0 = time.perf_counter()
            assert client.get(f"/api/runs/{other.id}/summary").status_code == 200
            assert client.get(f"/api/runs/{run.id}").json()["status"] in ("ingesting", "ready")
            slowest = max(slowest, time.perf_counter() - t0)
            time.sleep(0.05)
        assert slowest < 2.0
        ready = wait(lambda: (r := store.get(run.id)).status != "ingesting" and r)
    assert ready.status == "ready" and ready.error is None and ready.rank_count == 1
    assert store.db_path(run.id).exists() and not list(store.run_dir(run.id).glob("run.duckdb.tmp-*"))


def test_delete_during_ingest_stops_the_worker(tmp_path, big_source):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    store = RunStore(tmp_path)
    run = store.create_run_from_path(big_source)
    with running_queue(store) as queue, \
            TestClient(create_app(Settings.from_env(environ={}, data_dir=str(tmp_path)), store=store,
                                  ingest_queue=queue)) as client:
        seen = wait(lambda: reading(store, run.id))
        assert client.delete(f"/api/runs/{run.id}").status_code == 204
        assert queue.active() == {}
        time.sleep(0.5)
        assert not store.run_dir(run.id).exists() and list(store.runs_dir.iterdir()) == []
        with pytest.raises(ProcessLookupError):
            os.kill(seen.worker_pid, 0)
    assert big_source.is_dir()  # a source path is never touched


def test_restart_resumes_queued_interrupted_and_uploaded_runs(tmp_path):
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    queued = store.create_run_from_path(PYTORCH_TEXT / "level0")
    interrupted = store.create_run_from_path(PYTORCH_TEXT / "level1")
    store.set_status(interrupted.id, "ingesting", worker_pid=2**22 + 1, attempts=1)  # the server died here
    (store.run_dir(interrupted.id) / "run.duckdb.tmp-4194305-1").write_bytes(b"half a database")
    (store.run_dir(interrupted.id) / "work").mkdir()
    staging = store.new_staging_dir()  # an upload that was accepted but not ingested yet
    shutil.copytree(PYTORCH_TEXT / "level1", staging / "source" / "level1")
    uploaded = store.commit_staging(staging, "up", "up.zip", origin="upload")
    half_received = store.new_staging_dir()  # an upload the dead server was still receiving
    (half_received / "upload.bin").write_bytes(b"PK")

    store = RunStore(tmp_path)  # the new server process
    store.sweep()
    assert not half_received.exists()
    most_at_once = 0
    with running_queue(store, workers=2) as queue:
        while not queue.wait_idle(0.05):
            most_at_once = max(most_at_once, len(queue.active()))
    assert 1 <= most_at_once <= 2
    for run in (queued, interrupted, uploaded):
        done = store.get(run.id)
        assert done.status == "ready" and done.rank_count == 2, done
        assert {p.name for p in store.run_dir(run.id).iterdir()} <= LEFTOVER_OK | RUN_DATABASE
    assert store.pending() == []


def test_interrupted_too_often_fails(tmp_path):
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    run = store.create_run_from_path(PYTORCH_TEXT / "level1")
    store.set_status(run.id, "ingesting", attempts=2)
    with running_queue(store, retries=1) as queue:
        assert queue.wait_idle(10)
    failed = store.get(run.id)
    assert failed.status == "failed" and "interrupted 2 times" in failed.error


def test_a_run_another_live_process_holds_is_left_alone_until_it_lets_go(tmp_path):
    """A killed server's worker still running (or another server's) holds the run's ingest lock: the queue neither
    removes its files nor starts a second worker on the run; it ingests the run once the lock is free."""
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    run = store.create_run_from_path(PYTORCH_TEXT / "level1")
    store.set_status(run.id, "ingesting", worker_pid=2**22 + 1, attempts=1)
    run_dir = store.run_dir(run.id)
    scratch, temp_db = run_dir / "work-4194305", run_dir / "run.duckdb.tmp-4194305-1"
    scratch.mkdir()
    temp_db.write_bytes(b"half a database")
    held = store.hold_ingest_lock(run.id)  # as the live worker does
    with running_queue(store) as queue:
        assert not queue.wait_idle(1.5)
        assert queue.active() == {} and scratch.is_dir() and temp_db.exists()
        assert store.get(run.id).attempts == 1
        os.close(held)  # the other worker is gone
        assert queue.wait_idle(120)
    done = store.get(run.id)
    assert done.status == "ready" and done.attempts == 2
    assert {p.name for p in run_dir.iterdir()} <= LEFTOVER_OK | RUN_DATABASE
