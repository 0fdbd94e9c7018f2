"""The files an ingest leaves in a run's folder besides run.json, as methods of ``server.runs.RunStore``
(:class:`IngestFiles` is one of its bases): the database in either layout, the scratch of interrupted attempts,
the ingest lock, the ranks users asked for first, and the ingest log.

A worker holds the run's ingest lock (``.ingest.lock``, a ``flock``) for its whole life, so the lock is free exactly
when no live process is ingesting the run: only then may anyone remove its scratch files or start another worker on
it. The methods need only ``self.run_dir(run_id)``, the run's folder (``RunNotFound`` for an invalid id).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

from ascendscope.ingest import layout
from ascendscope.server.runlayout import (
    DB_FILE,
    INDEX_DIR,
    INGEST_LOCK_FILE,
    LOG_FILE,
    WANTED_FILE,
    WORK_DIR,
    RunNotFound,
    try_flock,
)

MAX_WANTED = 8  # ranks remembered in WANTED_FILE
MAX_LOG_BYTES = 64 << 10  # the tail of ingest.log the API hands out


class IngestFiles:
    """The ingest's files of a run (a base of ``RunStore``, which supplies ``run_dir``)."""

    def want_ranks(self, run_id: str, ranks: list[int]) -> None:
        """Note that a user opened ``ranks`` of a run still ingesting: its worker loads their shards next
        (``wanted_ranks``). Written only when the wish changes (temp file + rename)."""
        now = self.wanted_ranks(run_id)
        fresh = list(dict.fromkeys([*ranks, *now]))[:MAX_WANTED]
        if fresh == now:
            return
        target = self.run_dir(run_id) / WANTED_FILE
        tmp = target.with_name(f".{WANTED_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(json.dumps({"ranks": fresh, "at": time.time()}), encoding="utf-8")
            os.replace(tmp, target)
        except (FileNotFoundError, NotADirectoryError):  # deleted meanwhile
            tmp.unlink(missing_ok=True)

    def wanted_ranks(self, run_id: str) -> list[int]:
        """The ranks users asked for while the run ingests, newest first ([] when none)."""
        try:
            data = json.loads((self.run_dir(run_id) / WANTED_FILE).read_text(encoding="utf-8"))
            return [int(r) for r in data.get("ranks", [])][:MAX_WANTED]
        except (OSError, ValueError, TypeError, AttributeError):
            return []

    def remove_database(self, run_id: str) -> None:
        """The run's database in either layout (the manifest first: without it the folder holds no run)."""
        run_dir = self.run_dir(run_id)
        (run_dir / layout.MANIFEST).unlink(missing_ok=True)
        (run_dir / DB_FILE).unlink(missing_ok=True)
        (run_dir / layout.CLUSTER_DB).unlink(missing_ok=True)
        shutil.rmtree(run_dir / layout.SHARDS_DIR, ignore_errors=True)
        shutil.rmtree(run_dir / INDEX_DIR, ignore_errors=True)

    def clean_partial(self, run_id: str) -> bool:
        """Remove what an interrupted ingest left, unless a live process holds the run's ingest lock (then its
        files are in use and nothing is touched). True if the run was free."""
        fd = self.hold_ingest_lock(run_id)
        if fd is None:
            return False
        try:
            self.remove_scratch(run_id)
        finally:
            os.close(fd)
        return True

    def remove_scratch(self, run_id: str) -> list[Path]:
        """Temp databases and scratch folders of earlier attempts (and of pool workers killed mid-shard); the
        caller holds the run's ingest lock. The shards an interrupted ingest finished stay: its manifest says
        which, and the next attempt keeps them. Returns the temp files removed."""
        run_dir = self.run_dir(run_id)
        gone = []
        for pattern in (f"{DB_FILE}.tmp-*", f"{layout.CLUSTER_DB}.tmp-*", f".{layout.MANIFEST}.tmp-*",
                        f"{layout.SHARDS_DIR}/*.tmp-*"):
            for leftover in run_dir.glob(pattern):
                leftover.unlink(missing_ok=True)
                gone.append(leftover)
        for scratch in [*run_dir.glob(f"{WORK_DIR}*"), *run_dir.glob(".work-*"), run_dir / ".progress"]:
            shutil.rmtree(scratch, ignore_errors=True)  # the sharded ingest's own
        if not (run_dir / layout.MANIFEST).exists():  # shards of an ingest that never published a manifest
            (run_dir / layout.CLUSTER_DB).unlink(missing_ok=True)
            shutil.rmtree(run_dir / layout.SHARDS_DIR, ignore_errors=True)
        return gone

    def hold_ingest_lock(self, run_id: str) -> int | None:
        """Take the run's ingest lock without waiting: the open fd (the lock lasts until it is closed or this
        process dies), or None if a live process holds it. Raises RunNotFound if the run's folder is gone."""
        try:
            return try_flock(self.run_dir(run_id) / INGEST_LOCK_FILE)
        except (FileNotFoundError, NotADirectoryError):
            raise RunNotFound(run_id) from None

    def ingest_lock_free(self, run_id: str) -> bool:
        """True if no live process is ingesting the run right now."""
        fd = self.hold_ingest_lock(run_id)
        if fd is not None:
            os.close(fd)
        return fd is not None

    def append_log(self, run_id: str, text: str) -> None:
        """One line in the run's ingest.log, from the web process (what happened to a worker that cannot say)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            with open(self.run_dir(run_id) / LOG_FILE, "a", encoding="utf-8") as out:
                out.write(f"{stamp} {text}\n")
        except (FileNotFoundError, NotADirectoryError):
            pass

    def log_tail(self, run_id: str, max_bytes: int = MAX_LOG_BYTES) -> tuple[str, int]:
        """The last ``max_bytes`` of the run's ingest.log, from a line start, and the log's whole size."""
        path = self.run_dir(run_id) / LOG_FILE
        try:
            with open(path, "rb") as src:
                size = os.fstat(src.fileno()).st_size
                src.seek(max(0, size - max_bytes))
                data = src.read(max_bytes)
        except FileNotFoundError:
            return "", 0
        if size > max_bytes and b"\n" in data:
            data = data[data.index(b"\n") + 1:]
        return data.decode("utf-8", "replace"), size

    def log_hint(self, run_id: str) -> str:
        """Where the details of a failure are, for an error message."""
        return f"its ingest log has the details (Log on the runs page, or {self.run_dir(run_id) / LOG_FILE})"
