"""What a run's ingest log shows a client on another machine: no path of the server's Python, ascendscope or home
(a traceback of a failed ingest names them), and after a killed attempt no resource-tracker warning about leaked
semaphores (which named Python's install path): the log says the worker was killed, and its tracker removes them
quietly. Through the API of a live server."""

from __future__ import annotations

import os
import shutil
import signal
import site
import sys
from pathlib import Path

import httpx

from tests.conftest import PYTORCH_TEXT, ingesting_server, needs_samples
from tests.run_helpers import wait
from tests.server.test_storage_failure import big_upload  # noqa: F401 - a fixture

pytestmark = needs_samples
REMOTE = {"x-forwarded-for": "203.0.113.9"}  # as if from another machine, through a proxy


def install_paths() -> list[str]:
    from ascendscope import ingest

    return [p for p in {sys.prefix, sys.base_prefix, str(Path.home()), *site.getsitepackages(),
                        str(Path(ingest.__file__).resolve().parent.parent)} if len(p) > 1]


def remote_log(base: str, run_id: str) -> str:
    return httpx.get(f"{base}/api/runs/{run_id}/log", headers=REMOTE, timeout=10).json()["text"]


def test_a_killed_attempt_leaves_no_tracker_warning(tmp_path, big_upload):  # noqa: F811
    with ingesting_server(tmp_path / "data", ingest_retries=1) as (base, store, _):
        resp = httpx.post(f"{base}/api/runs", files={"file": ("big.zip", big_upload)}, timeout=60)
        run_id = resp.json()["id"]
        shards = store.run_dir(run_id) / "shards"
        # killed once its pool writes a shard: the pool's semaphores exist then
        worker = wait(lambda: (r := store.get(run_id)).worker_pid and list(shards.glob("*.tmp-*")) and r.worker_pid,
                      timeout_s=120, every_s=0.01)
        os.kill(worker, signal.SIGKILL)
        done = wait(lambda: (r := store.get(run_id)).status in ("ready", "failed") and r, timeout_s=180)
        assert done.status == "ready", done.error
        text = remote_log(base, run_id)
    assert f"the ingest worker (pid {worker}) was killed by SIGKILL" in text
    assert "resource_tracker" not in text and "leaked semaphore" not in text, text
    assert not [p for p in install_paths() if p in text], text


def test_a_failed_ingest_names_no_install_path_to_a_remote_client(tmp_path):
    source = tmp_path / "level1"
    shutil.copytree(PYTORCH_TEXT / "level1", source)
    with ingesting_server(tmp_path / "data", start_queue=False) as (base, store, queue):
        run = store.create_run_from_path(source)
        shutil.rmtree(source)  # gone before its ingest starts: the ingest fails with a traceback
        queue.start()
        assert wait(lambda: (r := store.get(run.id)).status in ("ready", "failed") and r).status == "failed"
        text = remote_log(base, run.id)
        local = httpx.get(f"{base}/api/runs/{run.id}/log", timeout=10).json()["text"]
    assert "Traceback" in text and "<ascendscope>/" in text
    assert not [p for p in install_paths() if p in text], text
    assert [p for p in install_paths() if p in local]  # the one who serves sees where
