"""Uploads that would cost the server before they are refused: the web process never opens an uploaded archive (it
is extracted in a process of its own, ``ingest.unpackproc``, as a Retry's kept archive is), and a zip whose
central directory lists a million entries is refused from its end record, before any entry is read."""

from __future__ import annotations

import tarfile
import zipfile

import httpx
import pytest

from ascendscope.ingest import archive
from ascendscope.sample_data.hostile import many_entries_zip
from ascendscope.server.runs import SOURCE_DIR
from tests.archives import tar_gz_folder, zip_folder
from tests.conftest import PYTORCH_TEXT, ingesting_server, needs_samples
from tests.server.test_upload import snapshot, wait_done

pytestmark = needs_samples


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ingesting_server(tmp_path_factory.mktemp("abuse-data")) as (base, store, queue):
        yield base, store, queue


def test_a_zip_listing_a_million_entries_is_refused_from_its_end_record(server, tmp_path):
    base, store, _ = server
    path = many_entries_zip(tmp_path / "million.zip", 1_000_000)  # 54 MB, every entry the same 1-byte member
    before = snapshot(store.data_dir)
    with open(path, "rb") as fh:
        resp = httpx.post(f"{base}/api/runs", files={"file": ("million.zip", fh)}, timeout=120)
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert error["code"] == "archive_too_large"
    assert "million.zip: refused: the archive lists 1000000 entries: more than 100000 members" in error["message"]
    assert snapshot(store.data_dir) == before


def test_the_web_process_never_opens_an_uploaded_archive(server, monkeypatch):
    """Extraction is made impossible in this process (the server's): uploads of a zip and a tar.gz still become
    ready runs, and so does the Retry of one whose extracted files are gone (its kept archive extracted again)."""
    base, store, _ = server
    uploads = {"level1.zip": zip_folder(PYTORCH_TEXT / "level1"),
               "level0.tar.gz": tar_gz_folder(PYTORCH_TEXT / "level0")}

    def not_here(*args, **kwargs):
        raise AssertionError("an uploaded archive was opened in the web process")

    monkeypatch.setattr(archive, "unpack", not_here)
    monkeypatch.setattr(zipfile.ZipFile, "__init__", not_here)
    monkeypatch.setattr(tarfile, "open", not_here)
    ids = []
    for name, data in uploads.items():  # 202: extracted (elsewhere) and found to hold ranks
        resp = httpx.post(f"{base}/api/runs", files={"file": (name, data)}, timeout=60)
        assert resp.status_code == 202, resp.text
        assert resp.json()["upload"]["members"] > 0 and resp.json()["upload"]["ranks_found"] == 2
        ids.append(resp.json()["id"])
    assert wait_done(base, ids[0])["status"] == "ready"
    assert not (store.run_dir(ids[0]) / SOURCE_DIR).exists()  # the extracted files go once the run is ready
    store.set_status(ids[0], "failed", error="damaged")
    retried = httpx.post(f"{base}/api/runs/{ids[0]}/retry", timeout=60)
    assert retried.status_code == 202, retried.text
    assert (store.run_dir(ids[0]) / SOURCE_DIR).is_dir()  # the kept archive extracted again, elsewhere
    assert "the kept upload archive was extracted again" in store.log_tail(ids[0])[0]
