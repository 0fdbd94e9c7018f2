"""Where a run's database is, for :func:`ascendscope.open`: an ingested run is opened as it is; a profiling folder
(or archive, or trace file) is first ingested into the data folder that ``ascendscope serve`` uses, as a run of
its own, so the same run is then listed on the dashboard (and ``Run.show`` can display it).

What a path can be:

* a run database file (``run.duckdb``, any ``*.duckdb`` that ``ascendscope ingest --out FILE.duckdb`` wrote);
* a sharded run folder (``manifest.json``: ``ascendscope ingest --out DIR``, or a run folder of the data dir,
  ``<data_dir>/runs/<id>/``), or its ``cluster.duckdb``;
* anything ``ascendscope ingest`` reads: an ``*_ascend_pt`` folder, a folder of ranks, a ``.zip``/``.tar.gz``, a
  trace file. It becomes a run of the data dir (``data_dir``, default ``$ASCENDSCOPE_DATA_DIR`` or
  ``~/.ascendscope``); an unchanged source ingested before is reused, exactly as ``ascendscope serve PATH`` does.

Ingestion runs in a worker process (``server.worker.IngestQueue``, the one the server uses: same lock, same
outcome recorded in run.json), so a server running on the same data dir never ingests the run beside us.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ascendscope.ingest import layout

RUN_JSON = "run.json"
SINGLE_DB = "run.duckdb"


class IngestFailed(RuntimeError):
    """The profiling data could not be ingested; the message is the run's error (its ingest log has more)."""


@dataclass(frozen=True)
class Located:
    database: Path  # a .duckdb file, or a sharded run folder
    run_id: str  # the id the dashboard knows the run by (a data-dir run), else a name made from the path
    name: str
    data_dir: Path | None  # the data dir the run belongs to, if it is one of its runs


def default_data_dir() -> Path:
    """``$ASCENDSCOPE_DATA_DIR``, else ``~/.ascendscope``: the same default as ``ascendscope serve``."""
    from ascendscope.server.settings import SETTINGS

    setting = next(s for s in SETTINGS if s.name == "data_dir")
    return Path(os.environ.get(setting.env) or str(setting.default)).expanduser()


def locate(path: str | os.PathLike, *, data_dir: str | os.PathLike | None = None, reingest: bool = False,
           timeout_s: float | None = None, quiet: bool = False) -> Located:
    """The database of the run at ``path``, ingesting ``path`` first when it is profiling data."""
    src = Path(path).expanduser()
    if not src.exists():
        raise FileNotFoundError(f"no such file or folder: {src}")
    src = src.resolve()
    found = _ingested(src)
    if found is not None:
        return found
    return _ingest(src, Path(data_dir).expanduser() if data_dir else default_data_dir(), reingest, timeout_s, quiet)


def _ingested(src: Path) -> Located | None:
    """An already ingested run at ``src``, or None."""
    if src.is_file() and src.name == layout.CLUSTER_DB and layout.is_sharded(src.parent):
        src = src.parent
    if src.is_file() and src.suffix == ".duckdb":
        folder = src.parent if src.name == SINGLE_DB else None
        return _named(src, folder)
    if src.is_dir() and layout.is_sharded(src):
        return _named(src, src)
    if src.is_dir() and (src / SINGLE_DB).is_file() and (src / RUN_JSON).is_file():
        return _named(src / SINGLE_DB, src)
    return None


def _named(database: Path, folder: Path | None) -> Located:
    """A data-dir run folder (it has a run.json) keeps its id and name; anything else is named after the path."""
    if folder is not None and (folder / RUN_JSON).is_file():
        import json

        try:
            record = json.loads((folder / RUN_JSON).read_text(encoding="utf-8"))
            return Located(database, str(record["id"]), str(record.get("name") or record["id"]),
                           folder.parent.parent)
        except (OSError, ValueError, KeyError):
            pass
    stem = database.stem if database.is_file() and database.name != SINGLE_DB else (folder or database).name
    return Located(database, stem, stem, None)


def _ingest(src: Path, data_dir: Path, reingest: bool, timeout_s: float | None, quiet: bool) -> Located:
    from ascendscope.server.runs import RunStore
    from ascendscope.server.worker import IngestQueue

    store = RunStore(data_dir)
    run = store.create_run_from_path(src, reuse=not reingest)
    if run.status == "ingesting" and not store.ingest_lock_free(run.id):  # a server's worker has it: wait for it
        if not quiet:
            print(f"ascendscope: waiting for the ingest of {src} (another process)", file=sys.stderr, flush=True)
        run = _wait(store, run.id, None, timeout_s)
    elif run.status != "ready" or not _has_database(store, run.id):
        if not quiet:
            print(f"ascendscope: ingesting {src} into {store.run_dir(run.id)}", file=sys.stderr, flush=True)
        queue = IngestQueue(store, workers=1, retries=0).start(resume=False)
        try:
            queue.enqueue(run.id)
            run = _wait(store, run.id, queue, timeout_s)
        finally:
            queue.stop()
    if run.status != "ready":
        error, hint = run.error or "not ingested", store.log_hint(run.id)
        raise IngestFailed(f"{src}: {error}" + ("" if hint in error else f" ({hint})"))
    db = store.db_path(run.id)
    return Located(db.parent if db.name == layout.CLUSTER_DB else db, run.id, run.name, data_dir)


def _has_database(store, run_id: str) -> bool:
    return store.db_path(run_id).exists()


def _wait(store, run_id: str, queue, timeout_s: float | None):
    """The run once ingested (or failed), by our ``queue`` or, with None, by another process."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        run = store.get(run_id)
        if run.status in ("ready", "failed") and (queue is None or queue.wait_idle(0.05)):
            return run
        if deadline is not None and time.monotonic() > deadline:
            what = "the ingest was stopped (open it again to start over)" if queue is not None else \
                "another process is still ingesting it"
            raise TimeoutError(f"{run.source} was not ingested within {timeout_s:g} s; {what}")
        time.sleep(0.1)
