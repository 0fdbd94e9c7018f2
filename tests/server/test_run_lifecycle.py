"""A run's life across crashes and damage: a server SIGKILLed mid-ingest and restarted at once still ends with the
run ready (its orphaned worker dies with it; the new server never ingests a run a live process holds); failed runs
are retried from the API; the ingest log says why; a damaged or deleted database answers 4xx, never 500; a run that
loads nothing is not ready; identical uploads open the existing run."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import duckdb
import httpx
import pytest

from ascendscope.ingest.layout import connect
from tests.conftest import PYTORCH_TEXT, needs_samples
from tests.server.test_cli_serve import ONE_PROCESS, start_serve, stop, wait_for
from tests.server.test_worker import wait

pytestmark = needs_samples


@pytest.fixture(scope="module")
def slow_source(tmp_path_factory) -> Path:
    """A generated rank of ~270 MB: its ingest takes 6–7 s here, longer than a server takes to start and to be
    stopped (at ~100 MB, 4 s, a Ctrl+C sent once its ranks were being read could land after it ended)."""
    from ascendscope.sample_data.generate import generate_run

    path = tmp_path_factory.mktemp("slow") / "slow_ascend_pt_run"
    generate_run(path, ranks=1, steps=8, ops_per_step=20_000)
    return path


@pytest.fixture(scope="module")
def kill_source(tmp_path_factory) -> Path:
    """A generated rank of ~55 MB, read for seconds: a SIGKILL sent once it is seen being read lands mid-ingest
    (unlike a Ctrl+C, it needs no time to arrive), and the restarted server ingests it again in a few seconds."""
    from ascendscope.sample_data.generate import generate_run

    path = tmp_path_factory.mktemp("kill") / "kill_ascend_pt_run"
    generate_run(path, ranks=1, steps=8, ops_per_step=4_000)
    return path


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def run_record(data_dir: Path) -> dict:
    """The one run's run.json as it is on disk ({} before the server made it)."""
    folders = [p for p in (data_dir / "runs").glob("*") if not p.name.startswith(".")]
    try:
        return json.loads((folders[0] / "run.json").read_text()) if folders else {}
    except (FileNotFoundError, ValueError):  # between the folder and its first record
        return {}


def test_sigkilled_server_restarted_at_once_still_ends_ready(tmp_path, kill_source):
    proc, base = start_serve(tmp_path, kill_source, flags=ONE_PROCESS)
    try:
        reading = wait_for(lambda: (r := run_record(tmp_path)).get("status") == "ingesting" and r["worker_pid"]
                           and (r.get("progress") or {}).get("phase") == "reading" and r, every_s=0.05)
    except BaseException:
        stop(proc)
        raise
    orphan = reading["worker_pid"]
    proc.kill()  # SIGKILL: no shutdown code runs in the server
    proc.wait(10)
    proc.stdout.close()
    again, base = start_serve(tmp_path, flags=ONE_PROCESS)  # the same data dir, at once
    try:
        done = wait_for(lambda: (r := httpx.get(f"{base}/api/runs/{reading['id']}", timeout=5).json())["status"]
                        in ("ready", "failed") and r, timeout_s=180)
        assert done["status"] == "ready", done
        assert done["rank_count"] == 1 and done["error"] is None
        # the killed server's processes stopped its worker (a shutdown: the attempt is not counted) or died with
        # it (counted); either way the new server's worker made it, not the orphan (checked in the log below)
        assert done["attempts"] in (1, 2)
        assert httpx.get(f"{base}/api/runs/{reading['id']}/timeline/tracks", timeout=10).status_code == 200
    finally:
        stop(again)
    assert not alive(orphan)
    run_dir = tmp_path / "runs" / reading["id"]
    con, _ = connect(run_dir)  # the sharded layout, read as one database
    try:
        slices = con.execute("SELECT count(*) FROM slices").fetchone()[0]
    finally:
        con.close()
    assert slices == sum(run_record(tmp_path)["summary"]["slices_per_kind"].values()) > 0
    log = (run_dir / "ingest.log").read_text()
    assert "Traceback" not in log  # neither attempt failed: the orphan died before it could trip over the new one
    workers = re.findall(r"worker pid (\d+)\)", log)
    assert len(workers) == 2 and int(workers[-1]) != orphan, log
    left = sorted(p.name for p in run_dir.iterdir() if p.name != "index")  # (the index files: written ahead once
    # the run is ready, server.prewarm, unless the server stopped first)
    assert left == [".ingest.lock", ".run.lock", "cluster.duckdb", "ingest.log", "manifest.json", "run.json", "shards"]


def test_ctrl_c_stops_quietly_and_the_interrupted_run_waits_for_the_next_start(tmp_path, slow_source):
    proc, base = start_serve(tmp_path, slow_source, new_session=True)
    try:
        wait_for(lambda: httpx.get(f"{base}/api/health", timeout=5).status_code == 200)
        # (the ranks seen being read just before the Ctrl+C: with the server's start-up waited for in between, a
        # fast machine could finish the ingest before the signal landed)
        reading = wait_for(lambda: (r := run_record(tmp_path)).get("status") == "ingesting" and r["worker_pid"]
                           and (r.get("progress") or {}).get("phase") == "reading" and r)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl+C does: the whole foreground group gets it
        proc.wait(60)
    finally:
        output = stop(proc)
    # 130, or killed by SIGINT (which CPython does when a Ctrl+C landed inside certain imports): a shell shows 130
    assert proc.returncode in (130, -signal.SIGINT), output
    assert "Traceback" not in output and output.rstrip().splitlines()[-1] == "stopped", output
    record = run_record(tmp_path)  # the worker left it to the server, which queued it for the next start
    assert record["status"] == "queued" and record["error"] is None, record
    assert not alive(reading["worker_pid"])


# -- retry and the ingest log ------------------------------------------------------------------------------------
def make_app(data_dir: Path, store=None, queue=None, **settings):
    from fastapi.testclient import TestClient

    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    return TestClient(create_app(Settings.from_env(environ={}, data_dir=str(data_dir), **settings), store=store,
                                 ingest_queue=queue))


@pytest.fixture()
def queued(tmp_path):
    """A store, its running ingest queue and a TestClient of the app over both."""
    from ascendscope.server.runs import RunStore
    from ascendscope.server.worker import IngestQueue

    store = RunStore(tmp_path / "data")
    queue = IngestQueue(store).start()
    try:
        with make_app(store.data_dir, store, queue) as client:
            yield store, queue, client
    finally:
        queue.stop()


def test_a_failed_run_is_retried_and_its_log_says_why(tmp_path, queued):
    import shutil

    store, queue, client = queued
    later = tmp_path / "copied-later"
    run = store.create_run("later", str(later))  # its folder is not there yet: the ingest fails
    queue.enqueue(run.id)
    assert queue.wait_idle(60)
    failed = client.get(f"/api/runs/{run.id}").json()
    assert failed["status"] == "failed" and "no such file or folder" in failed["error"]
    log = client.get(f"/api/runs/{run.id}/log").json()
    assert "Traceback" in log["text"] and "no such file or folder" in log["text"] and not log["truncated"]

    assert client.post(f"/api/runs/{run.id}/retry").json()["error"]["code"] == "source_gone"
    shutil.copytree(PYTORCH_TEXT / "level1", later)
    answer = client.post(f"/api/runs/{run.id}/retry")
    assert answer.status_code == 202 and answer.json()["status"] == "queued" and answer.json()["error"] is None
    assert queue.wait_idle(120)
    ready = client.get(f"/api/runs/{run.id}").json()
    assert ready["status"] == "ready" and ready["rank_count"] == 2 and ready["attempts"] == 1
    again = client.post(f"/api/runs/{run.id}/retry")
    assert again.status_code == 409 and again.json()["error"]["code"] == "run_not_failed"
    assert "retry requested" in client.get(f"/api/runs/{run.id}/log").json()["text"]
    with make_app(store.data_dir, read_only=True) as shared:
        store.set_status(run.id, "failed", error="x")
        assert shared.post(f"/api/runs/{run.id}/retry").status_code == 403
    assert client.post("/api/runs/no-such-run/retry").status_code == 404


def test_the_log_answer_is_bounded(tmp_path):
    from ascendscope.server.runs import MAX_LOG_BYTES, RunStore

    store = RunStore(tmp_path)
    run = store.create_run("chatty", str(tmp_path))
    lines = [f"line {i:06d} " + "x" * 90 for i in range(3 * MAX_LOG_BYTES // 100)]
    (store.run_dir(run.id) / "ingest.log").write_text("\n".join(lines) + "\n")
    with make_app(tmp_path) as client:
        log = client.get(f"/api/runs/{run.id}/log").json()
    assert log["truncated"] and log["size"] > 3 * len(log["text"]) and len(log["text"].encode()) <= MAX_LOG_BYTES
    assert log["text"].startswith("line ") and log["text"].endswith(lines[-1] + "\n")


def test_a_killed_worker_points_at_a_log_that_says_so(tmp_path):
    from ascendscope.server.runs import RunStore
    from ascendscope.server.worker import IngestQueue

    store = RunStore(tmp_path)
    run = store.create_run_from_path(PYTORCH_TEXT / "level1")
    store.update(run.id, attempts=1)  # as if the first attempt had been killed: the next one is the last
    queue = IngestQueue(store, retries=1).start()
    try:
        seen = wait(lambda: (r := store.get(run.id)).worker_pid and r)
        os.kill(seen.worker_pid, signal.SIGKILL)
        failed = wait(lambda: (r := store.get(run.id)).status == "failed" and r)
    finally:
        queue.stop()
    assert "SIGKILL" in failed.error and "ingest log" in failed.error and "ingest.log" in failed.error
    with make_app(tmp_path) as client:
        assert f"(pid {seen.worker_pid}) was killed by SIGKILL" in client.get(f"/api/runs/{run.id}/log").json()["text"]


# -- damaged and deleted databases -------------------------------------------------------------------------------
def ready_copy(store, db: Path, *, name: str = "level1", origin: str = "path"):
    import shutil

    run = store.create_run(name, str(PYTORCH_TEXT / "level1"))
    shutil.copy(db, store.db_path(run.id))
    store.set_status(run.id, "ready", origin=origin)
    return run


def corrupted(db: Path, out: Path, table: str) -> bool:
    """Write ``db`` to ``out`` with one 256 KiB block garbled such that the run still opens but reading ``table``
    fails its checksum; the block is found by trying each, so it does not depend on where DuckDB put the table."""
    from ascendscope.server.db import RunInfo

    data = db.read_bytes()
    for start in range(12288 + 100, len(data) - 64, 262144):
        garbled = bytearray(data)
        garbled[start:start + 64] = bytes(b ^ 0xFF for b in garbled[start:start + 64])
        out.write_bytes(garbled)
        try:
            with duckdb.connect(str(out), read_only=True) as con:
                RunInfo.load(con.cursor())
                try:
                    con.execute(f"SELECT * FROM {table}").fetchall()
                except duckdb.Error as exc:
                    if "Corrupt" in str(exc):
                        return True
        except duckdb.Error:  # this block breaks the opening itself
            continue
    return False


def test_a_damaged_database_fails_its_run_with_409_not_500(tmp_path, level1_db):
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    empty, cut, missing = (ready_copy(store, level1_db) for _ in range(3))
    store.db_path(empty.id).write_bytes(b"")
    data = level1_db.read_bytes()
    store.db_path(cut.id).write_bytes(data[:len(data) // 2])
    store.db_path(missing.id).unlink()
    meta_bad = ready_copy(store, level1_db)
    assert corrupted(level1_db, store.db_path(meta_bad.id), "meta")
    kernels_bad = ready_copy(store, level1_db)
    assert corrupted(level1_db, store.db_path(kernels_bad.id), "kernels")

    with make_app(tmp_path) as client:
        listed = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert listed[empty.id]["status"] == "failed" and "damaged: it is 0 bytes long" in listed[empty.id]["error"]
        assert listed[missing.id]["status"] == "failed" and "the file is missing" in listed[missing.id]["error"]
        assert listed[cut.id]["status"] == "ready"  # a stat cannot tell; opening it does
        for run in (cut, meta_bad):
            answer = client.get(f"/api/runs/{run.id}")
            assert answer.status_code == 409 and answer.json()["error"]["code"] == "run_damaged", answer.text
        answer = client.get(f"/api/runs/{kernels_bad.id}/operators")  # found by the view's own query
        assert answer.status_code == 409 and answer.json()["error"]["code"] == "run_damaged", answer.text
        for run in (empty, cut, missing, meta_bad, kernels_bad):
            record = client.get(f"/api/runs/{run.id}").json()
            assert record["status"] == "failed", record
            assert record["error"].startswith("the database file is damaged: ")
            assert "Retry" in record["error"] and str(tmp_path) not in record["error"]
            tracks = client.get(f"/api/runs/{run.id}/timeline/tracks")
            assert tracks.status_code == 409 and tracks.json()["error"]["code"] == "run_not_ready"
            page = client.get(f"/runs/{run.id}/timeline")
            assert page.status_code == 200 and 'id="run-not-ready" data-status="failed"' in page.text
            assert "damaged" in page.text


def test_a_damaged_run_is_ingested_again_or_asks_for_the_upload(tmp_path, queued, level1_db):
    store, queue, client = queued
    path_run = ready_copy(store, level1_db)
    upload_run = ready_copy(store, level1_db, name="uploaded", origin="upload")
    for run in (path_run, upload_run):
        store.db_path(run.id).write_bytes(b"\0" * 50_000)
        assert client.get(f"/api/runs/{run.id}/summary").json()["error"]["code"] == "run_damaged"
    upload_error = client.get(f"/api/runs/{upload_run.id}").json()["error"]
    assert "upload the archive again" in upload_error
    refused = client.post(f"/api/runs/{upload_run.id}/retry")
    assert refused.status_code == 409 and "upload the archive again" in refused.json()["error"]["message"]
    assert client.post(f"/api/runs/{path_run.id}/retry").status_code == 202
    assert queue.wait_idle(120)
    again = client.get(f"/api/runs/{path_run.id}").json()
    assert again["status"] == "ready" and again["rank_count"] == 2
    assert client.get(f"/api/runs/{path_run.id}/timeline/tracks").status_code == 200


def test_deleting_a_run_while_it_is_viewed_gives_404(tmp_path, level1_db):
    import shutil

    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    api_deleted, folder_removed, db_removed = (ready_copy(store, level1_db) for _ in range(3))
    with make_app(tmp_path) as client:
        for run in (api_deleted, folder_removed, db_removed):  # viewed: connection and run info are cached
            assert client.get(f"/api/runs/{run.id}/timeline/tracks").status_code == 200
            assert client.get(f"/api/runs/{run.id}").status_code == 200
        assert client.delete(f"/api/runs/{api_deleted.id}").status_code == 204
        shutil.rmtree(store.run_dir(folder_removed.id))  # by hand, behind the server's back
        store.db_path(db_removed.id).unlink()
        for run in (api_deleted, folder_removed):
            for path in (f"/api/runs/{run.id}", f"/api/runs/{run.id}/timeline/tracks", f"/api/runs/{run.id}/log",
                         f"/api/runs/{run.id}/operators"):
                assert client.get(path).status_code == 404, path
            assert client.get(f"/runs/{run.id}/timeline").status_code == 404
        gone = client.get(f"/api/runs/{db_removed.id}/timeline/tracks")
        assert gone.status_code == 409 and gone.json()["error"]["code"] == "run_damaged"
        assert "the file is missing" in gone.json()["error"]["message"]


# -- a run that loads nothing ------------------------------------------------------------------------------------
def test_a_run_that_loads_nothing_fails_and_lists_the_warnings(tmp_path):
    from ascendscope.server.runs import RunStore
    from ascendscope.server.worker import IngestQueue

    rank = tmp_path / "src" / "job_ascend_pt"  # a rank folder whose files hold no event and no row
    (rank / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text("[]")
    (rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text("Step Id,Name,Type\n")
    store = RunStore(tmp_path / "data")
    run = store.create_run_from_path(rank)
    queue = IngestQueue(store).start()
    try:
        assert queue.wait_idle(120)
    finally:
        queue.stop()
    failed = store.get(run.id)
    assert failed.status == "failed", failed
    assert failed.error.startswith("nothing to show: no timeline slices, counters or table rows were loaded from "
                                   "1 rank folder(s) — job_ascend_pt: ")  # then the warning about that folder
    assert not store.db_path(run.id).exists() and failed.summary["warning_count"] == 1
    log = store.log_tail(run.id)[0]
    assert "WARNING ascendscope.ingest: job_ascend_pt: " in log and "nothing to show" in log
