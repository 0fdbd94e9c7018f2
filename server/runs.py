"""The run store: one folder per run, ``<data_dir>/runs/<id>/`` holding ``run.json`` and the run's database: the
sharded layout (``manifest.json``, ``cluster.duckdb``, ``shards/``; ``ingest.layout``) that the worker writes, or
a single ``run.duckdb`` (runs ingested before, and tests), which keeps opening as it did.

``run.json`` is the run's record (id, name, source, status, progress, error, created, size, …) and is the only
state: it is rewritten atomically (temp file + rename), so a restarted server sees every queued, interrupted,
finished or failed run as it was, and the queued ones are the ingest queue. Status moves
``queued → ingesting → ready | failed``; a failed run can be queued again (:meth:`RunStore.reset_for_retry`), and a
ready run whose database turns out unreadable becomes failed (:meth:`RunStore.mark_damaged`). What each attempt
did, and why one failed, is in the run's ``ingest.log``.

A run comes from a path on the server (``ascendscope serve PATH``: ``source`` is that path, never written to) or
from an upload (``origin == "upload"``: the archive is extracted into ``<run>/source/`` and ``source`` is the
uploaded file's name). An upload is assembled in a hidden staging folder (``runs/.upload-*``, never a valid id)
and renamed into place only once it is valid, so a refused upload leaves nothing behind.

The names of the files in a run's folder and the run id rules are in ``server.runlayout``, the parsed-record
cache in ``server.recordcache``, the ingest's own files (database, scratch, ingest lock, wanted ranks, ingest.log)
in ``server.ingestfiles`` (a base of :class:`RunStore`); importers name all of them from here (``__all__``).

Ingestion never runs in the web process: see :mod:`server.worker`, which imports this module (never the
reverse).
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

from ascendscope.ingest import layout
from ascendscope.server.ingestfiles import MAX_LOG_BYTES, MAX_WANTED, IngestFiles
from ascendscope.server.recordcache import RACY_S, RecordCache
from ascendscope.server.runlayout import (
    DB_FILE,
    INDEX_DIR,
    INGEST_LOCK_FILE,
    LOCK_FILE,
    LOG_FILE,
    MAX_NAME_CHARS,
    RUN_FILE,
    SOURCE_DIR,
    STAGING_PREFIX,
    UPLOAD_ARCHIVE,
    WANTED_FILE,
    WORK_DIR,
    RunNotFound,
    clean_name,
    folder_bytes,
    source_fingerprint,
    try_flock,
    valid_id,
)

try:
    import fcntl
except ImportError:  # not on Windows; there one process writes a run.json at a time anyway
    fcntl = None

__all__ = [  # the store's names, wherever they are defined: importers name them from here
    "DB_FILE", "INDEX_DIR", "INGEST_LOCK_FILE", "LOCK_FILE", "LOG_FILE", "MAX_LOG_BYTES", "MAX_NAME_CHARS",
    "MAX_WANTED", "RACY_S", "RUN_FILE", "SOURCE_DIR", "STAGING_PREFIX", "STATUSES", "UPLOAD_ARCHIVE", "WANTED_FILE",
    "WORK_DIR", "DuplicateUpload", "RecordCache", "Run", "RunNotFound", "RunStore", "clean_name", "folder_bytes",
    "source_fingerprint", "try_flock", "valid_id",
]

log = logging.getLogger("ascendscope.runs")

STATUSES = ("queued", "ingesting", "ready", "failed")


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
    progress: dict | str | None = None  # see server.runprogress.RunProgress
    started: float | None = None
    finished: float | None = None
    summary: dict | None = None
    origin: str = "path"  # "path" (a folder on the server) or "upload"
    rank_count: int | None = None
    attempts: int = 0
    worker_pid: int | None = None
    upload: dict | None = None  # filename, bytes, sha256, members, nested archives

    def to_json(self) -> dict:
        return asdict(self)



class DuplicateUpload(Exception):
    """The uploaded bytes are those of an existing run (``run``)."""

    def __init__(self, run: Run):
        super().__init__(run.id)
        self.run = run


class RunStore(IngestFiles):
    """Reads and writes run folders; safe to use from several threads and from the worker processes."""

    def __init__(self, data_dir: Path | str):
        self.data_dir = Path(data_dir).expanduser()
        self.runs_dir = self.data_dir / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._records = RecordCache()

    # -- paths
    def run_dir(self, run_id: str) -> Path:
        if not valid_id(run_id):
            raise RunNotFound(run_id)
        return self.runs_dir / run_id

    def db_path(self, run_id: str) -> Path:
        """The file that stands for the run's database: ``run.duckdb``, or a sharded run's ``cluster.duckdb``
        (``server.db`` opens the run's shards from beside it). A run with neither gives ``run.duckdb``."""
        run_dir = self.run_dir(run_id)
        single = run_dir / DB_FILE
        if single.exists() or not (run_dir / layout.MANIFEST).exists():
            return single
        return run_dir / layout.CLUSTER_DB

    def servable(self, run: Run) -> bool:
        """Whether the run's views can be served: it is ready, or it is still ingesting (or queued to resume)
        and its sharded layout is published (a manifest: its ready shards can be read)."""
        if run.status == "ready":
            return True
        if run.status not in ("queued", "ingesting"):
            return False
        run_dir = self.run_dir(run.id)
        return (run_dir / layout.MANIFEST).is_file() and (run_dir / layout.CLUSTER_DB).is_file()

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
        """A run for a profiling folder/file; an existing run of the unchanged source is reused (a ready or pending
        one first; else a failed one, which the caller may retry: opening a source again makes no second run)."""
        src = Path(path).expanduser().resolve()
        if not src.exists():
            raise FileNotFoundError(f"no such file or folder: {src}")
        fingerprint = source_fingerprint(src)
        existing = self.list()
        if reuse:
            same = [run for run in existing if run.origin == "path" and run.source == str(src)
                    and run.source_fingerprint == fingerprint]
            same.sort(key=lambda run: run.status == "failed")
            if same:
                return same[0]
        return self.create_run(name or _path_name(src, existing), str(src), fingerprint=fingerprint)

    def new_staging_dir(self) -> Path:
        """A hidden folder to assemble an upload in (see :meth:`commit_staging`)."""
        path = self.runs_dir / f"{STAGING_PREFIX}{secrets.token_hex(8)}"
        path.mkdir()
        return path

    def commit_staging(self, staging: Path, name: str, source: str, **fields) -> Run:
        """Turn a staging folder into a queued run: write its run.json, then rename it to the new id. An upload
        whose ``sha256`` matches a run that is not failed raises :class:`DuplicateUpload` (staging is left)."""
        sha256 = (fields.get("upload") or {}).get("sha256")
        with self._lock:
            existing = self.find_upload(sha256) if sha256 else None
            if existing is not None:
                raise DuplicateUpload(existing)
            run_id = self._new_id(name)
            run = Run(id=run_id, name=clean_name(name), source=source, **fields)
            run.size = folder_bytes(staging)
            self._write(run, folder=staging)
            os.rename(staging, self.runs_dir / run_id)
        return run

    def find_upload(self, sha256: str) -> Run | None:
        """The run (not failed) made from an upload of exactly these bytes, if there is one."""
        for run in self.list():
            if run.origin == "upload" and run.status != "failed" and (run.upload or {}).get("sha256") == sha256:
                return run
        return None

    def get(self, run_id: str) -> Run:
        """The run's record, parsed from run.json only when the file changed (see :class:`RecordCache`: one
        ``stat`` per call, and every process sees another's rewrite at once). The record is a new object each
        time, but its dict and list fields are shared with the cache: replace them, never mutate them in place."""
        path = self.run_dir(run_id) / RUN_FILE
        try:
            data = self._records.read(path)
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

    def mark_damaged(self, run_id: str, reason: str) -> Run:
        """A ready run whose database cannot be read becomes failed, saying why and how to get it back."""
        # no server path in what clients see
        reason = reason.replace(str(self.db_path(run_id)), DB_FILE).replace(f"{self.run_dir(run_id)}/", "")
        with self._record_lock(run_id):
            run = self.get(run_id)
            if run.status != "ready":  # someone got here first, or it is being re-ingested
                return run
            if run.origin == "upload" and not self.can_restore_upload(run_id):
                remedy = "the uploaded files were removed once it was ready: upload the archive again"
            else:
                remedy = "Retry (on the runs page) ingests it again from its source"
            run.status, run.finished, run.progress = "failed", time.time(), None
            run.error = f"the database file is damaged: {reason}"[:1500] + f" — {remedy}"
            self._write(run)
        self.append_log(run_id, run.error)
        return run

    def retry_problem(self, run: Run) -> str | None:
        """Why a failed run cannot be ingested again (its source is gone), or None."""
        if run.origin == "upload":
            if not self.can_restore_upload(run.id):
                return "the uploaded files were removed once the run was ready: upload the archive again"
        elif not Path(run.source).exists():
            return "its source no longer exists on the server"
        return None

    def can_restore_upload(self, run_id: str) -> bool:
        """Whether an upload's files are there to ingest again: still extracted, or the archive was kept."""
        folder = self.run_dir(run_id)
        return (folder / SOURCE_DIR).is_dir() or (folder / UPLOAD_ARCHIVE).is_file()

    def restore_upload(self, run: Run, limits) -> None:
        """Extract an upload's kept archive again (under ``limits``, as the upload was) when its files are gone.
        Raises ``ingest.archive.ArchiveError``."""
        from ascendscope.ingest import unpackproc

        folder = self.run_dir(run.id)
        if run.origin != "upload" or (folder / SOURCE_DIR).is_dir() or not (folder / UPLOAD_ARCHIVE).is_file():
            return
        partial = folder / f"{SOURCE_DIR}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            unpackproc.unpack(folder / UPLOAD_ARCHIVE, partial, limits)  # (never in the web process)
            os.rename(partial, folder / SOURCE_DIR)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        self.append_log(run.id, "the kept upload archive was extracted again")

    def trim_kept_uploads(self, max_bytes: int) -> list[str]:
        """Remove the kept archives of the oldest uploads until the newest fit in ``max_bytes`` together; return
        the run ids whose archive went."""
        kept = []
        for run in self.list():
            path = self.run_dir(run.id) / UPLOAD_ARCHIVE
            try:
                kept.append((run.created, run.id, path.stat().st_size, path))
            except FileNotFoundError:
                continue
        removed, total = [], 0
        for _created, run_id, size, path in sorted(kept, reverse=True):
            total += size
            if total > max_bytes:
                path.unlink(missing_ok=True)
                removed.append(run_id)
        return removed

    def reset_for_retry(self, run_id: str) -> Run:
        """A failed run back to ``queued`` with a fresh attempt count; its old database is removed."""
        with self._record_lock(run_id):
            run = self.get(run_id)
            self.remove_database(run_id)
            run.status, run.error, run.attempts, run.finished = "queued", None, 0, None
            run.progress = {"phase": "queued", "text": "queued again (retry)", "percent": 0.0}
            if run.origin == "path" and Path(run.source).exists():  # what is ingested now
                run.source_fingerprint = source_fingerprint(Path(run.source))
            self._write(run)
        self.append_log(run_id, "retry requested: queued again")
        return run

    def sweep(self) -> None:
        """At startup: remove half-received uploads and half-deleted runs left by a previous process, and the
        temp files that killed ingest tasks left in finished runs (a worker killed mid-shard leaves its
        half-written shard, ~100 MB, beside a run that still became ready)."""
        for child in self.runs_dir.iterdir():
            if child.name.startswith((STAGING_PREFIX, ".deleted-")):
                shutil.rmtree(child, ignore_errors=True)
        for run in self.list():
            if run.status in ("ready", "failed"):
                self.clean_partial(run.id)

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


def _path_name(src: Path, existing: list[Run]) -> str:
    """The folder's name, or ``parent/name`` when a run of another source already has that name (``text/level1``
    beside ``db/level1``), so that two runs in the list can be told apart."""
    name = src.name or str(src)
    taken = any(r.name == name and r.source != str(src) for r in existing)
    return f"{src.parent.name}/{name}" if taken and src.parent.name else name



def _slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    return slug[:40].strip("-") or "run"
