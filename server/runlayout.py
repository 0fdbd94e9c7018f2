"""A run's folder as files: the names of what it holds, the run id and name rules, and the small helpers the store
and the worker use on it (an exclusive ``flock``, a folder's bytes, a source's fingerprint).

Run ids are strict (``[a-z0-9][a-z0-9-]*``, at most 64 characters): any other id is "not found" (:class:`RunNotFound`)
before a path is ever built from it, so no id reaches outside the runs folder. ``server.runs`` re-exports these names:
importers name them from there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows; there one process writes a run.json at a time anyway
    fcntl = None

RUN_FILE = "run.json"
DB_FILE = "run.duckdb"
LOG_FILE = "ingest.log"
SOURCE_DIR = "source"  # an upload's extracted archive, removed once the run is ready
UPLOAD_ARCHIVE = "upload.archive"  # the uploaded archive itself, kept (within a budget) to ingest it again
INDEX_DIR = "index"  # the server's index files of the run's tracks (server.indexfiles): a cache, safe to delete
WORK_DIR = "work"  # the worker's scratch folder (spill files) is WORK_DIR-<pid>, removed after every attempt
STAGING_PREFIX = ".upload-"
LOCK_FILE = ".run.lock"  # the web process and a worker both rewrite run.json: read-modify-write under a flock
WANTED_FILE = "wanted.json"  # the ranks users opened in a run still ingesting, newest first (the worker's queue jump)
INGEST_LOCK_FILE = ".ingest.lock"  # held by the run's live worker (its pid is written in it, for people)
MAX_NAME_CHARS = 200


class RunNotFound(KeyError):
    pass


def try_flock(path: Path) -> int | None:
    """The fd holding an exclusive flock on ``path`` (created if need be), or None if another holder has it; the
    lock lasts until the fd is closed or the process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if fcntl is None:
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


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
