"""The ingest worker host (``server.workerhost``): a worker never runs the caller's ``__main__``, and one that dies
leaves its traceback in its run's ingest.log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "sample_data" / "bundled"

SCRIPT = """\
import os, sys
from ascendscope.server.runs import RunStore
from ascendscope.server.worker import IngestQueue

with open(sys.argv[2], "a") as marks:  # once per time this file runs, in any process
    marks.write(f"{os.getpid()}\\n")
store = RunStore(sys.argv[1])
run = store.create_run_from_path(sys.argv[3])
queue = IngestQueue(store, retries=0).start(resume=False)
queue.enqueue(run.id)
assert queue.wait_idle(600)
queue.stop()
print(store.get(run.id).status, store.get(run.id).error)
"""


def test_a_script_without_a_main_guard_ingests_and_runs_once(tmp_path):
    """The worker (and its ingest pool) is started from our own entry point: the script file is not imported again
    in any process, so a script with no ``if __name__ == "__main__":`` guard ingests."""
    script, marks = tmp_path / "ingest_it.py", tmp_path / "marks.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "data"), str(marks), str(BUNDLED)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ready", "None"], out.stdout + out.stderr[-3000:]
    assert len(marks.read_text().split()) == 1


def test_a_worker_that_dies_before_it_logs_leaves_its_traceback_in_the_runs_log(tmp_path):
    from ascendscope.server.runs import LOG_FILE, RunStore
    from ascendscope.server.worker import IngestQueue

    store = RunStore(tmp_path)
    run = store.create_run_from_path(BUNDLED)
    queue = IngestQueue(store, retries=0)
    queue.ingest_options = "not a mapping"  # the worker fails at its first lines, before it opens its log
    queue.start(resume=False)
    try:
        queue.enqueue(run.id)
        assert queue.wait_idle(300)
    finally:
        queue.stop()
    assert store.get(run.id).status == "failed"
    log = (store.run_dir(run.id) / LOG_FILE).read_text()
    assert "Traceback" in log and "in ingest_worker" in log and "ValueError" in log, log
