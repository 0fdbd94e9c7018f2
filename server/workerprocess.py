"""The ingest worker process: :func:`ingest_worker` ingests one run and records the outcome in its run.json.

:class:`server.worker.IngestQueue` starts it, in a process of its own (a fork server's child where there is one) that
leads a process group of its own, which its ingest pool joins. The worker holds the run's ingest lock
(``RunStore.hold_ingest_lock``) for its life and exits with :data:`BUSY_EXIT` when another live process holds it;
it dies with the server that started it (:func:`_die_with_server`: see ``server.worker``'s contract). Its output
and that of its pool go to the run's ingest.log, its scratch files to the run's folder; progress is reported
through :class:`server.runprogress.RunProgress`. A run that loads nothing a view can show fails
(:func:`nothing_loaded`); a ready run's index files are written ahead (``server.prewarm``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback

from ascendscope.server.runprogress import RunProgress
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

BUSY_EXIT = 75  # a worker's exit code when another live process holds the run's ingest lock
STORAGE_EXIT = 74  # … when the run's folder could not be written, not even its outcome (EX_IOERR)
MAX_REPORT_CHARS = 2000
TRACKER_WARNINGS = "ignore:resource_tracker:UserWarning"  # a -W filter: the leaked-semaphore warning
MAX_LISTED_WARNINGS = 8  # warnings quoted in the error of a run that loaded nothing
MAX_LOGGED_WARNINGS = 1000  # warnings written to ingest.log


class Unrecorded(Exception):
    """The ingest ended but its outcome could not be written into the run's folder (the message says both)."""


def ingest_worker(data_dir: str, run_id: str, lifeline=None, options: dict | None = None, report=None) -> None:
    """Worker process body: ingest one run, reporting progress and the outcome in its run.json.

    ``lifeline`` is the read end of a pipe the server holds open; the worker kills itself when it closes.
    ``options``: extra keyword arguments of ``ingest_sharded``, but ``prewarm_min_slices``: the fewest slices a
    run has for its index files to be written ahead once it is ready (``server.prewarm.MIN_SLICES``).
    ``report``: the write end of a pipe to the queue. When the run's folder cannot be written (storage failing:
    read-only, immutable), not even to record the outcome, the worker says why on it and exits with
    :data:`STORAGE_EXIT`; the queue records it once the folder can be written again."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl+C is the server's to act on)
    try:
        os.setpgid(0, 0)  # a group of our own, which the processes we start join (see the module docstring)
    except OSError:
        pass
    options = dict(options or {})
    min_slices = options.pop("prewarm_min_slices", None)
    if lifeline is not None:
        _die_with_server(lifeline)
    try:
        _ingest(RunStore(data_dir), run_id, options, min_slices)
    except (Unrecorded, OSError) as exc:
        if report is not None:
            try:
                report.send_bytes(str(exc)[:MAX_REPORT_CHARS].encode("utf-8", "replace"))
            except OSError:
                pass
        raise SystemExit(STORAGE_EXIT) from None


def _ingest(store: RunStore, run_id: str, options: dict, min_slices: int | None) -> None:
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
        _record(store, run_id, "failed", message, error=message[:2000], finished=time.time(), progress=None,
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
        _record(store, run_id, "failed", empty, error=empty, finished=time.time(), progress=None,
                summary=_brief_summary(summary), worker_pid=None)
        return
    brief = _brief_summary(summary)
    wlog.info("ready: %d rank(s), %d warning(s), %.1f s", len(summary.get("ranks") or []),
              brief["warning_count"], summary.get("seconds") or 0)
    _record(store, run_id, "ready", "the ingest finished", finished=time.time(), progress=None, summary=brief,
            rank_count=len(summary.get("ranks") or []), worker_pid=None)
    if run.origin == "upload":  # the database holds everything the views read
        shutil.rmtree(run_dir / SOURCE_DIR, ignore_errors=True)
        store.update(run_id, size=folder_bytes(run_dir))
    _prewarm(store, run_id, wlog, min_slices)


def _record(store: RunStore, run_id: str, status: str, what: str, **fields) -> None:
    """The outcome in run.json; :class:`Unrecorded`, saying ``what`` happened, when the folder cannot be written."""
    try:
        store.set_status(run_id, status, **fields)
    except OSError as exc:
        raise Unrecorded(f"{what}; its outcome could not be written: {exc}") from exc


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
    leaves them behind, and the server's tracker would say so on the server's terminal when it exits. Ours removes
    them without its warning ("There appear to be N leaked semaphore objects", naming Python's install path): the
    queue already logs why the attempt ended (the tracker takes the warning filters of the process that starts it)."""
    import sys
    from multiprocessing import resource_tracker

    sys.warnoptions.append(TRACKER_WARNINGS)
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
            + int(summary.get("cluster_analysis_rows") or 0) + int(summary.get("expert_rows") or 0))
    if slices or rows:
        return None
    warnings = summary.get("warnings") or []
    listed = "; ".join(f"{w.get('file')}: {w.get('message')}" for w in warnings[:MAX_LISTED_WARNINGS])
    more = f" (+{len(warnings) - MAX_LISTED_WARNINGS} more)" if len(warnings) > MAX_LISTED_WARNINGS else ""
    return (f"nothing to show: no timeline slices, counters or table rows were loaded from "
            f"{len(summary.get('ranks') or [])} rank folder(s)" + (f" — {listed}{more}" if listed else ""))[:2000]


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
