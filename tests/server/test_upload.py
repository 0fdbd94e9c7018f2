"""Uploading zipped runs through ``POST /api/runs``: the real samples (zip and tar.gz, concurrently) end up ready and
open; every hostile archive is refused with its 4xx and leaves nothing behind; rename and delete; the archive
checks that work while streaming. One live server (with its ingest queue) serves the whole module."""

from __future__ import annotations

import http.client
import os
import shutil
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from ascendscope.server.runs import INDEX_DIR
from tests.archives import hostile_archives, nested_once, outside_targets, tar_gz_folder, zip_folder
from tests.conftest import PYTORCH_TEXT, REAL_SAMPLES, ingesting_server, needs_samples
from tests.server.test_cli_serve import wait_for

pytestmark = needs_samples

MAX_MEMBERS = 500
MAX_EXTRACTED_MB = 10
MAX_UPLOAD_MB = 20
SAMPLES = {  # name -> (folder, ranks)
    "level1": (PYTORCH_TEXT / "level1", 2),
    "level0": (PYTORCH_TEXT / "level0", 2),
    "st4": (REAL_SAMPLES / "msinsight_st_4rank_2025q4", 4),
}
RUN_FILES = {"run.json", "run.duckdb", "manifest.json", "cluster.duckdb", "shards", "ingest.log", ".run.lock",
             ".ingest.lock", "upload.archive", INDEX_DIR}  # the archive is kept for Retry (kept_uploads_mb); the
# index files appear once the worker writes them ahead (server.prewarm), after the run is ready


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("upload-data")
    with ingesting_server(data_dir, max_archive_members=MAX_MEMBERS, max_extracted_mb=MAX_EXTRACTED_MB,
                          max_upload_mb=MAX_UPLOAD_MB, ingest_workers=3) as (base, store, queue):
        yield base, store, queue


def post(base: str, filename: str, data: bytes, **fields) -> httpx.Response:
    return httpx.post(f"{base}/api/runs", files={"file": (filename, data, "application/octet-stream")},
                      data=fields or None, timeout=60)


def wait_done(base: str, run_id: str, timeout_s: float = 60) -> dict:
    return wait_for(lambda: (r := httpx.get(f"{base}/api/runs/{run_id}", timeout=5).json())["status"]
                    in ("ready", "failed") and r, timeout_s=timeout_s, every_s=0.1)


def snapshot(root: Path) -> set[str]:
    """Every file and folder under the data dir but the runs' index files: a cache, written by the servers and by
    an earlier run's ingest worker (server.prewarm) whenever they get to it."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if INDEX_DIR not in p.relative_to(root).parts[2:3]}


def test_real_samples_upload_concurrently_and_open(server):
    base, store, _ = server
    archives = {"level1": ("level1.zip", zip_folder(SAMPLES["level1"][0])),
                "level0": ("level0.tar.gz", tar_gz_folder(SAMPLES["level0"][0])),
                "st4": ("st4.zip", zip_folder(SAMPLES["st4"][0]))}
    with ThreadPoolExecutor(3) as pool:  # three uploads at once
        answers = dict(zip(archives, pool.map(lambda a: post(base, *a), archives.values())))
    for name, resp in answers.items():
        assert resp.status_code == 202, resp.text
        body = resp.json()
        assert body["status"] == "queued" and body["origin"] == "upload" and body["name"] == name
        assert resp.headers["location"] == f"/api/runs/{body['id']}"
    for name, resp in answers.items():
        run_id = resp.json()["id"]
        run = wait_done(base, run_id)
        assert run["status"] == "ready", run
        assert [r["rank"] for r in run["ranks"]] == list(range(SAMPLES[name][1]))
        assert run["rank_count"] == SAMPLES[name][1] and run["size"] > 0 and run["progress"] is None
        listed = {r["id"]: r for r in httpx.get(f"{base}/api/runs").json()["runs"]}
        assert listed[run_id]["rank_count"] == SAMPLES[name][1]
        page = httpx.get(f"{base}/runs/{run_id}/timeline")
        assert page.status_code == 200 and 'id="timeline"' in page.text
        # the extracted upload is gone once the database holds the run
        assert {p.name for p in store.run_dir(run_id).iterdir()} <= RUN_FILES
    summary = httpx.get(f"{base}/api/runs/{answers['level1'].json()['id']}/summary").json()
    assert summary["base"]["source_path"] == "uploaded level1.zip"


def test_an_archive_inside_the_archive_is_extracted_once_and_the_same_bytes_again_answer_its_run(server):
    """One upload serves both checks: an archive holding an archive is extracted one level deep (the run ends
    ready with the inner run's ranks), and the same bytes uploaded again answer that run, whatever their name;
    other bytes make a new run."""
    base, store, _ = server
    data = nested_once("level1.zip", zip_folder(SAMPLES["level1"][0]))
    first = post(base, "bundle.zip", data, name="nested run")
    assert first.status_code == 202, first.text
    assert first.json()["upload"]["nested"] == ["level1.zip"] and first.json()["name"] == "nested run"
    folders = set(os.listdir(store.runs_dir))
    again = post(base, "bundle (copy).zip", data, name="another name")  # maybe still queued: no matter
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["id"] == first.json()["id"] and again.json()["name"] == "nested run"
    assert again.headers["location"] == f"/api/runs/{first.json()['id']}"
    run = wait_done(base, first.json()["id"])
    assert run["status"] == "ready" and run["rank_count"] == 2
    after_ready = post(base, "bundle.zip", data)
    assert after_ready.status_code == 200 and after_ready.json()["id"] == first.json()["id"]
    assert after_ready.json()["status"] == "ready"
    names = [r["name"] for r in httpx.get(f"{base}/api/runs").json()["runs"]]
    assert names.count("nested run") == 1 and "another name" not in names
    assert set(os.listdir(store.runs_dir)) == folders  # no second run, no staging folder left
    other = post(base, "bundle.zip", data + b"\0")  # other bytes (a zip tolerates trailing data): a new run
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]
    # done before the next tests, whose snapshots of the data dir must not see its ingest still writing
    assert wait_done(base, other.json()["id"])["status"] == "ready"


@pytest.mark.parametrize("case", hostile_archives(max_members=MAX_MEMBERS,
                                                  max_extracted_bytes=MAX_EXTRACTED_MB * 1_000_000),
                         ids=lambda c: c.name)
def test_hostile_archives_are_refused_and_leave_nothing(server, case):
    base, store, _ = server
    before = snapshot(store.data_dir)
    resp = post(base, case.filename, case.data)
    assert resp.status_code == case.status, resp.text
    error = resp.json()["error"]
    assert error["code"] == case.code and error["status"] == case.status and case.filename in error["message"]
    assert snapshot(store.data_dir) == before  # no run folder, no staging folder, no temp file
    assert not any(p.exists() for p in outside_targets(store.data_dir))
    assert httpx.get(f"{base}/api/health").json()["status"] == "ok"


def test_bad_requests_are_refused(server):
    base, store, _ = server
    before = snapshot(store.data_dir)
    not_form = httpx.post(f"{base}/api/runs", content=b"PK\x03\x04", headers={"content-type": "application/zip"})
    assert not_form.status_code == 415 and not_form.json()["error"]["code"] == "not_multipart"
    no_file = httpx.post(f"{base}/api/runs", data={"name": "x"}, files={"other": ("a.txt", b"x")})
    assert no_file.status_code == 422 and no_file.json()["error"]["code"] == "missing_file"
    too_big = post(base, "huge.zip", bytes(MAX_UPLOAD_MB * 1_000_000 + 1))  # caught while streaming
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "upload_too_large"
    conn = http.client.HTTPConnection(urlsplit(base).netloc, timeout=10)  # caught from Content-Length alone
    conn.putrequest("POST", "/api/runs")
    conn.putheader("Content-Type", "multipart/form-data; boundary=x")
    conn.putheader("Content-Length", str(10**12))
    conn.endheaders()
    declared = conn.getresponse()
    assert declared.status == 413 and b"upload_too_large" in declared.read()
    conn.close()
    assert snapshot(store.data_dir) == before
    assert httpx.get(f"{base}/api/runs").status_code == 200


def test_rename_and_delete(server, level1_db):
    base, store, _ = server
    run_id = store.create_run("to rename", str(SAMPLES["level1"][0])).id
    shutil.copy(level1_db, store.db_path(run_id))
    store.set_status(run_id, "ready")
    renamed = httpx.patch(f"{base}/api/runs/{run_id}", json={"name": "  my\trun  "})
    assert renamed.status_code == 200 and renamed.json()["name"] == "my run" and renamed.json()["id"] == run_id
    assert httpx.get(f"{base}/api/runs/{run_id}").json()["name"] == "my run"
    assert httpx.patch(f"{base}/api/runs/{run_id}", json={"name": "   "}).status_code == 422
    assert httpx.patch(f"{base}/api/runs/{run_id}", json={}).status_code == 422
    gone = httpx.delete(f"{base}/api/runs/{run_id}")
    assert gone.status_code == 204 and not store.run_dir(run_id).exists()
    assert httpx.get(f"{base}/api/runs/{run_id}").status_code == 404
    assert httpx.delete(f"{base}/api/runs/{run_id}").status_code == 404
    assert run_id not in {r["id"] for r in httpx.get(f"{base}/api/runs").json()["runs"]}


def test_openapi_documents_the_runs_api(server):
    base, _, _ = server
    paths = httpx.get(f"{base}/openapi.json").json()["paths"]
    assert {"get", "post"} <= set(paths["/api/runs"])
    assert {"get", "patch", "delete"} <= set(paths["/api/runs/{run_id}"])
    body = paths["/api/runs"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert body["required"] == ["file"] and body["properties"]["file"]["format"] == "binary"
    assert {"202", "403", "413", "415", "422"} <= set(paths["/api/runs"]["post"]["responses"])
    assert "/api/health" in paths


# -- the archive rules themselves (ingest.archive), where a server round trip adds nothing -----------------------
def test_member_sizes_are_checked_while_streaming(tmp_path):
    """A member whose expansion stays under the whole-archive budget but not under its own ratio cap."""
    from ascendscope.ingest.archive import ArchiveError, Limits, unpack

    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("random.bin"), os.urandom(1 << 20))  # stored: ratio 1
        zf.writestr("zeros.bin", bytes(3 << 20), compress_type=zipfile.ZIP_DEFLATED)  # ratio ~1000
    with pytest.raises(ArchiveError, match="zeros.bin.*compressed size") as err:
        unpack(path, tmp_path / "out", Limits(max_ratio=10, max_total_bytes=1 << 30))
    assert err.value.kind == "too_large" and not (tmp_path / "out").exists()


def test_unpack_writes_only_regular_files_inside(tmp_path):
    from ascendscope.ingest.archive import unpack

    path = tmp_path / "ok.tar.gz"
    path.write_bytes(tar_gz_folder(SAMPLES["level1"][0]))
    result = unpack(path, tmp_path / "out")
    files = [p for p in (tmp_path / "out").rglob("*") if not p.is_dir()]
    assert result.members == len(files) > 0 and all(p.is_file() and not p.is_symlink() for p in files)
    assert result.bytes_written == sum(p.stat().st_size for p in files)
