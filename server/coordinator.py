"""One ingest queue for all the server processes of a data dir.

A dashboard may be served by several processes at once: ``ascendscope serve --workers N`` (uvicorn workers
sharing one socket), or several servers on several hosts over one run store on shared storage. Each holds an
:class:`IngestCoordinator`; exactly one of them, the **leader**, runs the :class:`~server.worker.IngestQueue`. The
leader is whoever holds the ``flock`` on ``<data_dir>/.ingest-leader.lock``; the kernel drops it when that process
dies, however it dies, and another process then takes it (each follower tries every :data:`POLL_S`). The new
leader's queue resumes the queued and interrupted runs from their run.json, as a restarted server does, and the
run's own ingest lock keeps it from starting a second worker beside a live one.

A follower asks the leader for work through small request files in ``<data_dir>/queue/``:

* ``<run id>.ingest``: ingest this run (its run.json already says ``queued``; the file only wakes the leader);
* ``<run id>.cancel``: stop the run's worker (before the run is deleted); the follower then waits until the run's
  ingest lock is free, so the folder is removed only once no worker writes into it.

The leader looks at that folder every :data:`POLL_S` and removes each file once it has acted on it. So an upload
received by any process is ingested by the one queue, once; a delete from any process stops its worker; and what
every process shows comes from the run store on disk (run.json, the database files), never from memory that only
one process has (``RunStore.get`` and ``Databases`` check the files' identity on every request).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ascendscope.server.runs import RunNotFound, RunStore, valid_id
from ascendscope.server.worker import IngestQueue

try:
    import fcntl
except ImportError:  # no flock (Windows): every process leads, as one process always did there
    fcntl = None

log = logging.getLogger("ascendscope.coordinator")
_LEAVING = threading.Event()  # set by leaving(): this process takes no lead from then on

LEADER_LOCK = ".ingest-leader.lock"
REQUESTS_DIR = "queue"
POLL_S = 0.2  # how often the leader reads the requests and a follower tries to lead
CANCEL_WAIT_S = 15.0  # how long a follower's delete waits for the leader to stop the run's worker


class IngestCoordinator:
    """The ingest queue of a server process that may share its data dir with others (see the module doc).

    Offers what the routers use of an :class:`IngestQueue`: ``enqueue``, ``cancel``, ``active`` and ``on_ready``;
    plus ``start``/``stop`` (the app's lifespan calls them) and ``is_leader``."""

    def __init__(self, store: RunStore, *, workers: int = 1, retries: int = 1,
                 on_ready: Callable[[str], None] | None = None):
        self.store = store
        self.workers, self.retries = workers, retries
        self.on_ready = on_ready
        self.requests = store.data_dir / REQUESTS_DIR
        self.requests.mkdir(parents=True, exist_ok=True)
        self.queue: IngestQueue | None = None
        self._lock_fd: int | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()

    @property
    def is_leader(self) -> bool:
        return self.queue is not None

    def start(self) -> IngestCoordinator:
        if self._thread is None:
            self._try_lead()
            self._thread = threading.Thread(target=self._loop, name="ascendscope-coordinator", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._mutex:
            queue, self.queue = self.queue, None
        if queue is not None:
            queue.stop(timeout_s)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # another process may lead from now on
            self._lock_fd = None

    def enqueue(self, run_id: str) -> None:
        """Queue the run for ingestion by the leader, whichever process that is."""
        with self._mutex:
            queue = self.queue
        if queue is not None:
            queue.enqueue(run_id)
            return
        self.store.set_status(run_id, "queued")
        self._request(run_id, "ingest")

    def cancel(self, run_id: str, timeout_s: float = CANCEL_WAIT_S) -> None:
        """Stop the run's worker, if one runs, wherever it runs; returns once no worker holds the run."""
        with self._mutex:
            queue = self.queue
        if queue is not None:
            queue.cancel(run_id)
            return
        self._request(run_id, "cancel")
        deadline = time.monotonic() + timeout_s
        try:
            while not self.store.ingest_lock_free(run_id) and time.monotonic() < deadline:
                time.sleep(POLL_S / 4)
        except RunNotFound:
            pass

    def active(self) -> dict[str, int]:
        with self._mutex:
            queue = self.queue
        return queue.active() if queue is not None else {}

    def wait_idle(self, timeout_s: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._mutex:
                queue = self.queue
            if queue is not None and queue.wait_idle(max(0.0, deadline - time.monotonic())):
                return not any(self.requests.glob("*.ingest"))
            time.sleep(POLL_S)
        return False

    def _request(self, run_id: str, kind: str) -> None:
        path = self.requests / f"{run_id}.{kind}"
        tmp = self.requests / f".{run_id}.{kind}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, path)  # complete or absent: the leader never reads half a file

    def _try_lead(self) -> None:
        if self.is_leader or self._stopping.is_set() or _LEAVING.is_set():
            return
        fd = os.open(self.store.data_dir / LEADER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # who leads, for a person looking at the folder
        self._lock_fd = fd
        queue = IngestQueue(self.store, workers=self.workers, retries=self.retries, on_ready=self.on_ready)
        with self._mutex:
            self.queue = queue
        log.info("process %d leads the ingest queue of %s", os.getpid(), self.store.data_dir)
        queue.start(resume=True)

    def _loop(self) -> None:
        while not self._stopping.wait(POLL_S):
            try:
                self._try_lead()
                if self.is_leader:
                    self._serve_requests()
            except Exception:  # the loop must survive one bad request file
                log.exception("the ingest coordinator failed a round")

    def _serve_requests(self) -> None:
        with self._mutex:
            queue = self.queue
        if queue is None:
            return
        for path in sorted(self.requests.iterdir(), key=_mtime):
            run_id, _, kind = path.name.rpartition(".")
            if path.name.startswith(".") or kind not in ("ingest", "cancel") or not valid_id(run_id):
                continue
            path.unlink(missing_ok=True)  # first: a request written again meanwhile is a new request
            if kind == "cancel":
                queue.cancel(run_id)
            else:
                queue.enqueue(run_id)


def leaving() -> None:
    """This process is about to stop (a server process whose supervisor died): it takes no lead from now on. Its
    shutdown can take seconds; had it taken the lead meanwhile (the leader of that server stopping first), it
    would start an ingest worker only to leave it behind, and the next server would count one more attempt."""
    _LEAVING.set()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
