"""Progress moves within a rank (issue #17 item 3): a trace reports the bytes done while it loads, not only when it
is done; a shard task in another process keeps its bytes in a small file (``FileProgress``) that the coordinator
reads, its closing steps counting too; and the sharded ingest passes them on while its tasks run."""

from __future__ import annotations

import threading

import pytest

from ascendscope.ingest import pipeline
from ascendscope.ingest.pipeline import FileProgress, Progress, read_done_bytes
from ascendscope.sample_data.generate import generate_run


class Recorder(Progress):
    def __init__(self):
        self.lock = threading.Lock()
        self.events: list[tuple] = []

    def file_progress(self, rank, name, done_bytes):
        with self.lock:
            self.events.append(("progress", name, done_bytes))

    def file_done(self, rank, name, size, seconds):
        with self.lock:
            self.events.append(("done", name, size))


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    src = tmp_path_factory.mktemp("bytes") / "run"
    generate_run(src, ranks=1, steps=2, ops_per_step=300, seed=2)
    return src


def test_a_trace_reports_its_bytes_while_it_loads(one_rank, tmp_path):
    rec = Recorder()
    pipeline.ingest_path(one_rank, tmp_path / "run.duckdb", progress=rec)
    trace = next(e for e in rec.events if e[0] == "done" and e[1].endswith("trace_view.json"))
    size = trace[2]
    before = [e[2] for e in rec.events[:rec.events.index(trace)] if e[0] == "progress" and e[1] == trace[1]]
    inside = [b for b in before if 0 < b < size]
    assert len(set(inside)) >= 5, before  # several steps of the one file, each a count of bytes
    assert before == sorted(before)  # never backwards


def test_a_task_keeps_its_bytes_in_a_file(tmp_path):
    path = tmp_path / "shard.bytes"
    assert read_done_bytes(path) == 0  # nothing said yet
    fp = FileProgress(str(path), total=1000, interval_s=0)
    fp.file_progress(0, "trace_view.json", 400)
    assert read_done_bytes(path) == int(0.85 * 400)  # the files read are 85 % of the task
    fp.file_done(0, "trace_view.json", 600, 1.0)
    fp.file_progress(0, "kernel_details.csv", 200)
    assert read_done_bytes(path) == int(0.85 * 800)
    fp.file_done(0, "kernel_details.csv", 400, 1.0)
    seen = [read_done_bytes(path)]
    for _ in range(FileProgress.CLOSING_STEPS):  # the closing steps move it on to the whole task
        fp.phase("writing")
        seen.append(read_done_bytes(path))
    assert seen == sorted(seen) and len(set(seen)) == len(seen) and seen[-1] == 1000
    path.write_text("garbage")
    assert read_done_bytes(path) == 0


def test_the_sharded_ingest_passes_on_the_bytes_of_running_tasks(one_rank, tmp_path, monkeypatch):
    """The coordinator reads the task's byte file while it runs (made to run for a while here: the file says 300
    bytes, then the task ends)."""
    from ascendscope.ingest import shards

    rec = Recorder()
    real = pipeline.read_done_bytes
    asked = []

    def slow_read(path):  # what the running task wrote, as seen each time the coordinator looks
        asked.append(path)
        return real(path) or 300

    monkeypatch.setattr(shards.pipeline, "read_done_bytes", slow_read)
    # the task would start beside the small files and may end before the coordinator first looks: here it starts
    # when the coordinator's loop first polls, so that loop sees it run
    real_make = shards.make_executor

    def make(*args, **kwargs):
        runner = real_make(*args, **kwargs)
        start = runner.start

        def start_on_first_poll(fn, calls, order=None):
            batch = start(fn, calls, order)
            fill, skip = batch.fill, [True]
            batch.fill = lambda: skip.pop() if skip else fill()
            return batch

        runner.start = start_on_first_poll
        return runner

    monkeypatch.setattr(shards, "make_executor", make)
    # and looks often: a small rank's task can end within one default poll (it did, for the generated twin)
    monkeypatch.setattr(shards, "POLL_S", 0.01)
    summary = shards.ingest_sharded(one_rank, tmp_path / "out", workers=1, progress=rec)
    assert summary["shards"][0]["status"] == "ready"
    assert asked and all(str(p).endswith(".bytes") for p in asked)
    label = next(e[1] for e in rec.events if e[0] == "done")
    moving = [e[2] for e in rec.events if e[0] == "progress" and e[1] == label]
    assert moving and all(0 < b for b in moving)
    assert not (tmp_path / "out" / shards.PROGRESS_DIR).exists() or not list(
        (tmp_path / "out" / shards.PROGRESS_DIR).iterdir())
