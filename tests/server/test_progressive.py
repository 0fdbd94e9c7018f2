"""A run opens while it ingests (issue #17): its small files first, then each rank as soon as its shard is written;
the rank a user opens is loaded next; a killed worker resumes without redoing finished shards.

The API tests pin a run half-way (its manifest says one shard is still pending) to check what is served then, and
that nothing cached before a rank appears is served after; the worker tests ingest generated runs for real (each
rank its own shard, ``group_bytes=0``), with a real SIGKILL. Generated data only: no ../shared needed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from ascendscope.ingest.shards import ingest_sharded, read_manifest
from ascendscope.sample_data.generate import generate_run
from ascendscope.server.runs import RunStore
from tests.run_helpers import pin, wait


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("three") / "run"
    generate_run(src, ranks=3, steps=2, ops_per_step=40, seed=3)
    return src


@pytest.fixture(scope="module")
def three_ranks_ingested(three_ranks, tmp_path_factory) -> tuple[Path, str]:
    """``(data dir, run id)``: a store holding ``three_ranks`` ingested sharded, a shard per rank (only read: each
    test copies it, see ``store_copy``)."""
    store = RunStore(tmp_path_factory.mktemp("three-ingested") / "data")
    run = store.create_run("three", str(three_ranks))
    ingest_sharded(three_ranks, store.run_dir(run.id), workers=1, group_bytes=0)
    return store.data_dir, run.id


def store_copy(three_ranks_ingested, tmp_path) -> tuple[RunStore, str]:
    """A store of the test's own holding a copy of ``three_ranks_ingested``; ``(store, run id)``."""
    data, run_id = three_ranks_ingested
    shutil.copytree(data, tmp_path / "data")
    return RunStore(tmp_path / "data"), run_id


@pytest.fixture()
def half_way(three_ranks_ingested, tmp_path):
    """A run whose rank 2 is still ingesting, served by an app; yields (client, store, run id)."""
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    store, run_id = store_copy(three_ranks_ingested, tmp_path)
    pin(store.run_dir(run_id), [2])
    store.set_status(run_id, "ingesting", progress={"phase": "reading", "text": "reading rank 2", "percent": 40.0,
                                                    "eta_s": 12.0})
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)))) as client:
        yield client, store, run_id


def test_a_run_is_served_for_its_ready_ranks_while_another_ingests(half_way):
    client, store, run_id = half_way
    run = client.get(f"/api/runs/{run_id}").json()
    assert run["status"] == "ingesting" and run["servable"] is True
    assert run["ranks_state"] == {"ready": 2, "pending": 1, "failed": 0, "total": 3, "pending_ranks": [2]}
    assert run["pending_ranks"] == [2] and [r["rank"] for r in run["ranks"]] == [0, 1, 2]
    tracks = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
    assert tracks["loaded_ranks"] == [0, 1] and {t["rank"] for t in tracks["tracks"]} == {0, 1}
    # the small files' views already cover every rank
    summary = client.get(f"/api/runs/{run_id}/summary").json()
    assert {r["rank"] for r in summary["breakdown"]} >= {0, 1, 2}
    assert client.get(f"/api/runs/{run_id}/cluster/overview").json()["rank_count"] == 3
    listed = next(r for r in client.get("/api/runs").json()["runs"] if r["id"] == run_id)
    assert listed["servable"] and listed["ranks_state"]["ready"] == 2
    # its pages render the views (not the "ingesting" placeholder) with the ingest banner
    html = client.get(f"/runs/{run_id}/timeline").text
    assert 'id="run-ingesting"' in html and 'id="timeline"' in html and "/js/common/ingest.js" in html


def test_asking_for_a_pending_rank_moves_it_to_the_front(half_way):
    client, store, run_id = half_way
    assert store.wanted_ranks(run_id) == []
    assert client.get(f"/api/runs/{run_id}/timeline/tracks", params={"rank": 0}).status_code == 200
    assert store.wanted_ranks(run_id) == []  # rank 0 is loaded: nothing to move
    client.get(f"/api/runs/{run_id}/timeline/tracks", params={"ranks": "2"})
    assert store.wanted_ranks(run_id) == [2]
    client.get(f"/runs/{run_id}/summary", params={"rank": 2})  # a page opened on a pending rank asks too
    assert store.wanted_ranks(run_id) == [2]


def test_nothing_cached_is_served_once_a_rank_appears(half_way):
    client, store, run_id = half_way
    before = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
    assert before["loaded_ranks"] == [0, 1]
    pin(store.run_dir(run_id), [])  # rank 2's shard is published
    after = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
    assert after["loaded_ranks"] == [0, 1, 2] and {t["rank"] for t in after["tracks"]} == {0, 1, 2}
    track = max((t for t in after["tracks"] if t["rank"] == 2), key=lambda t: t["slice_count"])
    got = client.get(f"/api/runs/{run_id}/timeline/slices", params={"track_id": track["track_id"], "width_px": 800})
    assert got.status_code == 200 and got.json()["tracks"][0]["count"] > 0
    assert client.get(f"/api/runs/{run_id}").json()["pending_ranks"] == []


def test_a_run_with_no_shard_ready_yet_answers_empty(three_ranks_ingested, tmp_path):
    """Right after the small files: every table exists (empty where only shards have rows)."""
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    store, run_id = store_copy(three_ranks_ingested, tmp_path)
    pin(store.run_dir(run_id), [0, 1, 2])
    store.set_status(run_id, "ingesting")
    with TestClient(create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)))) as client:
        tracks = client.get(f"/api/runs/{run_id}/timeline/tracks").json()
        assert tracks["tracks"] == [] and tracks["loaded_ranks"] == []
        assert client.get(f"/api/runs/{run_id}/operators").status_code == 200
        comm = client.get(f"/api/runs/{run_id}/communication").json()
        assert comm  # the communication files of every rank are read already
        assert client.get(f"/api/runs/{run_id}/cluster/overview").json()["rank_count"] == 3


# --- the real worker ----------------------------------------------------------------------------------------------

@contextmanager
def queue_on(store, retries: int = 1, **options):
    from ascendscope.server.worker import IngestQueue

    queue = IngestQueue(store, workers=1, retries=retries, ingest_options={"group_bytes": 0, **options}
                        ).start(resume=True)
    try:
        yield queue
    finally:
        queue.stop()


@pytest.fixture(scope="module")
def uneven(tmp_path_factory) -> Path:
    """Six ranks: five small, then one whose trace takes a few seconds more than theirs."""
    root = tmp_path_factory.mktemp("uneven")
    generate_run(root / "small", ranks=6, steps=2, ops_per_step=60, seed=5)
    generate_run(root / "big", ranks=6, steps=4, ops_per_step=6000, seed=5)
    src = root / "run"
    src.mkdir()
    for r in range(6):
        shutil.copytree(root / ("big" if r == 5 else "small") / f"rank{r}_ascend_pt", src / f"rank{r}_ascend_pt")
    return src


def _manifest(store, run_id):
    try:
        return read_manifest(store.run_dir(run_id))
    except (OSError, ValueError):
        return None


def test_a_rank_is_browsable_while_another_still_ingests_and_a_killed_worker_resumes(uneven, tmp_path):
    """One ingest of the uneven run serves both checks: rank 0 is browsable while rank 5's shard is still being
    written; then the ingest worker is SIGKILLed (its pool dies with it) once some shards are published, and the
    next attempt keeps those files as they are and writes only the others."""
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    store = RunStore(tmp_path / "data")
    run = store.create_run("uneven", str(uneven))
    run_dir = store.run_dir(run.id)
    with queue_on(store, retries=1) as queue, TestClient(create_app(
            Settings.from_env(environ={}, data_dir=str(store.data_dir)), store=store, ingest_queue=queue)) as client:
        queue.enqueue(run.id)
        # rank 0's shard is published while rank 5's is still being written
        wait(lambda: (m := _manifest(store, run.id)) and m["shards"][5]["status"] == "pending"
             and 0 in [r for e in m["shards"] if e["status"] == "ready" for r in e["ranks"]], 300)
        # the tracks first, then the run's state: a rank only ever goes from pending to loaded, so a rank the
        # tracks call loaded can no longer be pending a moment later (the other order raced rank 5 finishing)
        tracks = client.get(f"/api/runs/{run.id}/timeline/tracks", params={"rank": 0}).json()
        body = client.get(f"/api/runs/{run.id}").json()
        if body["status"] == "ingesting":  # (a very fast machine may have finished meanwhile)
            assert 0 not in body["pending_ranks"] and body["ranks_state"]["ready"] >= 1
            assert 0 in tracks["loaded_ranks"] and any(t["rank"] == 0 and t["slice_count"] for t in tracks["tracks"])
            pending = set(body["pending_ranks"])
            assert not pending & set(tracks["loaded_ranks"])
        # now the kill, with rank 5's shard still being written (it takes seconds longer than the others)
        pid = store.get(run.id).worker_pid
        manifest = _manifest(store, run.id)
        assert manifest["shards"][5]["status"] == "pending", manifest
        kept = {e["file"]: (run_dir / e["file"]).stat() for e in manifest["shards"] if e["status"] == "ready"}
        os.kill(pid, signal.SIGKILL)
        assert queue.wait_idle(300)
    done = store.get(run.id)
    assert done.status == "ready", done.error
    assert done.attempts == 2
    manifest = read_manifest(run_dir)
    assert manifest["status"] == "complete" and all(e["status"] == "ready" for e in manifest["shards"])
    for file, before in kept.items():
        after = (run_dir / file).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), file
    log = (run_dir / "ingest.log").read_text()
    assert "killed by SIGKILL" in log
    kept_line = [line for line in log.splitlines() if "finished by an earlier attempt were kept" in line]
    assert kept_line and int(kept_line[-1].split(" shard(s)")[0].rsplit(" ", 1)[-1]) >= len(kept)
    assert not [p for p in run_dir.rglob("*") if ".tmp-" in p.name]


def test_the_rank_a_user_opens_jumps_the_queue(tmp_path):
    """Eight equal ranks, one task at a time: rank 7, asked for through the page as soon as the run opens, is not
    loaded last (it would be in rank order)."""
    src = tmp_path / "src"
    generate_run(src, ranks=8, steps=2, ops_per_step=400, seed=8)
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    store = RunStore(tmp_path / "data")
    run = store.create_run("eight", str(src))
    with queue_on(store, workers=1) as queue, TestClient(create_app(
            Settings.from_env(environ={}, data_dir=str(store.data_dir)), store=store, ingest_queue=queue)) as client:
        queue.enqueue(run.id)
        wait(lambda: store.servable(store.get(run.id)) or store.get(run.id).status == "ready", 300)
        page = client.get(f"/runs/{run.id}/timeline", params={"rank": 7})
        assert page.status_code == 200
        assert queue.wait_idle(300)
    assert store.get(run.id).status == "ready"
    finished = {e["ranks"][0]: e["finished"] for e in read_manifest(store.run_dir(run.id))["shards"]}
    assert finished[7] < max(finished[r] for r in range(7)), finished
    assert not (store.run_dir(run.id) / "wanted.json").exists()


def test_temp_files_of_killed_tasks_are_swept(three_ranks, three_ranks_ingested, tmp_path):
    """#19: a pool worker killed mid-shard leaves its temp file (~90 MB) beside a run that still becomes ready;
    the end of an ingest, and a server start, sweep them."""
    out = tmp_path / "run"
    planted = []

    def plant():  # asked between task submissions, while the ingest runs: a temp file appears meanwhile
        (out / "shards").mkdir(parents=True, exist_ok=True)
        for name in ("rank_00001.duckdb.tmp-999999-1", "rank_00001.duckdb.tmp-999999-1.wal"):
            (out / "shards" / name).write_bytes(b"x" * 1000)
            planted.append(name)
        return []

    ingest_sharded(three_ranks, out, workers=1, group_bytes=0, wanted=plant)
    assert planted and not list((out / "shards").glob("*.tmp-*"))
    # a ready run in a store, with what a killed worker left: swept when a server starts
    store, run_id = store_copy(three_ranks_ingested, tmp_path)
    store.set_status(run_id, "ready")
    stray = store.run_dir(run_id) / "shards" / "rank_00002.duckdb.tmp-4242-7"
    stray.write_bytes(b"x" * 1000)
    (store.run_dir(run_id) / "cluster.duckdb.tmp-4242-7").write_bytes(b"x")
    store.sweep()
    assert not stray.exists() and not list(store.run_dir(run_id).glob("*.tmp-*"))
    assert (store.run_dir(run_id) / "manifest.json").is_file()


def test_a_killed_server_resumes_without_redoing_finished_shards(tmp_path):
    """``ascendscope serve`` SIGKILLed with its whole process group (server, ingest worker, pool) once some shards
    are published: the next ``serve`` of the same data dir finishes the run, keeping those files as they are."""
    from ascendscope.sample_data.generate import ops_for_target_mb
    from tests.server.test_cli_serve import ONE_PROCESS, start_serve, stop, wait_for

    src = tmp_path / "src"  # three ranks of ~19 MB: two would pass GROUP_BYTES, so each is a shard of its own
    generate_run(src, ranks=3, steps=2, ops_per_step=ops_for_target_mb(20, seed=6), seed=6)
    data = tmp_path / "data"
    proc, _ = start_serve(data, src, new_session=True, flags=ONE_PROCESS)
    try:
        run_dir = wait_for(lambda: next(iter((data / "runs").glob("*/manifest.json")), None), 300, proc=proc).parent
        manifest = wait_for(lambda: _half_done(run_dir), 300, 0.05, proc=proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    kept = {e["file"]: (run_dir / e["file"]).stat() for e in manifest["shards"] if e["status"] == "ready"}
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ingesting"  # as the dead server left it

    proc, base = start_serve(data, src, new_session=True, flags=ONE_PROCESS)
    try:
        (run,) = wait_for(lambda: [r for r in httpx.get(f"{base}/api/runs", timeout=5).json()["runs"]
                                   if r["status"] in ("ready", "failed")], 300, proc=proc)
    finally:
        stop(proc)
    assert run["status"] == "ready", run
    for file, before in kept.items():
        after = (run_dir / file).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), file
    log = (run_dir / "ingest.log").read_text()
    assert "interrupted" in log and "finished by an earlier attempt were kept" in log
    assert not [p for p in run_dir.rglob("*") if ".tmp-" in p.name]


def _half_done(run_dir: Path) -> dict | None:
    """The run's manifest once some of its three shards are ready and some still pending, else None."""
    try:
        manifest = read_manifest(run_dir)
    except (OSError, ValueError):
        return None
    states = {e["status"] for e in manifest["shards"]}
    return manifest if len(manifest["shards"]) == 3 and {"ready", "pending"} <= states else None
