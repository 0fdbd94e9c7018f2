"""The run store: one folder per run, ``<data_dir>/runs/<id>/`` holding ``run.json`` and ``run.duckdb``.

``run.json`` is the run's record (id, name, source, status, progress, error, created, size, …) and is the only
state: it is rewritten atomically (temp file + rename), so a restarted server sees every queued, interrupted,
finished or failed run as it was, and the queued ones are the ingest queue. Status moves
``queued → ingesting → ready | failed``.

A run comes from a path on the server (``ascendscope serve PATH``: ``source`` is that path, never written to) or
from an upload (``origin == "upload"``: the archive is extracted into ``<run>/source/`` and ``source`` is the
uploaded file's name). An upload is assembled in a hidden staging folder (``runs/.upload-*``, never a valid id)
and renamed into place only once it is valid, so a refused upload leaves nothing behind.

Run ids are strict (``[a-z0-9][a-z0-9-]*``, at most 64 characters): any other id is "not found" before a path
is ever built from it, so no id reaches outside the runs folder.

Ingestion never runs in the web process: see :mod:`server.worker` (``IngestQueue`` is re-exported here).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows; there one process writes a run.json at a time anyway
    fcntl = None

log = logging.getLogger("ascendscope.runs")

STATUSES = ("queued", "ingesting", "ready", "failed")
RUN_FILE = "run.json"
DB_FILE = "run.duckdb"
LOG_FILE = "ingest.log"
SOURCE_DIR = "source"  # an upload's extracted archive, removed once the run is ready
WORK_DIR = "work"  # the worker's scratch folder (spill files), removed after every attempt
STAGING_PREFIX = ".upload-"
LOCK_FILE = ".run.lock"  # the web process and a worker both rewrite run.json: read-modify-write under a flock
MAX_NAME_CHARS = 200


@dataclass
class Run:
    id: str
    name: str
    source: str
    status: str = "queued"
    error: str | None = None
    created: float = field(default_factory=time.time)
    size: int | None = None  # bytes on disk of the run's folder
    source_fingerprint: str | None = None
    progress: dict | str | None = None  # see server.worker.RunProgress
    started: float | None = None
    finished: float | None = None
    summary: dict | None = None
    origin: str = "path"  # "path" (a folder on the server) or "upload"
    rank_count: int | None = None
    attempts: int = 0
    worker_pid: int | None = None
    upload: dict | None = None  # filename, bytes, members, nested archives

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
        if not valid_id(run_id):
            raise RunNotFound(run_id)
        return self.runs_dir / run_id

    def db_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / DB_FILE

    def source_path(self, run: Run) -> Path:
        """What the worker ingests: the extracted upload, or the path the run was opened from."""
        return self.run_dir(run.id) / SOURCE_DIR if run.origin == "upload" else Path(run.source)

    # -- records
    def create_run(self, name: str, source: str, *, fingerprint: str | None = None) -> Run:
        """A new queued run record (no ingestion is started: see :meth:`create_run_from_path`)."""
        with self._lock:
            run_id = self._new_id(name)
            (self.runs_dir / run_id).mkdir(parents=True)
            run = Run(id=run_id, name=clean_name(name), source=source, source_fingerprint=fingerprint)
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
                if (run.origin == "path" and run.source == str(src) and run.source_fingerprint == fingerprint
                        and run.status != "failed"):
                    return run
        return self.create_run(name or src.name or str(src), str(src), fingerprint=fingerprint)

    def new_staging_dir(self) -> Path:
        """A hidden folder to assemble an upload in (see :meth:`commit_staging`)."""
        path = self.runs_dir / f"{STAGING_PREFIX}{secrets.token_hex(8)}"
        path.mkdir()
        return path

    def commit_staging(self, staging: Path, name: str, source: str, **fields) -> Run:
        """Turn a staging folder into a queued run: write its run.json, then rename it to the new id."""
        with self._lock:
            run_id = self._new_id(name)
            run = Run(id=run_id, name=clean_name(name), source=source, **fields)
            run.size = folder_bytes(staging)
            self._write(run, folder=staging)
            os.rename(staging, self.runs_dir / run_id)
        return run

    def get(self, run_id: str) -> Run:
        path = self.run_dir(run_id) / RUN_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            raise RunNotFound(run_id) from None
        known = Run.__dataclass_fields__
        return Run(**{k: v for k, v in data.items() if k in known})

    def list(self) -> list[Run]:
        """Every run, newest first (folders without a readable run.json are skipped)."""
        runs = []
        for child in self.runs_dir.iterdir():
            if valid_id(child.name) and child.is_dir() and (child / RUN_FILE).exists():
                try:
                    runs.append(self.get(child.name))
                except (RunNotFound, ValueError, TypeError):
                    log.warning("skipping unreadable run folder %s", child)
        return sorted(runs, key=lambda r: r.created, reverse=True)

    def set_status(self, run_id: str, status: str, *, error: str | None = None, **fields) -> Run:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        with self._record_lock(run_id):
            run = self.get(run_id)
            run.status, run.error = status, error
            for key, value in fields.items():
                setattr(run, key, value)
            if status in ("ready", "failed"):
                run.size = folder_bytes(self.run_dir(run_id))
            if status == "ready" and run.rank_count is None and isinstance(run.summary, dict):
                run.rank_count = len(run.summary.get("ranks") or []) or None
            self._write(run)
        return run

    def update(self, run_id: str, **fields) -> Run:
        with self._record_lock(run_id):
            run = self.get(run_id)
            for key, value in fields.items():
                setattr(run, key, value)
            self._write(run)
        return run

    def delete(self, run_id: str) -> None:
        """Remove the run's folder (its database, and an upload's files); a source path is never touched."""
        target = self.run_dir(run_id)
        with self._lock:
            if not (target / RUN_FILE).exists():
                raise RunNotFound(run_id)
            # rename first, so the run disappears at once even if removing a large folder takes a while
            doomed = self.runs_dir / f".deleted-{run_id}-{secrets.token_hex(4)}"
            os.rename(target, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def pending(self) -> list[Run]:
        """Runs a restart must finish: queued ones and those whose ingestion was interrupted, oldest first."""
        return sorted((r for r in self.list() if r.status in ("queued", "ingesting")), key=lambda r: r.created)

    def clean_partial(self, run_id: str) -> None:
        """Remove what an interrupted ingest may have left: temp databases and the worker's scratch folder."""
        run_dir = self.run_dir(run_id)
        for leftover in run_dir.glob(f"{DB_FILE}.tmp-*"):
            leftover.unlink(missing_ok=True)
        shutil.rmtree(run_dir / WORK_DIR, ignore_errors=True)

    def sweep(self) -> None:
        """At startup: remove half-received uploads and half-deleted runs left by a previous process."""
        for child in self.runs_dir.iterdir():
            if child.name.startswith((STAGING_PREFIX, ".deleted-")):
                shutil.rmtree(child, ignore_errors=True)

    @contextmanager
    def _record_lock(self, run_id: str):
        with self._lock:
            try:
                fd = os.open(self.run_dir(run_id) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            except (FileNotFoundError, NotADirectoryError):  # never recreate a deleted run's folder
                raise RunNotFound(run_id) from None
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _new_id(self, name: str) -> str:
        while True:
            run_id = f"{_slug(name)}-{secrets.token_hex(3)}"
            if not (self.runs_dir / run_id).exists():
                return run_id

    def _write(self, run: Run, folder: Path | None = None) -> None:
        target = (folder or self.run_dir(run.id)) / RUN_FILE
        tmp = target.with_name(f".{RUN_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(run.to_json(), indent=2, default=str), encoding="utf-8")
        os.replace(tmp, target)


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


def folder_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def valid_id(run_id: str) -> bool:
    return isinstance(run_id, str) and bool(_ID_RE.fullmatch(run_id))


def clean_name(name: str) -> str:
    """A display name: control characters dropped, whitespace collapsed, at most MAX_NAME_CHARS characters."""
    text = " ".join(re.sub(r"[\x00-\x1f\x7f]", " ", str(name)).split())
    return text[:MAX_NAME_CHARS] or "run"


def _slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    return slug[:40].strip("-") or "run"


def __getattr__(name: str):
    """``IngestQueue`` and ``ingest_worker`` live in :mod:`server.worker` (which imports this module)."""
    if name in ("IngestQueue", "ingest_worker"):
        from server import worker  # noqa: PLC0415

        return getattr(worker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
