"""The process executor (ingest/executors.py): calls are submitted lazily, at most one per worker, in the order the
caller wants at each pick; a worker that dies is retried once; stopping a batch (or leaving its loop) ends the
tasks still running, through a public Event every worker watches, not the pool's private process table."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ascendscope.ingest import executors
from ascendscope.ingest.executors import ProcessExecutor, iterate


def sleeper(seconds: float, pid_file: str) -> int:
    tmp = Path(pid_file + ".tmp")  # written whole, then renamed: a reader never sees an empty file
    tmp.write_text(str(os.getpid()))
    tmp.replace(pid_file)
    time.sleep(seconds)
    return os.getpid()


def stamp(name: str, folder: str) -> str:
    Path(folder, name).write_text(str(time.monotonic()))
    time.sleep(0.2)
    return name


def dies_once(marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    return "second try"


def always_dies() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    return executors._alive(pid)


def _wait_for(fn, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.05)
    return False


def test_stopping_a_batch_ends_its_running_tasks(tmp_path):
    calls = [{"seconds": 120, "pid_file": str(tmp_path / f"{i}.pid")} for i in range(3)]
    batch = ProcessExecutor(2).start(sleeper, calls)
    assert batch.poll(0.05) == []
    assert _wait_for(lambda: len(list(tmp_path.glob("*.pid"))) == 2)
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(batch.running) == 2 and batch.pending == [2]  # lazily: the third waits for a free worker
    batch.stop()
    assert _wait_for(lambda: not any(_alive(pid) for pid in pids), 10)
    assert batch.done and not (tmp_path / "2.pid").exists()


def test_leaving_the_loop_stops_the_tasks(tmp_path):
    """The caller gives up while a call still runs (Ctrl+C, an exception in its loop): that call is ended."""
    calls = [{"seconds": 0, "pid_file": str(tmp_path / "0.pid")}, {"seconds": 120, "pid_file": str(tmp_path / "1.pid")}]
    loop = iterate(ProcessExecutor(2).start(sleeper, calls))
    first = next(loop)
    assert first[0] == 0 and first[2] is None
    assert _wait_for(lambda: (tmp_path / "1.pid").exists())
    pid = int((tmp_path / "1.pid").read_text())
    assert _alive(pid)
    try:
        loop.throw(KeyboardInterrupt)
    except KeyboardInterrupt:
        pass
    assert _wait_for(lambda: not _alive(pid), 10)


def test_the_executor_uses_no_private_pool_internals():
    source = Path(executors.__file__).read_text()
    assert "._processes" not in source and "_processes" not in source


def test_each_next_call_is_picked_in_the_order_wanted_then(tmp_path):
    """One worker: after the first call, the order changes (as when a user opens a rank): the batch follows it."""
    wish: list[int] = []
    calls = [{"name": str(i), "folder": str(tmp_path)} for i in range(4)]
    batch = ProcessExecutor(1).start(stamp, calls, order=lambda pending: [i for i in wish if i in pending]
                                     + [i for i in pending if i not in wish])
    done = []
    while not batch.done:
        for i, result, error in batch.poll(0.05):
            assert error is None and result == str(i)
            done.append(i)
            wish[:] = [3]  # after the first call finishes, the caller wants call 3 next
    assert done == [0, 3, 1, 2]


def test_a_worker_that_dies_is_retried_once_then_fails(tmp_path):
    results = dict((i, (r, e)) for i, r, e in ProcessExecutor(2).run(
        dies_once, [{"marker": str(tmp_path / "m")}]))
    assert results == {0: ("second try", None)}
    (i, result, error), = list(ProcessExecutor(1).run(always_dies, [{}]))
    assert result is None and "worker process died" in error


def niceness() -> int:
    return os.nice(0)


def test_pool_workers_run_at_the_niceness_asked(tmp_path):
    """The shard tasks run nicer than the ingest (and the server) that waits for them."""
    assert list(ProcessExecutor(1, nice=5).run(niceness, [{}])) == [(0, os.nice(0) + 5, None)]
    assert list(ProcessExecutor(1).run(niceness, [{}])) == [(0, os.nice(0), None)]


def test_fill_starts_the_next_call_without_a_poll(tmp_path):
    """A caller with work to do between two polls (the cluster tables' rewrite) calls fill(): the freed worker
    starts its next call at once, not when the caller polls again."""
    calls = [{"name": str(i), "folder": str(tmp_path)} for i in range(2)]
    batch = ProcessExecutor(1).start(stamp, calls)
    assert batch.poll(30) == [(0, "0", None)]  # call 1 waits: poll fills only when called
    time.sleep(1.0)
    assert not (tmp_path / "1").exists()
    batch.fill()
    assert _wait_for(lambda: (tmp_path / "1").exists(), 30)
    assert [r for r in iterate(batch)] == [(1, "1", None)]
