"""A run database written for another schema version is never served: opening it marks the run failed with the
reason (409 ``run_outdated``), and Retry ingests it again from its source into a database this version reads."""

from __future__ import annotations

import shutil

import duckdb
import pytest
from fastapi.testclient import TestClient

from ascendscope.ingest import SCHEMA_VERSION
from tests.conftest import PYTORCH_TEXT, needs_samples

pytestmark = needs_samples


def with_schema(db, version: str | None) -> None:
    """Rewrite (None: delete) the database's ``meta.schema_version``."""
    con = duckdb.connect(str(db))
    try:
        con.execute("DELETE FROM meta WHERE key = 'schema_version'")
        if version is not None:
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [version])
    finally:
        con.close()


@pytest.fixture()
def served(tmp_path_factory):
    """A store, its ingest queue (started) and a TestClient of the app over both. The data dir's path is short: the
    ingest worker's fork server puts its socket under the run's folder, and a socket path has at most 107 bytes."""
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings
    from ascendscope.server.worker import IngestQueue

    store = RunStore(tmp_path_factory.mktemp("sc"))
    queue = IngestQueue(store).start()
    try:
        app = create_app(Settings.from_env(environ={}, data_dir=str(store.data_dir)), store=store, ingest_queue=queue)
        with TestClient(app) as client:
            yield store, queue, client
    finally:
        queue.stop()


def ready_run(store, db, version: str | None):
    run = store.create_run("level1", str(PYTORCH_TEXT / "level1"))
    shutil.copy(db, store.db_path(run.id))
    with_schema(store.db_path(run.id), version)
    store.set_status(run.id, "ready")
    return run


def test_an_older_schema_fails_the_run_and_retry_reingests_it(served, level1_db):
    store, queue, client = served
    run = ready_run(store, level1_db, str(SCHEMA_VERSION - 1))
    answer = client.get(f"/api/runs/{run.id}/timeline/tracks")
    reason = (f"made by an older ascendscope (schema {SCHEMA_VERSION - 1}; this version reads {SCHEMA_VERSION}): "
              "Retry re-ingests it")
    assert answer.status_code == 409
    assert answer.json()["error"] | {"details": None} == {"code": "run_outdated", "message": reason, "status": 409,
                                                         "details": None}
    failed = client.get(f"/api/runs/{run.id}").json()
    assert failed["status"] == "failed" and failed["error"] == reason
    assert reason in client.get(f"/api/runs/{run.id}/log").json()["text"]

    assert client.post(f"/api/runs/{run.id}/retry").status_code == 202
    assert queue.wait_idle(120)
    assert client.get(f"/api/runs/{run.id}").json()["status"] == "ready"
    tracks = client.get(f"/api/runs/{run.id}/timeline/tracks")
    assert tracks.status_code == 200 and tracks.json()["tracks"]


@pytest.mark.parametrize("version, words", [
    (None, "made by an older ascendscope (schema not recorded; "),
    (str(SCHEMA_VERSION + 1), f"made by a newer ascendscope (schema {SCHEMA_VERSION + 1}; "),
])
def test_a_missing_or_newer_schema_is_refused_too(served, level1_db, version, words):
    store, _, client = served
    run = ready_run(store, level1_db, version)
    answer = client.get(f"/api/runs/{run.id}/operators")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "run_outdated"
    assert answer.json()["error"]["message"].startswith(words)
    assert store.get(run.id).status == "failed"


def test_the_page_of_an_outdated_run_says_it_failed(served, level1_db):
    store, _, client = served
    run = ready_run(store, level1_db, "0")
    page = client.get(f"/runs/{run.id}/timeline")
    assert page.status_code == 200 and "Retry re-ingests it" in page.text
    assert store.get(run.id).status == "failed"


def test_the_current_schema_is_served(served, level1_db):
    store, _, client = served
    run = ready_run(store, level1_db, str(SCHEMA_VERSION))
    assert client.get(f"/api/runs/{run.id}/timeline/tracks").status_code == 200
    assert store.get(run.id).status == "ready"
