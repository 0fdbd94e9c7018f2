"""``ascendscope serve`` / ``ingest`` end to end (subprocesses), and the run store's states across restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import PYTORCH_TEXT, free_port, needs_samples

pytestmark = needs_samples
LEVEL1 = PYTORCH_TEXT / "level1"
# one server process answering on its threads, for the tests about what serve does with runs (ingest, resume,
# sources), which ask no viewport of a query process: each of those is an interpreter importing the app (the
# default starts one per core); test_queryprocs.py and test_multiprocess.py test them, and the first serve below
# and the Ctrl+C test run the default
ONE_PROCESS = ("--workers", "1", "--query-processes", "0")


def start_serve(data_dir: Path, *paths: Path, new_session: bool = False,
                flags: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """``ascendscope serve`` in a subprocess (in a process group of its own with ``new_session``, as a shell runs
    a command: a terminal's Ctrl+C then reaches it, its fork server and its workers, and nothing else)."""
    port = free_port()
    env = {**os.environ, "ASCENDSCOPE_DATA_DIR": str(data_dir / "ignored-by-flag")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ascendscope.server.cli", "serve", *map(str, paths), "--no-browser", "--port", str(port),
         "--data-dir", str(data_dir), "--log-level", "warning", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        cwd=Path(__file__).resolve().parents[2], start_new_session=new_session)
    return proc, f"http://127.0.0.1:{port}"


def wait_for(fn, timeout_s=90.0, every_s=0.2, proc: subprocess.Popen | None = None):
    """``fn()``'s first truthy value within ``timeout_s`` (HTTP errors count as not yet); fails early when
    ``proc`` (a server) has exited."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            last = fn()
            if last:
                return last
        except httpx.HTTPError:
            pass
        time.sleep(every_s)
    raise AssertionError(f"timed out; last value {last!r}")


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.stdout.read() if proc.stdout else ""


def test_serve_ingests_a_path_and_serves_it(tmp_path):
    proc, base = start_serve(tmp_path, LEVEL1)
    try:
        runs = wait_for(lambda: [r for r in httpx.get(f"{base}/api/runs", timeout=5).json()["runs"]
                                 if r["status"] in ("ready", "failed")])
        (run,) = runs
        assert run["status"] == "ready", run
        assert run["source"] == str(LEVEL1.resolve()) and run["size"] > 0
        tracks = httpx.get(f"{base}/api/runs/{run['id']}/timeline/tracks", timeout=10).json()
        assert tracks["ranks"] == [0, 1]
        page = httpx.get(f"{base}/runs/{run['id']}/timeline", timeout=10)
        assert page.status_code == 200 and 'id="timeline"' in page.text
    finally:
        output = stop(proc)
    record = json.loads((tmp_path / "runs" / run["id"] / "run.json").read_text())
    assert record["status"] == "ready" and (tmp_path / "runs" / run["id"] / "manifest.json").exists()
    assert record["summary"]["ranks"] == [0, 1]
    assert "ascendscope is serving" in output

    # a second serve of the unchanged source reuses the run instead of ingesting again
    proc, base = start_serve(tmp_path, LEVEL1, flags=ONE_PROCESS)
    try:
        wait_for(lambda: httpx.get(f"{base}/api/runs", timeout=5).json()["count"] >= 1)
        again = httpx.get(f"{base}/api/runs", timeout=5).json()["runs"]
        assert [r["id"] for r in again] == [run["id"]] and again[0]["status"] == "ready"
    finally:
        stop(proc)


def test_ingest_subcommand(tmp_path):
    out = tmp_path / "x.duckdb"
    done = subprocess.run([sys.executable, "-m", "ascendscope.server.cli", "ingest", str(LEVEL1), "--out", str(out),
                           "--quiet"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert out.exists() and ": 2 rank(s), " in done.stdout and len(done.stdout.splitlines()) == 1  # --quiet: a line


def test_store_states_survive_a_restart(tmp_path):
    from ascendscope.server.runs import RunStore
    from ascendscope.server.worker import IngestQueue

    store = RunStore(tmp_path)
    run = store.create_run_from_path(LEVEL1)
    assert run.status == "queued" and store.create_run_from_path(LEVEL1).id == run.id
    store.set_status(run.id, "ingesting")  # as if the server died mid-ingest
    assert [r.id for r in RunStore(tmp_path).pending()] == [run.id]
    queue = IngestQueue(RunStore(tmp_path)).start(resume=True)
    try:
        assert queue.wait_idle(120)
    finally:
        queue.stop()
    again = store.get(run.id)
    assert again.status == "ready" and again.error is None and again.size > 0
    assert store.pending() == []

    bad = store.create_run("broken", str(tmp_path / "missing"))
    queue = IngestQueue(store).start(resume=True)
    try:
        assert queue.wait_idle(60)
    finally:
        queue.stop()
    failed = store.get(bad.id)
    assert failed.status == "failed" and "missing" in failed.error
    with pytest.raises(FileNotFoundError):
        store.create_run_from_path(tmp_path / "nope")


def test_bench_subcommand_reports_a_real_ingest(tmp_path):
    """`ascendscope bench ingest` generates a run, ingests it in a child process and reports what it measured."""
    done = subprocess.run([sys.executable, "-m", "ascendscope.server.cli", "bench", "ingest", "--trace-mb", "2",
                           "--repeat", "2", "--cache", str(tmp_path)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    truth = json.loads(next(tmp_path.glob("run_*/truth.json")).read_text())
    assert report["events"] == sum(r["total_events"] for r in truth["ranks"]) > 0
    assert report["runs"] == 2 and 0 < report["wall_s"] <= report["wall_s_median"]
    # both rounded (MB/s to 0.1: on a loaded machine a 2 MB ingest can run below 1 MB/s)
    assert report["mb_per_s"] == pytest.approx(report["input_mb"] / report["wall_s"], rel=0.05, abs=0.05)
    assert 50 < report["peak_rss_mb"] < 1500
    assert not list(tmp_path.glob("run_*/bench_*.duckdb"))  # the ingested files are removed


def test_two_sources_of_one_name_get_names_that_tell_them_apart(tmp_path):
    from ascendscope.server.runs import RunStore

    for kind in ("text", "db"):
        (tmp_path / "src" / kind / "level1").mkdir(parents=True)
    store = RunStore(tmp_path / "data")
    first = store.create_run_from_path(tmp_path / "src" / "text" / "level1")
    second = store.create_run_from_path(tmp_path / "src" / "db" / "level1")
    assert (first.name, second.name) == ("level1", "db/level1")
    # the same source again is the same run, under its own name
    assert store.create_run_from_path(tmp_path / "src" / "text" / "level1").id == first.id
