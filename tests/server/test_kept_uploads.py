"""An uploaded run stays retryable: its archive is kept (within ``kept_uploads_mb``, oldest removed first) after the
extracted files are ingested and removed, so a run whose database is damaged — or was made by an older version —
is ingested again from it by Retry."""

from __future__ import annotations

import pytest

from tests.archives import zip_folder
from tests.conftest import PYTORCH_TEXT
from tests.server.test_run_lifecycle import make_app


@pytest.fixture()
def app_with_queue(tmp_path, request):
    from ascendscope.server.runs import RunStore
    from ascendscope.server.worker import IngestQueue

    store = RunStore(tmp_path / "data")
    queue = IngestQueue(store).start()
    try:
        with make_app(store.data_dir, store, queue, **getattr(request, "param", {})) as client:
            yield store, queue, client
    finally:
        queue.stop()


def upload(client, queue, name: str, data: bytes) -> str:
    answer = client.post("/api/runs", files={"file": (name, data, "application/zip")})
    assert answer.status_code in (200, 202), answer.text
    assert queue.wait_idle(240)
    return answer.json()["id"]


def damage(store, run_id: str) -> None:
    store.db_path(run_id).write_bytes(b"\0" * 50_000)


def test_a_damaged_uploaded_run_is_ingested_again_from_its_kept_archive(app_with_queue):
    from ascendscope.server.runs import SOURCE_DIR, UPLOAD_ARCHIVE

    store, queue, client = app_with_queue
    data = zip_folder(PYTORCH_TEXT / "level0")
    run_id = upload(client, queue, "level0.zip", data)
    folder = store.run_dir(run_id)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "ready"
    assert not (folder / SOURCE_DIR).exists() and (folder / UPLOAD_ARCHIVE).read_bytes() == data
    damage(store, run_id)
    assert client.get(f"/api/runs/{run_id}/summary").json()["error"]["code"] == "run_damaged"
    error = client.get(f"/api/runs/{run_id}").json()["error"]
    assert "Retry" in error and "upload the archive again" not in error
    assert client.post(f"/api/runs/{run_id}/retry").status_code == 202
    assert queue.wait_idle(240)
    again = client.get(f"/api/runs/{run_id}").json()
    assert again["status"] == "ready" and again["rank_count"] == 2
    assert client.get(f"/api/runs/{run_id}/summary").status_code == 200
    assert "extracted again" in client.get(f"/api/runs/{run_id}/log").json()["text"]


@pytest.mark.parametrize("app_with_queue", [{"kept_uploads_mb": 0}], indirect=True)
def test_without_a_kept_archive_retry_asks_for_the_upload(app_with_queue):
    from ascendscope.server.runs import UPLOAD_ARCHIVE

    store, queue, client = app_with_queue
    run_id = upload(client, queue, "level0.zip", zip_folder(PYTORCH_TEXT / "level0"))
    assert not (store.run_dir(run_id) / UPLOAD_ARCHIVE).exists()
    damage(store, run_id)
    assert client.get(f"/api/runs/{run_id}/summary").json()["error"]["code"] == "run_damaged"
    refused = client.post(f"/api/runs/{run_id}/retry")
    assert refused.status_code == 409 and "upload the archive again" in refused.json()["error"]["message"]


def test_the_oldest_kept_archives_go_first(tmp_path):
    from ascendscope.server.runs import UPLOAD_ARCHIVE, RunStore

    store = RunStore(tmp_path)
    ids = []
    for i in range(3):
        run = store.create_run(f"r{i}", f"r{i}.zip")
        store.update(run.id, origin="upload", created=1000.0 + i)
        (store.run_dir(run.id) / UPLOAD_ARCHIVE).write_bytes(b"x" * 400)
        ids.append(run.id)
    assert store.trim_kept_uploads(1000) == [ids[0]]  # the two newest fit in 1000 bytes
    assert [(store.run_dir(i) / UPLOAD_ARCHIVE).exists() for i in ids] == [False, True, True]
    assert store.can_restore_upload(ids[1]) and not store.can_restore_upload(ids[0])
