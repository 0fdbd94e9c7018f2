"""The run store: one folder per run, ``<data_dir>/runs/<id>/`` holding ``run.json`` and ``run.duckdb``.

``run.json`` is the run's record (id, name, source, status, error, created, size, …) and is the only state: it is
rewritten atomically (temp file + rename), so a restarted server sees every queued, interrupted, finished or
failed run as it was. Status moves ``queued → ingesting → ready | failed``.

Ingestion never runs in the web process. :class:`IngestQueue` is one thread that starts a ``spawn`` worker
process per run, one run at a time; the worker calls ``ingest.pipeline.ingest_path`` (which writes the database
under a temporary name and renames it into place) and records the outcome in ``run.json``. If the worker dies
without doing so, the queue marks the run failed.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import queue
import re
import secrets
import shutil
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

log = logging.getLogger("ascendscope.runs")

STATUSES = ("queued", "ingesting", "ready", "failed")
RUN_FILE = "run.json"
DB_FILE = "run.duckdb"
LOG_FILE = "ingest.log"
PROGRESS_INTERVAL_S = 0.5


@dataclass
class Run:
    id: str
    name: str
    source: str
    status: str = "queued"
    error: str | None = None
    created: float = field(default_factory=time.time)
    size: int | None = None  # bytes of run.duckdb once ready
    source_fingerprint: str | None = None
    progress: str | None = None
    started: float | None = None
    finished: float | None = None
    summary: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)


class RunNotFound(KeyError):
    pass


class RunStore:
    """Reads and writes run folders; safe to use from several threads and from the worker processes."""

    def __init__(self, data_dir: Path | str):
        self.data_dir = Path(data_dir).expanduser()
        self.runs_dir = self.data_dir / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    # -- paths
    def run_dir(self, run_id: str) -> Path:
        if not _valid_id(run_id):
            raise RunNotFound(run_id)
        return self.runs_dir / run_id

    def db_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / DB_FILE

    # -- records
    def create_run(self, name: str, source: str, *, fingerprint: str | None = None) -> Run:
        """A new queued run record (no ingestion is started: see :meth:`create_run_from_path`)."""
        with self._lock:
            while True:
                run_id = f"{_slug(name)}-{secrets.token_hex(3)}"
                if not (self.runs_dir / run_id).exists():
                    break
            (self.runs_dir / run_id).mkdir(parents=True)
            run = Run(id=run_id, name=name, source=source, source_fingerprint=fingerprint)
            self._write(run)
        return run

    def create_run_from_path(self, path: Path | str, *, name: str | None = None, reuse: bool = True) -> Run:
        """A run for a profiling folder/file; an existing ready or pending run of the unchanged source is reused."""
        src = Path(path).expanduser().resolve()
        if not src.exists():
            raise FileNotFoundError(f"no such file or folder: {src}")
        fingerprint = source_fingerprint(src)
        if reuse:
            for run in self.list():
                if run.source == str(src) and run.source_fingerprint == fingerprint and run.status != "failed":
                    return run
        return self.create_run(name or src.name or str(src), str(src), fingerprint=fingerprint)

    def get(self, run_id: str) -> Run:
        path = self.run_dir(run_id) / RUN_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RunNotFound(run_id) from None
        known = Run.__dataclass_fields__
        return Run(**{k: v for k, v in data.items() if k in known})

    def list(self) -> list[Run]:
        """Every run, newest first (folders without a readable run.json are skipped)."""
        runs = []
        for child in self.runs_dir.iterdir():
            if child.is_dir() and (child / RUN_FILE).exists():
                try:
                    runs.append(self.get(child.name))
                except (RunNotFound, ValueError, TypeError):
                    log.warning("skipping unreadable run folder %s", child)
        return sorted(runs, key=lambda r: r.created, reverse=True)

    def set_status(self, run_id: str, status: str, *, error: str | None = None, **fields) -> Run:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        with self._lock:
            run = self.get(run_id)
            run.status, run.error = status, error
            for key, value in fields.items():
                setattr(run, key, value)
            if status == "ready":
                db = self.db_path(run_id)
                run.size = db.stat().st_size if db.exists() else None
            self._write(run)
        return run

    def update(self, run_id: str, **fields) -> Run:
        with self._lock:
            run = self.get(run_id)
            for key, value in fields.items():
                setattr(run, key, value)
            self._write(run)
        return run

    def delete(self, run_id: str) -> None:
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)

    def pending(self) -> list[Run]:
        """Runs a restart must finish: queued ones and those whose ingestion was interrupted, oldest first."""
        return sorted((r for r in self.list() if r.status in ("queued", "ingesting")), key=lambda r: r.created)

    def _write(self, run: Run) -> None:
        target = self.run_dir(run.id) / RUN_FILE
        tmp = target.with_name(f".{RUN_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(run.to_json(), indent=2, default=str), encoding="utf-8")
        os.replace(tmp, target)


class IngestQueue:
    """Ingests queued runs one at a time, each in a fresh worker process (``multiprocessing`` spawn)."""

    def __init__(self, store: RunStore, *, on_ready: Callable[[str], None] | None = None):
        self.store = store
        self.on_ready = on_ready
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._current: multiprocessing.process.BaseProcess | None = None
        self._stopping = threading.Event()
        self._pending: set[str] = set()
        self._pending_lock = threading.Lock()

    def start(self, *, resume: bool = True) -> "IngestQueue":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="ascendscope-ingest", daemon=True)
            self._thread.start()
            if resume:
                for run in self.store.pending():
                    if run.status == "ingesting":
                        self.store.set_status(run.id, "queued", progress="interrupted; queued again")
                    self._put(run.id)
        return self

    def enqueue(self, run_id: str) -> None:
        """Queue a run for ingestion (a run already waiting in the queue is not queued twice)."""
        with self._pending_lock:
            if run_id in self._pending:
                return
        self.store.set_status(run_id, "queued")
        self._put(run_id)

    def _put(self, run_id: str) -> None:
        with self._pending_lock:
            if run_id in self._pending:
                return
            self._pending.add(run_id)
        self._queue.put(run_id)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._queue.put(None)
        proc = self._current
        if proc is not None and proc.is_alive():
            proc.terminate()
            proc.join(timeout_s)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wait_idle(self, timeout_s: float = 120.0) -> bool:
        """True once no run is queued or ingesting (for the CLI and tests)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.05)
        return False

    def _loop(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        while not self._stopping.is_set():
            run_id = self._queue.get()
            try:
                if run_id is None:
                    return
                self._run_one(ctx, run_id)
            except Exception:  # the queue must survive one bad run
                log.exception("ingest of run %s failed", run_id)
            finally:
                with self._pending_lock:
                    self._pending.discard(run_id)
                self._queue.task_done()

    def _run_one(self, ctx, run_id: str) -> None:
        try:
            run = self.store.get(run_id)
        except RunNotFound:
            return
        if run.status not in ("queued", "ingesting"):
            return
        proc = ctx.Process(target=ingest_worker, args=(str(self.store.data_dir), run_id),
                           name=f"ascendscope-ingest-{run_id}", daemon=True)
        self._current = proc
        proc.start()
        proc.join()
        self._current = None
        run = self.store.get(run_id)
        if run.status in ("queued", "ingesting"):
            reason = "stopped" if self._stopping.is_set() else f"worker exited with code {proc.exitcode}"
            self.store.set_status(run_id, "failed", error=f"ingestion did not finish ({reason})",
                                  finished=time.time())
        elif run.status == "ready" and self.on_ready is not None:
            self.on_ready(run_id)


def ingest_worker(data_dir: str, run_id: str) -> None:
    """Worker process body: ingest one run and record the outcome in its run.json."""
    store = RunStore(data_dir)
    run_dir = store.run_dir(run_id)
    handler = logging.FileHandler(run_dir / LOG_FILE, encoding="utf-8")
    logging.basicConfig(level=logging.INFO, handlers=[handler],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run = store.set_status(run_id, "ingesting", started=time.time(), progress="starting")
    try:
        from ingest.pipeline import Progress, ingest_path

        class RunProgress(Progress):
            """Mirrors ingest progress into run.json, at most every PROGRESS_INTERVAL_S."""

            def __init__(self):
                self.total = self.done = 0
                self.last = 0.0

            def begin(self, total_bytes, ranks):
                self.total = max(1, total_bytes)
                self.note(f"reading {ranks} rank(s), {total_bytes / 1e6:.1f} MB", force=True)

            def file_done(self, rank, name, size, seconds):
                self.done += size
                self.note(f"{100 * self.done / self.total:.0f}% read (rank {rank}: {name})")

            def phase(self, text):
                self.note(text, force=True)

            def note(self, text, force=False):
                now = time.monotonic()
                if force or now - self.last >= PROGRESS_INTERVAL_S:
                    self.last = now
                    store.update(run_id, progress=str(text)[:200])

        summary = ingest_path(run.source, store.db_path(run_id), progress=RunProgress())
    except BaseException as exc:  # record every failure, including KeyboardInterrupt in the worker
        logging.getLogger("ascendscope.ingest").error("ingest failed:\n%s", traceback.format_exc())
        message = f"{type(exc).__name__}: {exc}".strip()
        store.set_status(run_id, "failed", error=message[:2000], finished=time.time(), progress=None)
        return
    store.set_status(run_id, "ready", finished=time.time(), progress=None, summary=_brief_summary(summary))


def _brief_summary(summary) -> dict | None:
    """The ingest summary minus its (unbounded) warning list, which stays in the database's warnings table."""
    if not isinstance(summary, dict):
        return None
    brief = {k: v for k, v in summary.items() if k != "warnings"}
    brief["warning_count"] = len(summary.get("warnings") or [])
    return json.loads(json.dumps(brief, default=str))


def source_fingerprint(path: Path) -> str:
    """Cheap change detector for a source: file count, total size and newest mtime."""
    if path.is_file():
        st = path.stat()
        return f"1:{st.st_size}:{st.st_mtime_ns}"
    count = size = newest = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime_ns)
    return f"{count}:{size}:{newest}"


_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,80}$")


def _valid_id(run_id: str) -> bool:
    return bool(_ID_RE.match(run_id)) and ".." not in run_id


def _slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    return slug[:40] or "run"
