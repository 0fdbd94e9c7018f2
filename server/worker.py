"""The ingest queue: runs are ingested outside the web process, a bounded number at a time.

:class:`IngestQueue` runs ``workers`` threads; each takes a queued run and starts a worker process for it
(:func:`server.workerprocess.ingest_worker`; see :func:`worker_context`). The worker calls
``ingest.shards.ingest_sharded``, which writes the run's small files of every rank first, then its shards in a pool
of processes (one per core), each written under a temporary name and published in the run's manifest once complete,
so the web process serves the run's ready ranks while the others still load (it only ever opens complete files,
read-only, and one run's ingest never holds up serving the others). The ranks users open in a run still ingesting
(``RunStore.want_ranks``) are loaded next. The worker reports progress into run.json as it goes
(:class:`server.runprogress.RunProgress`: bytes, also within a shard) and records the outcome there. A run
interrupted part way (a restart, a killed worker) keeps the shards it finished: the next attempt does not redo them.

The queue is persistent: it is the runs whose run.json says ``queued`` (or ``ingesting``, interrupted by a
restart), re-read by :meth:`IngestQueue.start`. A worker that dies without recording an outcome (SIGKILL, a
crash) leaves no database: its temp files are removed and the run is queued again, up to ``retries`` times,
then marked failed with the reason. A failure the pipeline reports (bad input) is not retried: it would fail
the same way. A run that loads nothing a view can show (no slices, counters or table rows) fails too, listing
the warnings. The reason of every failure is in the run's ingest.log. Storage that fails under an ingest (the data
dir made read-only or immutable) is neither a crash nor bad input: the worker, unable to write even the outcome,
says why on a pipe and exits with ``STORAGE_EXIT``, and the run is failed with that reason as soon as its folder
can be written again (tried every ``STORAGE_RETRY_S``), so that Retry takes it.

A worker leads a process group of its own, which its pool (the fork server and the processes it forks) joins. When
a worker has exited, the queue waits until nothing of that group runs any more (killing what is left after
``GROUP_WAIT_S``) before it looks at the run: a pool process of a killed worker exits on its own within
``ingest.executors.ORPHAN_POLL_S``, but until then it may still write into the run's folder, or hold its ingest lock
(a process forked a moment before the kill), and the clean-up would leave its files behind.

A worker dies with its server: it holds the read end of a pipe whose write end only the server has, and a
watchdog thread kills the worker when that pipe reports end of file (the server exited, even by SIGKILL). Parent
death signals would not do: a forkserver worker's parent is the fork server, which outlives the web process for
as long as any worker it forked runs. The worker also holds the run's ingest lock (``RunStore.hold_ingest_lock``)
for its life, and the queue starts a worker on a run only once that lock is free, so a restarted server never
ingests a run beside a live worker of its predecessor, nor removes that worker's files.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable

from ascendscope.server.runs import RunNotFound, RunStore
from ascendscope.server.workerprocess import BUSY_EXIT, STORAGE_EXIT, ingest_worker
from ascendscope.server.workerprocess import nothing_loaded as nothing_loaded  # (callers import it from here too)

log = logging.getLogger("ascendscope.worker")

# imported once by the fork server, not per worker
WORKER_PRELOAD = ["ascendscope.server.worker", "ascendscope.ingest.pipeline", "ascendscope.ingest.shards",
                  "ascendscope.server.prewarm"]
LOCK_POLL_S = 0.2  # how often the queue looks whether another process's worker let go of a run
GROUP_WAIT_S = 5.0  # how long the processes of an exited worker's group may take to exit before they are killed
GROUP_POLL_S = 0.02
STORAGE_RETRY_S = 2.0  # how often a run whose folder could not be written is tried again, to record it failed


class IngestQueue:
    """Ingests queued runs, at most ``workers`` at once, each in a fresh worker process."""

    def __init__(self, store: RunStore, *, workers: int = 1, retries: int = 1,
                 on_ready: Callable[[str], None] | None = None, ingest_options: dict | None = None):
        """``ingest_options``: extra keyword arguments of ``ingest_sharded`` (tests: ``group_bytes``), and
        ``prewarm_min_slices`` (``server.prewarm``; tests: 0)."""
        self.store = store
        self.ingest_options = dict(ingest_options or {})
        self.workers = max(1, int(workers))
        self.retries = max(0, int(retries))
        self.on_ready = on_ready
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._procs: dict[str, multiprocessing.process.BaseProcess] = {}
        self._pending: set[str] = set()
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def start(self, *, resume: bool = True) -> IngestQueue:
        """Start the worker threads; with ``resume``, queue every run that is queued or was interrupted."""
        if self._threads:
            return self
        for i in range(self.workers):
            thread = threading.Thread(target=self._loop, name=f"ascendscope-ingest-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if resume:
            for run in self.store.pending():
                # a run whose lock a live process holds (a killed server's worker not gone yet, another server)
                # is queued as it is: the queue waits for the lock, then looks at the run again
                if run.status == "ingesting" and self.store.clean_partial(run.id):
                    self.store.append_log(run.id, "the ingest was interrupted (the server stopped)")
                    if run.attempts > self.retries:
                        self.store.set_status(run.id, "failed", finished=time.time(), progress=None, worker_pid=None,
                                              error=f"ingestion was interrupted {run.attempts} times")
                        continue
                    self.store.set_status(run.id, "queued", worker_pid=None,
                                          progress=_note("interrupted by a restart; queued again"))
                self._put(run.id)
        return self

    def enqueue(self, run_id: str) -> None:
        """Queue a run for ingestion (a run already waiting in the queue is not queued twice)."""
        with self._lock:
            if run_id in self._pending:
                return
        self.store.set_status(run_id, "queued")
        self._put(run_id)

    def cancel(self, run_id: str, timeout_s: float = 10.0) -> None:
        """Forget a queued run and kill its worker if it is running (before the run is deleted)."""
        with self._lock:
            if run_id in self._pending:
                self._cancelled.add(run_id)
            proc = self._procs.get(run_id)
        if proc is not None:
            proc.kill()
            proc.join(timeout_s)
            if proc.pid is not None:
                end_group(proc.pid)  # (the run's folder is deleted next: its pool must not write into it)

    def active(self) -> dict[str, int]:
        """``{run_id: worker pid}`` of the runs being ingested right now (a worker that has exited is not, though
        the thread that ran it may not have let go of it yet: ``cancel`` returns once the worker is dead)."""
        with self._lock:
            procs = list(self._procs.items())
        return {run_id: proc.pid for run_id, proc in procs if proc.pid is not None and proc.is_alive()}

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the workers; a run they were ingesting goes back to ``queued`` for the next start."""
        self._stopping.set()
        for _ in self._threads:
            self._queue.put(None)
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        # each thread joins its own worker: a second join here would race it for the exit status
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        killed = False
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                killed = True
        if killed:  # a worker slow to stop (a loaded machine): its thread still records the run as queued again
            deadline = time.monotonic() + timeout_s
            for thread in self._threads:
                thread.join(max(0.0, deadline - time.monotonic()))

    def wait_idle(self, timeout_s: float = 120.0) -> bool:
        """True once no run is queued or ingesting (for the CLI and tests)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.05)
        return False

    def _put(self, run_id: str) -> None:
        with self._lock:
            if run_id in self._pending:
                return
            self._pending.add(run_id)
        self._queue.put(run_id)

    def _loop(self) -> None:
        ctx = worker_context()
        while True:
            run_id = self._queue.get()
            again = False
            try:
                if run_id is None:
                    return
                if not self._stopping.is_set():
                    again = self._run_one(ctx, run_id)
            except Exception as exc:  # the queue must survive one bad run
                log.exception("ingest of run %s failed", run_id)
                self.fail_when_writable(run_id, unwritable(str(exc)) if isinstance(exc, OSError)
                                        else f"could not run the ingest worker: {exc}")
            finally:
                if run_id is not None:
                    with self._lock:
                        self._pending.discard(run_id)
                        self._cancelled.discard(run_id)
                    if again:
                        self._put(run_id)
                self._queue.task_done()

    def _run_one(self, ctx, run_id: str) -> bool:
        """Ingest one run in a worker process; True if it must be queued again (its worker died)."""
        try:
            if not self._wait_for_lock(run_id):
                return False
            run = self.store.get(run_id)
        except RunNotFound:
            return False
        if run.status not in ("queued", "ingesting"):
            if run.status == "ready" and self.on_ready is not None:  # another process finished it meanwhile
                self.on_ready(run_id)
            return False
        run = self.store.update(run_id, attempts=run.attempts + 1)
        lifeline, server_end = ctx.Pipe(duplex=False)  # the worker gets the read end; only we hold the write end
        said, report = ctx.Pipe(duplex=False)  # what the worker could not write into the run's folder
        # not a daemon: the worker starts its own pool of processes (it still dies with the server: its lifeline)
        proc = ctx.Process(target=ingest_worker, args=(str(self.store.data_dir), run_id, lifeline),
                           kwargs={"options": self.ingest_options, "report": report},
                           name=f"ascendscope-ingest-{run_id}", daemon=False)
        try:
            with self._lock:
                if run_id in self._cancelled:
                    return False
                proc.start()
                self._procs[run_id] = proc
            lifeline.close()  # the worker has its own copies now
            report.close()
            proc.join()
            unwritten = _said(said)
        finally:
            for end in (lifeline, server_end, said, report):
                end.close()
        if proc.pid is not None:
            end_group(proc.pid)  # nothing the worker started still writes into the run's folder
        with self._lock:
            self._procs.pop(run_id, None)
            if run_id in self._cancelled:
                return False
        try:
            return self._after_worker(run_id, run, proc, unwritten)
        except OSError as exc:  # the run's folder cannot be written (storage failing): record it once it can
            self.fail_when_writable(run_id, unwritable(unwritten or str(exc)))
            return False

    def _after_worker(self, run_id: str, run, proc, unwritten: str | None) -> bool:
        """What the worker's exit means for the run (see :meth:`_run_one`)."""
        if proc.exitcode == BUSY_EXIT:  # another process took the run between our look and the worker's
            self.store.update(run_id, attempts=run.attempts - 1)
            return True
        try:
            run = self.store.get(run_id)
        except RunNotFound:
            return False
        if run.status == "ready":
            if self.on_ready is not None:
                self.on_ready(run_id)
            return False
        if run.status not in ("queued", "ingesting"):
            return False
        if proc.exitcode == STORAGE_EXIT:  # not a crash: retrying now would meet the same folder
            self.fail_when_writable(run_id, unwritable(unwritten or "no detail"))
            return False
        # the worker died without recording an outcome: no database was renamed into place
        self.store.clean_partial(run_id)
        self.store.append_log(run_id, f"the ingest worker (pid {proc.pid}) {exit_reason(proc.exitcode)}")
        if self._stopping.is_set():
            self.store.set_status(run_id, "queued", attempts=max(0, run.attempts - 1), worker_pid=None,
                                  progress=_note("interrupted by a shutdown; resumes when the server starts"))
            return False
        reason = exit_reason(proc.exitcode)
        tries = self.retries + 1
        if run.attempts < tries:
            log.warning("ingest worker of run %s %s; retrying", run_id, reason)
            self.store.set_status(run_id, "queued", worker_pid=None,
                                  progress=_note(f"the ingest worker {reason}; retrying "
                                                 f"(attempt {run.attempts + 1} of {tries})"))
            return True
        log.error("ingest worker of run %s %s; giving up", run_id, reason)
        self.store.set_status(run_id, "failed", finished=time.time(), progress=None, worker_pid=None,
                              error=f"the ingest worker {reason} (attempt {run.attempts} of {tries}); "
                                    f"{self.store.log_hint(run_id)}")
        return False

    def fail_when_writable(self, run_id: str, error: str) -> None:
        """Mark the run failed with ``error`` — now, or, while its folder cannot be written (storage failing: made
        read-only or immutable), as soon as it can: tried every :data:`STORAGE_RETRY_S` on a thread of its own
        until it works or the queue stops (a restart then finds the run interrupted). Nothing is done if a live
        process holds the run's ingest lock by then."""
        if self._fail_now(run_id, error):
            return
        log.warning("run %s: its folder cannot be written; it is marked failed once it can be (%s)", run_id, error)
        threading.Thread(target=self._fail_later, args=(run_id, error), name=f"ascendscope-unwritable-{run_id}",
                         daemon=True).start()

    def _fail_later(self, run_id: str, error: str) -> None:
        while not self._stopping.wait(STORAGE_RETRY_S):
            if self._fail_now(run_id, error):
                log.info("run %s: its folder can be written again; marked failed", run_id)
                return

    def _fail_now(self, run_id: str, error: str) -> bool:
        """True once the run is failed with ``error`` (or no longer the queue's to fail); False if its folder
        still cannot be written."""
        try:
            if not self.store.clean_partial(run_id):
                return True
            self.store.set_status(run_id, "failed", error=error[:2000], finished=time.time(), progress=None,
                                  worker_pid=None)
        except RunNotFound:
            return True
        except OSError:
            return False
        try:
            self.store.append_log(run_id, error)
        except OSError:
            pass
        return True

    def _wait_for_lock(self, run_id: str) -> bool:
        """Wait while a live process holds the run's ingest lock; False if the queue stops or the run is
        cancelled meanwhile."""
        noted = False
        while not self.store.ingest_lock_free(run_id):
            if not noted:
                log.warning("run %s is being ingested by another live process; waiting for it", run_id)
                noted = True
            with self._lock:
                if run_id in self._cancelled:
                    return False
            if self._stopping.wait(LOCK_POLL_S):
                return False
        return True


def _group_alive(pgid: int) -> bool:
    """True while a process of the group ``pgid`` runs (a zombie does not count: nobody may reap an orphan's)."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (not Linux): whether the group has any process at all
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def end_group(pgid: int, timeout_s: float = GROUP_WAIT_S) -> bool:
    """Wait until no process of an exited worker's group ``pgid`` runs; SIGKILL what is left after ``timeout_s``.
    True if the group ended by itself."""
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                return False
            end = time.monotonic() + timeout_s
            while _group_alive(pgid) and time.monotonic() < end:
                time.sleep(GROUP_POLL_S)
            return False
        time.sleep(GROUP_POLL_S)
    return True


def worker_context():
    """``forkserver`` where there is one: a clean server process that has imported the pipeline once forks each
    worker, so a worker starts in milliseconds and shares nothing with the web process's threads. Else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_PRELOAD)
    return ctx


def exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode} without a result"


def _said(said) -> str | None:
    """What the exited worker sent on its report pipe, if anything (a pipe closed empty polls readable too)."""
    try:
        return said.recv_bytes().decode("utf-8", "replace") if said.poll() else None
    except (EOFError, OSError):
        return None


def unwritable(detail: str) -> str:
    """The error of a run whose folder could not be written during its ingest."""
    return f"the ingest stopped: the run's folder could not be written ({detail}); Retry ingests it again"


def _note(text: str) -> dict:
    return {"phase": "queued", "text": text, "percent": 0.0}
