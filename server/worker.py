"""Ingest workers: runs are ingested outside the web process, a bounded number at a time.

:class:`IngestQueue` runs ``workers`` threads; each takes a queued run and starts a worker process for it
(:func:`ingest_worker`; see :func:`worker_context`). The worker calls ``ingest.shards.ingest_sharded``, which
writes the run's small files of every rank first, then its shards in a pool of processes (one per core), each
written under a temporary name and published in the run's manifest once complete, so the web process serves the
run's ready ranks while the others still load (it only ever opens complete files, read-only, and one run's
ingest never holds up serving the others). The ranks users open in a run still ingesting (``RunStore.want_ranks``)
are loaded next. The worker reports progress into run.json as it goes (:class:`RunProgress`: bytes, also within
a shard) and records the outcome there. A run interrupted part way (a restart, a killed worker) keeps the shards
it finished: the next attempt does not redo them.

The queue is persistent: it is the runs whose run.json says ``queued`` (or ``ingesting``, interrupted by a
restart), re-read by :meth:`IngestQueue.start`. A worker that dies without recording an outcome (SIGKILL, a
crash) leaves no database: its temp files are removed and the run is queued again, up to ``retries`` times,
then marked failed with the reason. A failure the pipeline reports (bad input) is not retried: it would fail
the same way. A run that loads nothing a view can show (no slices, counters or table rows) fails too, listing
the warnings. The reason of every failure is in the run's ingest.log.

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

import json
import logging
import multiprocessing
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable

from ascendscope.server.runs import (
    DB_FILE,
    LOG_FILE,
    SOURCE_DIR,
    WANTED_FILE,
    WORK_DIR,
    RunNotFound,
    RunStore,
    folder_bytes,
)

log = logging.getLogger("ascendscope.worker")

PROGRESS_INTERVAL_S = 0.5  # run.json is rewritten at most this often for file events …
TICK_S = 1.0  # … and at least this often (elapsed time, ETA) while the worker runs
READ_SHARE_PCT = 90.0  # reading the files is this share of the estimated percentage, the phases after it the rest
PHASE_STEP_PCT = 2.0
# imported once by the fork server, not per worker
WORKER_PRELOAD = ["ascendscope.server.worker", "ascendscope.ingest.pipeline", "ascendscope.ingest.shards",
                  "ascendscope.server.prewarm"]
LOCK_POLL_S = 0.2  # how often the queue looks whether another process's worker let go of a run
BUSY_EXIT = 75  # a worker's exit code when another live process holds the run's ingest lock
GROUP_WAIT_S = 5.0  # how long the processes of an exited worker's group may take to exit before they are killed
GROUP_POLL_S = 0.02
MAX_LISTED_WARNINGS = 8  # warnings quoted in the error of a run that loaded nothing
MAX_LOGGED_WARNINGS = 1000  # warnings written to ingest.log


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
                try:
                    self.store.set_status(run_id, "failed", error=f"could not run the ingest worker: {exc}"[:2000],
                                          finished=time.time(), progress=None, worker_pid=None)
                except (RunNotFound, OSError):
                    pass
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
        # not a daemon: the worker starts its own pool of processes (it still dies with the server: its lifeline)
        proc = ctx.Process(target=ingest_worker, args=(str(self.store.data_dir), run_id, lifeline),
                           kwargs={"options": self.ingest_options}, name=f"ascendscope-ingest-{run_id}",
                           daemon=False)
        try:
            with self._lock:
                if run_id in self._cancelled:
                    return False
                proc.start()
                self._procs[run_id] = proc
            lifeline.close()  # the worker has its own copy now
            proc.join()
        finally:
            lifeline.close()
            server_end.close()
        if proc.pid is not None:
            end_group(proc.pid)  # nothing the worker started still writes into the run's folder
        with self._lock:
            self._procs.pop(run_id, None)
            if run_id in self._cancelled:
                return False
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


def _note(text: str) -> dict:
    return {"phase": "queued", "text": text, "percent": 0.0}


def ingest_worker(data_dir: str, run_id: str, lifeline=None, options: dict | None = None) -> None:
    """Worker process body: ingest one run, reporting progress and the outcome in its run.json.

    ``lifeline`` is the read end of a pipe the server holds open; the worker kills itself when it closes.
    ``options``: extra keyword arguments of ``ingest_sharded``, but ``prewarm_min_slices``: the fewest slices a
    run has for its index files to be written ahead once it is ready (``server.prewarm.MIN_SLICES``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl+C is the server's to act on)
    try:
        os.setpgid(0, 0)  # a group of our own, which the processes we start join (see the module docstring)
    except OSError:
        pass
    options = dict(options or {})
    min_slices = options.pop("prewarm_min_slices", None)
    if lifeline is not None:
        _die_with_server(lifeline)
    store = RunStore(data_dir)
    try:
        lock = store.hold_ingest_lock(run_id)
        if lock is None:
            raise SystemExit(BUSY_EXIT)
        os.ftruncate(lock, 0)
        os.write(lock, f"{os.getpid()}\n".encode())  # who holds it, for a person looking at the folder
        run = store.get(run_id)
    except RunNotFound:  # deleted before the worker got to it
        return
    if run.status not in ("queued", "ingesting"):
        return
    store.remove_scratch(run_id)  # what an earlier attempt left; no live process uses it (we hold the lock)
    run_dir = store.run_dir(run_id)
    handler = logging.FileHandler(run_dir / LOG_FILE, encoding="utf-8")
    # what the worker and its processes (the ingest pool, multiprocessing's helpers) print goes to the run's log,
    # not to the server's terminal
    log_fd = os.open(run_dir / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    _own_resource_tracker()
    logging.basicConfig(level=logging.INFO, handlers=[handler],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    work = run_dir / f"{WORK_DIR}-{os.getpid()}"
    work.mkdir(exist_ok=True)
    tempfile.tempdir = str(work)  # the pipeline's scratch files (spill, extracted archives) stay in the run's folder
    run = store.set_status(run_id, "ingesting", started=time.time(), worker_pid=os.getpid(),
                           progress={"phase": "starting", "text": "starting", "percent": 0.0})
    source = store.source_path(run)
    wlog = logging.getLogger("ascendscope.ingest")
    wlog.info("ingesting %s (attempt %d, worker pid %d)", run.source, run.attempts, os.getpid())
    progress = RunProgress(store, run_id)
    try:
        from ascendscope.ingest.shards import ingest_sharded  # the web process never imports the pipeline

        (run_dir / DB_FILE).unlink(missing_ok=True)  # a single-file layout of this run must not outlive this attempt
        # (the shards an interrupted attempt finished are kept: ingest_sharded reuses those of the same source)
        summary = ingest_sharded(source, run_dir, progress=progress, wanted=lambda: store.wanted_ranks(run_id),
                                 **(options or {}))
    except BaseException as exc:  # noqa: BLE001 - record every failure, even one that is not an Exception
        progress.close()
        wlog.error("ingest failed:\n%s", traceback.format_exc())
        message = f"{type(exc).__name__}: {exc}".strip()
        if run.origin == "upload":  # the client knows its file by name, not by our folder
            message = message.replace(str(source), run.source)
        shutil.rmtree(work, ignore_errors=True)
        store.set_status(run_id, "failed", error=message[:2000], finished=time.time(), progress=None,
                         worker_pid=None)
        return
    progress.close()
    shutil.rmtree(work, ignore_errors=True)
    tempfile.tempdir = None  # (it was the folder just removed)
    (run_dir / WANTED_FILE).unlink(missing_ok=True)
    if summary.get("reused"):
        wlog.info("%d shard(s) finished by an earlier attempt were kept", summary["reused"])
    warnings = summary.get("warnings") or []
    for w in warnings[:MAX_LOGGED_WARNINGS]:
        wlog.warning("%s: %s", w.get("file"), w.get("message"))
    if len(warnings) > MAX_LOGGED_WARNINGS:
        wlog.warning("… and %d more warnings (all of them are in the run's warnings table)",
                     len(warnings) - MAX_LOGGED_WARNINGS)
    empty = nothing_loaded(summary)
    if empty is not None:  # every view would be blank: not a ready run
        store.remove_database(run_id)
        wlog.error("%s", empty)
        store.set_status(run_id, "failed", error=empty, finished=time.time(), progress=None,
                         summary=_brief_summary(summary), worker_pid=None)
        return
    brief = _brief_summary(summary)
    wlog.info("ready: %d rank(s), %d warning(s), %.1f s", len(summary.get("ranks") or []),
              brief["warning_count"], summary.get("seconds") or 0)
    store.set_status(run_id, "ready", finished=time.time(), progress=None, summary=brief,
                     rank_count=len(summary.get("ranks") or []), worker_pid=None)
    if run.origin == "upload":  # the database holds everything the views read
        shutil.rmtree(run_dir / SOURCE_DIR, ignore_errors=True)
        store.update(run_id, size=folder_bytes(run_dir))
    _prewarm(store, run_id, wlog, min_slices)


def _prewarm(store: RunStore, run_id: str, wlog: logging.Logger, min_slices: int | None) -> None:
    """The run's index files, written now that it is ready (``server.prewarm``): the first look at it is then as
    quick as the next. The run is served meanwhile; any error only leaves the files to the first requests."""
    try:
        from ascendscope.server.prewarm import MIN_SLICES, prewarm
        from ascendscope.server.settings import Settings

        done = prewarm(store, run_id, Settings.from_env(), min_slices=MIN_SLICES if min_slices is None else min_slices)
    except Exception:  # noqa: BLE001 - nothing depends on it: the server reads what it needs as before
        wlog.warning("the index files were not written ahead (the first requests write them):\n%s",
                     traceback.format_exc())
        return
    if "reason" in done and not done.get("entries"):
        wlog.info("index files not written ahead: %s", done["reason"])
    else:
        wlog.info("index files written ahead: %d entries (%d too large for the track cache) in %.1f s%s%s",
                  done.get("entries", 0), done.get("skipped", 0), done.get("seconds", 0.0),
                  f"; {done['ranks_left']} more ranks are written at their first look" if done.get("ranks_left")
                  else "", f"; stopped: {done['reason']}" if "reason" in done else "")


def _own_resource_tracker() -> None:
    """Track the ingest pool's semaphores in a resource tracker of this worker's own (started on first use, its
    output in the run's log), not in the server's, which this process inherited: a worker stopped mid-ingest
    leaves them behind, and the server's tracker would say so on the server's terminal when it exits."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    with tracker._lock:
        tracker._fd = tracker._pid = None


def _die_with_server(lifeline) -> None:
    """Kill this process when the server's end of ``lifeline`` closes (the server exited, however it died)."""

    def watch() -> None:
        try:
            lifeline.recv_bytes()
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup here: the next attempt removes what is left

    threading.Thread(target=watch, name="server-watchdog", daemon=True).start()


def nothing_loaded(summary: dict) -> str | None:
    """The error of a run in which no view has anything to show (None if something was loaded)."""
    slices = sum((summary.get("slices_per_kind") or {}).values())
    rows = (sum((summary.get("tables") or {}).values()) + int(summary.get("counters") or 0)
            + int(summary.get("cluster_analysis_rows") or 0))
    if slices or rows:
        return None
    warnings = summary.get("warnings") or []
    listed = "; ".join(f"{w.get('file')}: {w.get('message')}" for w in warnings[:MAX_LISTED_WARNINGS])
    more = f" (+{len(warnings) - MAX_LISTED_WARNINGS} more)" if len(warnings) > MAX_LISTED_WARNINGS else ""
    return (f"nothing to show: no timeline slices, counters or table rows were loaded from "
            f"{len(summary.get('ranks') or [])} rank folder(s)" + (f" — {listed}{more}" if listed else ""))[:2000]


class RunProgress:
    """Mirrors ingest progress into run.json: phase, bytes done / total, an estimated percentage, MB/s, ETA.

    Bytes advance as files finish and, for a trace, while it loads (DuckDB's own scan progress, then the
    derivation steps). Implements :class:`ingest.pipeline.Progress`.
    """

    def __init__(self, store: RunStore, run_id: str):
        self.store, self.run_id = store, run_id
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.read_started: float | None = None
        self.phase_name, self.text = "starting", "starting"
        self.total = self.done = 0
        self.partial: dict[str, int] = {}  # bytes done of files still loading
        self.files_done = 0
        self.ranks: int | None = None
        self.current: list[str] = []
        self.after_read = 0
        self.last_write = 0.0
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="progress-ticker", daemon=True)
        self._ticker.start()

    def begin(self, total_bytes: int, ranks: int) -> None:
        with self.lock:
            self.total, self.ranks = max(1, total_bytes), ranks
            self.phase_name, self.read_started = "reading", time.monotonic()
        self.write(force=True)

    def file_start(self, rank: int, name: str, size: int) -> None:
        with self.lock:
            self.current.append(_current(rank, name))
        self.write()

    def file_progress(self, rank: int, name: str, done_bytes: int) -> None:
        with self.lock:
            self.partial[name] = done_bytes
        self.write()

    def file_done(self, rank: int, name: str, size: int, seconds: float) -> None:
        with self.lock:
            self.partial.pop(name, None)
            self.done += size
            self.files_done += 1
            label = _current(rank, name)
            if label in self.current:
                self.current.remove(label)
        self.write()

    def phase(self, text: str) -> None:
        with self.lock:
            if self.read_started is None:
                self.phase_name = "extracting" if text.startswith("extracting") else "preparing"
            elif text.startswith("reading"):  # a step of reading the files (the small ones, then the ranks)
                self.phase_name = "reading"
            else:
                self.phase_name = "finishing"
                self.after_read += 1
            self.text, self.current = str(text)[:200], []
        self.write(force=True)

    def snapshot(self) -> dict:
        now = time.monotonic()
        percent, rate, eta = 0.0, None, None
        done = self.done + sum(self.partial.values())
        if self.read_started is not None:
            frac = min(1.0, done / self.total)
            percent = READ_SHARE_PCT * frac + min(100.0 - READ_SHARE_PCT - 1, PHASE_STEP_PCT * self.after_read)
            seconds = now - self.read_started
            if done and seconds > 0:
                rate = done / seconds
                if not self.after_read and done < self.total:
                    eta = (self.total - done) / rate
        if self.phase_name == "reading":
            shown = ", ".join(self.current[:2]) + (f" +{len(self.current) - 2}" if len(self.current) > 2 else "")
            text = f"reading {shown}" if shown else "reading"
        else:
            text = self.text
        return {"phase": self.phase_name, "text": text, "done_bytes": done, "total_bytes": self.total,
                "files_done": self.files_done, "ranks": self.ranks, "percent": round(percent, 1),
                "mb_per_s": round(rate / 1e6, 2) if rate else None, "eta_s": round(eta, 1) if eta else None,
                "elapsed_s": round(now - self.started, 1)}

    def write(self, force: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            if self._stop.is_set() or (not force and now - self.last_write < PROGRESS_INTERVAL_S):
                return
            self.last_write = now
            try:  # under the lock, so nothing lands after close()
                self.store.update(self.run_id, progress=self.snapshot())
            except (RunNotFound, OSError):  # the run was deleted under us; the queue is about to kill this worker
                pass

    def close(self) -> None:
        with self.lock:
            self._stop.set()
        self._ticker.join(TICK_S + 1)

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.write(force=True)


def _current(rank: int, name: str) -> str:
    """How a file (or a shard: "ranks 0–99") being read is named in the progress line."""
    return name if name.startswith("rank") else f"rank {rank}: {name.rsplit('/', 1)[-1]}"


def _brief_summary(summary) -> dict | None:
    """The ingest summary minus its (unbounded) warning and shard lists: the warnings stay in the database's
    warnings table, the shards in the run's manifest.json; their counts remain."""
    if not isinstance(summary, dict):
        return None
    brief = {k: v for k, v in summary.items() if k not in ("warnings", "shards")}
    brief["warning_count"] = len(summary.get("warnings") or [])
    if "shards" in summary:
        brief["shards_failed"] = sum(1 for s in summary["shards"] if s.get("status") != "ready")
        brief["shard_seconds_max"] = max((s.get("seconds") or 0 for s in summary["shards"]), default=0)
    return json.loads(json.dumps(brief, default=str))
