"""Storage that fails in the middle of an ingest (the run's folder made immutable, then writable again) does not
leave the run "ingesting" forever: once the folder can be written again the run is failed, with the reason, and
Retry ingests it to ready. All of it through the API of a live server, on an uploaded run."""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.archives import zip_folder
from tests.conftest import ingesting_server, needs_samples
from tests.run_helpers import wait
from tests.server.test_worker import OPS_PER_STEP

pytestmark = needs_samples
CHATTR = shutil.which("chattr")


def _freezer(probe: Path):
    """How this machine makes a folder unwritable: ``chattr -R +i`` (root, on a file system that has the flag),
    else ``chmod`` for a user who is not root; None when neither holds."""
    probe.mkdir()
    if CHATTR and subprocess.run([CHATTR, "+i", str(probe)], capture_output=True).returncode == 0:
        subprocess.run([CHATTR, "-i", str(probe)], check=True)
        return "chattr"
    return "chmod" if os.geteuid() != 0 else None


@contextmanager
def unwritable(folder: Path, how: str):
    if how == "chattr":
        subprocess.run([CHATTR, "-R", "+i", str(folder)], check=True, capture_output=True)
    else:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
    try:
        yield
    finally:
        if how == "chattr":
            subprocess.run([CHATTR, "-R", "-i", str(folder)], check=True, capture_output=True)
        else:
            for path in [folder, *folder.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)


@pytest.fixture(scope="module")
def big_upload(tmp_path_factory) -> bytes:
    from ascendscope.sample_data.generate import generate_run

    path = tmp_path_factory.mktemp("big") / "big_ascend_pt_run"
    generate_run(path, ranks=1, ops_per_step=OPS_PER_STEP)
    return zip_folder(path)


def test_a_run_whose_storage_fails_mid_ingest_fails_and_can_be_retried(tmp_path, big_upload):
    how = _freezer(tmp_path / "probe")
    if how is None:
        pytest.skip("cannot make a folder unwritable here (root without chattr +i)")
    with ingesting_server(tmp_path / "data", ingest_retries=1) as (base, store, queue):
        resp = httpx.post(f"{base}/api/runs", files={"file": ("big.zip", big_upload)}, timeout=60)
        assert resp.status_code == 202, resp.text
        run_id = resp.json()["id"]
        seen = wait(lambda: (r := httpx.get(f"{base}/api/runs/{run_id}").json())["status"] == "ingesting"
                    and (r.get("progress") or {}).get("phase") == "reading" and r)
        with unwritable(store.run_dir(run_id), how):
            assert queue.wait_idle(120)  # the worker gave up, and the queue has seen it exit
            stuck = httpx.get(f"{base}/api/runs/{run_id}").json()
            assert stuck["status"] == "ingesting"  # (nothing can be written meanwhile, not even the outcome)
        remote = {"x-forwarded-for": "203.0.113.9"}  # (a client on another machine: no server path shown)
        failed = wait(lambda: (r := httpx.get(f"{base}/api/runs/{run_id}", headers=remote).json())["status"]
                      == "failed" and r, timeout_s=30)
        assert "the run's folder could not be written" in failed["error"], failed["error"]
        assert str(store.data_dir) not in failed["error"]
        log = httpx.get(f"{base}/api/runs/{run_id}/log").json()["text"]
        assert "could not be written" in log
        retried = httpx.post(f"{base}/api/runs/{run_id}/retry", timeout=60)
        assert retried.status_code == 202, retried.text
        ready = wait(lambda: (r := httpx.get(f"{base}/api/runs/{run_id}").json())["status"] in ("ready", "failed")
                     and r, timeout_s=180)
        assert ready["status"] == "ready", ready
    assert seen["progress"]["percent"] < 90
