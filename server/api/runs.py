"""``/api/runs``: list, upload, rename, delete and retry runs; one run's status, progress, ranks, time range,
warnings and ingest log.

Uploading bytes identical to those of an existing run (not failed) makes no second run: the answer is 200 with that
run and ``"duplicate": true``. A ready run whose database file cannot be read is marked failed when it is found
(409 ``run_damaged``); ``POST /api/runs/{id}/retry`` queues a failed run again."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from ascendscope.ingest import layout
from ascendscope.server.api.answers import ApiError, FastJSONResponse, fast_json, ns_str
from ascendscope.server.api.deps import (
    RunDep,
    SettingsDep,
    StoreDep,
    WritableDep,
    get_databases,
    open_run_db,
    run_damaged,
)
from ascendscope.server.db import DamagedDatabase, query
from ascendscope.server.redact import public_run, source_label
from ascendscope.server.runs import Run, RunNotFound, RunStore, clean_name

router = APIRouter(prefix="/api/runs", tags=["runs"])

MAX_RUNS = 1000
MAX_WARNINGS = 200
MIN_DB_BYTES = 3 * 4096  # DuckDB's file header and its two database headers: anything shorter is damaged

RANK_COLUMNS = ("rank", "device_id", "folder", "rank_source", "profiler_level", "torch_npu_version",
                "cann_version", "has_trace", "overlap_source", "start_ns", "end_ns", "group_folder", "own_rank",
                "session")
RANKS_SQL = """
SELECT rank, device_id, folder, rank_source, profiler_level, torch_npu_version, cann_version, has_trace,
       overlap_source, start_ns, end_ns, group_folder, own_rank, session
FROM ranks ORDER BY rank
"""
WARNINGS_SQL = "SELECT rank, file, message FROM warnings ORDER BY rank NULLS FIRST, file LIMIT ?"
WARNING_COUNT_SQL = "SELECT count(*) FROM warnings"
META_SQL = "SELECT key, value FROM meta"
TRACK_KINDS_SQL = "SELECT kind, count(*), sum(slice_count) FROM tracks GROUP BY kind ORDER BY kind"


UPLOAD_BODY = {
    "required": True,
    "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": ["file"],
        "properties": {"file": {"type": "string", "format": "binary",
                                "description": "a .zip or .tar.gz of one *_ascend_pt folder or a cluster folder"},
                       "name": {"type": "string", "description": "run name (default: the file name)"}}}}},
}
UPLOAD_ERRORS = {
    400: {"description": "empty, corrupt or incomplete upload"},
    403: {"description": "read-only dashboard, or a cross-site request"},
    413: {"description": "over the upload size, member count, extracted size or compression ratio limit"},
    415: {"description": "not multipart/form-data, or the file is not a .zip / .tar.gz archive"},
    422: {"description": "encrypted, unsafe (paths outside the folder, links, devices), nested too deep, or no "
                         "profiling data in it"},
}
HIDDEN_FIELDS = ("summary", "source_fingerprint", "worker_pid")


class RenameBody(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=200, description="the run's new display name")]


def run_summary(run: Run, store: RunStore | None = None) -> dict:
    """The run's record as the API shows it; a run still ingesting also says whether its views can be opened
    (``servable``) and its ranks by state (``ranks_state``: ready, pending, failed, total, from its manifest)."""
    data = run.to_json()
    for key in HIDDEN_FIELDS:
        data.pop(key, None)
    data["warning_count"] = (run.summary or {}).get("warning_count")
    if store is not None and run.status in ("queued", "ingesting"):
        data["servable"] = store.servable(run)
        data["ranks_state"] = ranks_state(store, run) if data["servable"] else None
    return data


def ranks_state(store: RunStore, run: Run) -> dict | None:
    """Counts of a sharded run's ranks by the state of their shard, and the pending ones (at most 64 listed)."""
    try:
        states = layout.manifest_ranks(layout.read_manifest(store.run_dir(run.id)))
    except (OSError, ValueError, KeyError):
        return None
    return {"ready": len(states["ready"]), "pending": len(states["pending"]), "failed": len(states["failed"]),
            "total": sum(len(v) for v in states.values()), "pending_ranks": states["pending"][:64]}


def _checked(store: RunStore, run: Run) -> Run:
    """A ready run whose database is missing or too short to be one is marked failed (cheap: one stat)."""
    if run.status != "ready":
        return run
    try:
        try:
            size = store.db_path(run.id).stat().st_size
        except FileNotFoundError:
            return store.mark_damaged(run.id, "the file is missing")
        return store.mark_damaged(run.id, f"it is {size} bytes long") if size < MIN_DB_BYTES else run
    except RunNotFound:  # deleted while the list was read
        return run


@router.get("")
@fast_json
def list_runs(store: StoreDep, request: Request) -> FastJSONResponse:
    """Every run in the data dir, newest first: id, name, ranks, status, progress, error, created, size on disk."""
    runs = store.list()
    return {"runs": [run_summary(public_run(request, _checked(store, r), store.data_dir), store)
                     for r in runs[:MAX_RUNS]],
            "count": len(runs), "truncated": len(runs) > MAX_RUNS}


@router.post("", status_code=202, openapi_extra={"requestBody": UPLOAD_BODY}, responses=UPLOAD_ERRORS)
async def upload_run(request: Request, store: StoreDep, settings: SettingsDep, _: WritableDep) -> FastJSONResponse:
    """Upload a zipped run (multipart field ``file``): checked and extracted now, ingested in the background.

    Answers 202 with the new run (``status: queued``); poll ``GET /api/runs/{id}`` for its progress. A refused
    archive answers 4xx and leaves nothing behind.
    """
    from ascendscope.server.uploads import receive_upload  # keeps the archive code off the read path

    run, duplicate = await receive_upload(request, store, settings)
    headers = {"Location": f"/api/runs/{run.id}"}
    if duplicate:  # the same bytes again: the existing run, not a second copy of it
        return FastJSONResponse(run_summary(run) | {"duplicate": True}, status_code=200, headers=headers)
    queue = request.app.state.ingest_queue
    if queue is not None:
        queue.enqueue(run.id)
    return FastJSONResponse(run_summary(run), status_code=202, headers=headers)


@router.post("/{run_id}/retry", status_code=202, responses={
    403: {"description": "read-only dashboard"},
    409: {"description": "the run is not failed, its source is gone, or this server does not ingest"}})
def retry_run(run: RunDep, store: StoreDep, settings: SettingsDep, request: Request,
              _: WritableDep) -> FastJSONResponse:
    """Ingest a failed run again (202, ``status: queued``); follow it with ``GET /api/runs/{id}``."""
    if run.status != "failed":
        raise ApiError(409, "run_not_failed", f"run {run.id!r} is {run.status}: only a failed run is retried",
                       run_status=run.status)
    queue = request.app.state.ingest_queue
    if queue is None:
        raise ApiError(409, "no_ingest", "this server does not ingest runs")
    problem = store.retry_problem(run)
    if problem:
        raise ApiError(409, "source_gone", f"run {run.id!r} cannot be ingested again: {problem}")
    from ascendscope.ingest.archive import ArchiveError
    from ascendscope.server.uploads import archive_limits

    try:  # an upload whose extracted files were removed: its kept archive, extracted again
        store.restore_upload(run, archive_limits(settings))
    except ArchiveError as exc:
        raise ApiError(409, "source_gone", f"run {run.id!r} cannot be ingested again: its kept archive: {exc}") \
            from None
    get_databases(request).forget(run.id)
    try:
        run = store.reset_for_retry(run.id)
    except RunNotFound:
        raise ApiError(404, "run_not_found", f"no run with id {run.id!r}") from None
    queue.enqueue(run.id)
    return FastJSONResponse(run_summary(public_run(request, run, store.data_dir)), status_code=202)


@router.get("/{run_id}/log")
@fast_json
def run_log(run: RunDep, store: StoreDep, request: Request) -> FastJSONResponse:
    """The end of the run's ingest log (at most 64 KB, from a line start): what each attempt did and why one
    failed. ``size`` is the whole log's, ``truncated`` says the start was left out."""
    from ascendscope.server.redact import scrub

    text, size = store.log_tail(run.id)
    return {"id": run.id, "text": scrub(text, request, run, store.data_dir), "size": size,
            "truncated": size > len(text.encode())}


@router.patch("/{run_id}")
@fast_json
def rename_run(run: RunDep, body: RenameBody, store: StoreDep, _: WritableDep) -> FastJSONResponse:
    """Rename a run (its id stays the same)."""
    name = clean_name(body.name)
    if not body.name.strip():
        raise ApiError(422, "invalid_parameter", "name: must not be blank")
    try:
        return run_summary(store.update(run.id, name=name))
    except RunNotFound:
        raise ApiError(404, "run_not_found", f"no run with id {run.id!r}") from None


@router.delete("/{run_id}", status_code=204, response_class=Response)
def delete_run(run: RunDep, store: StoreDep, request: Request, _: WritableDep) -> Response:
    """Delete a run and its files (an ingest in progress is stopped first). A source folder is never touched."""
    queue = request.app.state.ingest_queue
    if queue is not None:
        queue.cancel(run.id)
    get_databases(request).forget(run.id)
    try:
        store.delete(run.id)
    except RunNotFound:
        raise ApiError(404, "run_not_found", f"no run with id {run.id!r}") from None
    return Response(status_code=204)


@router.get("/{run_id}")
@fast_json
def get_run(run: RunDep, store: StoreDep, settings: SettingsDep, request: Request) -> FastJSONResponse:
    """One run: status (``queued|ingesting|ready|failed``), progress or error, and once ready its ranks, time
    range (absolute epoch ns as strings) and warnings.

    ``progress`` (while queued or ingesting): ``phase``, ``text``, ``done_bytes``/``total_bytes``, an estimated
    ``percent``, ``mb_per_s``, ``eta_s``. ``origin_ns`` is the zero of every relative time in the timeline
    responses.
    """
    data = run_summary(public_run(request, run, store.data_dir), store)
    if store.servable(run):  # ready, or ingesting with some ranks readable already
        data |= _ready_details(run, store, get_databases(request), settings.query_timeout_s)
        if "source_path" in data["meta"]:
            data["meta"]["source_path"] = source_label(request, run, data["meta"]["source_path"])
    return data


def _ready_details(run: Run, store: RunStore, databases, timeout_s: float) -> dict:
    info, cur = open_run_db(run, store, databases)
    try:
        ranks = [dict(zip(RANK_COLUMNS, r)) for r in query(cur, RANKS_SQL, timeout_s=timeout_s)]
        for r in ranks:
            r["start_ns"], r["end_ns"] = ns_str(r["start_ns"]), ns_str(r["end_ns"])
        warnings = [{"rank": r, "file": f, "message": m}
                    for r, f, m in query(cur, WARNINGS_SQL, [MAX_WARNINGS], timeout_s=timeout_s)]
        warning_count = query(cur, WARNING_COUNT_SQL, timeout_s=timeout_s, fetch="one")[0]
        meta = dict(query(cur, META_SQL, timeout_s=timeout_s))
        kinds = {k: {"tracks": n, "slices": int(s or 0)}
                 for k, n, s in query(cur, TRACK_KINDS_SQL, timeout_s=timeout_s)}
    except DamagedDatabase as exc:
        databases.forget(run.id)
        raise run_damaged(store, run, str(exc)) from exc
    finally:
        cur.close()
    return {
        "origin_ns": ns_str(info.origin_ns),
        "start_ns": ns_str(info.start_ns),
        "end_ns": ns_str(info.end_ns),
        "duration_ns": info.end_ns - info.start_ns,
        "ranks": ranks,
        "loaded_ranks": info.loaded_ranks,  # a sharded run: the ranks loaded (None: one file)
        "pending_ranks": info.pending_ranks,  # a run still ingesting: ranks not readable yet (or in part)
        "partial_ranks": sorted(info.partial),  # pending ranks read from their overview (ingest.overview)
        "failed_ranks": info.failed_ranks,
        "track_kinds": kinds,
        "meta": meta,
        "warnings": {"count": warning_count, "items": warnings, "truncated": warning_count > len(warnings)},
        "ingest_summary": _small(run.summary),
    }


def _small(summary: dict | None) -> dict | None:
    if not summary:
        return None
    keep = {k: summary[k] for k in ("seconds", "bytes_read", "ranks", "slices_per_kind", "flows_per_category",
                                    "tables") if k in summary}
    return json.loads(json.dumps(keep, default=str))
