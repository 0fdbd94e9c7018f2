"""The ``Annotated`` dependencies every JSON router shares, and :class:`RunDb`, a request's way to its run's database.

Handlers declare what they need in their signature:

* ``run: RunDep``          the run record (404 ``run_not_found``)
* ``db: RunDbDep``         a cursor + cached :class:`server.db.RunInfo` of a run that can be served: ready, or
                           still ingesting with its ready ranks published (409 ``run_not_ready`` before;
                           409 ``run_damaged`` when its file cannot be read, ``run_outdated`` when an older
                           ascendscope wrote it: either marks the run failed); its
                           queries take a slot of the server's :class:`server.querypool.QueryPool`, and
                           ``db.shared`` computes an answer once for concurrent requests and caches it
* ``settings: SettingsDep``
* ``_: WritableDep``          refuses (403 ``read_only``) when the server shares its runs read-only

and answer with plain dicts (or the classes of :mod:`server.api.answers`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Annotated

import duckdb
import numpy as np
from fastapi import Depends, Path, Request
from fastapi.concurrency import run_in_threadpool

from ascendscope.server import requestclock
from ascendscope.server.api.answers import ApiError
from ascendscope.server.db import DamagedDatabase, Databases, QueryTimeout, RunInfo, query, request_scope
from ascendscope.server.db import version as db_version
from ascendscope.server.indexfiles import SCOPE_FREE, IndexFiles
from ascendscope.server.querypool import MAPPED_ENTRY_BYTES, QueryPool
from ascendscope.server.requestclock import CancelToken
from ascendscope.server.runs import Run, RunNotFound, RunStore
from ascendscope.server.schema_check import OutdatedDatabase, mark_outdated
from ascendscope.server.settings import Settings

log = logging.getLogger("ascendscope.api")


# async: FastAPI runs a plain-def dependency on the thread pool, a hop that costs more than reading an attribute
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_store(request: Request) -> RunStore:
    return request.app.state.store


def get_databases(request: Request) -> Databases:
    return request.app.state.databases


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[RunStore, Depends(get_store)]


def find_run(run_id: str, store: RunStore, request: Request) -> Run:
    """The run, or 404 ``run_not_found``: one stat of run.json (parsed only when it changed: ``RunStore.get``)."""
    try:
        return store.get(run_id)
    except RunNotFound:
        # deleted, maybe by another server process: close what this one still holds open of its files
        get_databases(request).forget(run_id)
        raise ApiError(404, "run_not_found", f"no run with id {run_id!r}") from None


# async too: one stat of run.json costs less than a thread hop (server.fastlane, the viewport requests' path,
# does this and the database's lookup on its worker thread instead: see request_db)
async def get_run(run_id: Annotated[str, Path(description="run id, as listed by GET /api/runs")],
                  store: StoreDep, request: Request) -> Run:
    return find_run(run_id, store, request)


RunDep = Annotated[Run, Depends(get_run)]


def require_writable(settings: SettingsDep) -> None:
    if settings.read_only:
        raise ApiError(403, "read_only", "this dashboard is shared read-only: runs cannot be uploaded, renamed or "
                                         "deleted")


WritableDep = Annotated[None, Depends(require_writable)]


@dataclass
class RunDb:
    """A cursor on a ready run's database (closed after the request), its cached info and the request's deadline.
    Every query runs in a slot of ``pool`` (a heavy slot for a ``heavy`` view); ``file_id`` names the database
    file's version (None: unknown, so nothing is cached). ``deadline`` (monotonic s) is ``query_timeout_s`` after
    the request arrived: waiting for a slot counts; ``cancel`` stops the work when the client goes away
    (``server.requestclock``)."""

    run: Run
    cur: duckdb.DuckDBPyConnection
    info: RunInfo
    settings: Settings
    pool: QueryPool
    file_id: tuple | None = None
    deadline: float | None = None
    cancel: CancelToken | None = None
    heavy: bool = False
    connection: duckdb.DuckDBPyConnection | None = None  # what ``cur`` came from: background reads' cursors too
    index_files: IndexFiles | None = None  # where index entries are written once and mapped (server.indexfiles)

    def remaining(self) -> float:
        """Seconds left before the deadline; :class:`QueryTimeout` (504) once it has passed."""
        timeout = self.settings.query_timeout_s
        if self.deadline is None:
            return timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise QueryTimeout(
                f"no answer within {timeout:g} s of the request's arrival (waiting for the server included): "
                + ("narrow the time range or the ranks, or " if self.heavy else "") + "try again when the server "
                "is less busy")
        return left

    def _query(self, sql: str, params, fetch: str):
        with self.pool.slot(self.remaining(), heavy=self.heavy, cancel=self.cancel):
            return query(self.cur, sql, params, timeout_s=self.remaining(), fetch=fetch, cancel=self.cancel)

    def rows(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        return self._query(sql, params, "all")

    def one(self, sql: str, params: list | tuple = ()) -> tuple | None:
        return self._query(sql, params, "one")

    def columns(self, sql: str, params: list | tuple = ()) -> dict[str, list]:
        return self._query(sql, params, "columns")

    def arrays(self, sql: str, params: list | tuple = ()) -> dict[str, np.ndarray]:
        return self._query(sql, params, "arrays")

    def shared(self, kind: str, params: tuple, items: list[Hashable], compute: Callable[[list], dict], *,
               store: str = "answers") -> dict:
        """item → ``compute(items)[item]``, computed once for concurrent requests of the same (kind, params, item)
        on this file and cached in ``store`` (see :class:`QueryPool`); what it returns is shared: do not mutate
        it."""
        if self.cancel is not None:
            self.cancel.check()  # the client went away: not even an answer kept in memory is worth encoding
        timeout_s = self.remaining()
        if self.file_id is None:
            with self.pool.slot(timeout_s, heavy=self.heavy, cancel=self.cancel):
                return compute(list(items))
        base = (self.run.id, self.file_id, kind, params)
        answers = self.pool.shared([base + (i,) for i in items],
                                   lambda keys: {base + (i,): a for i, a in compute([k[-1] for k in keys]).items()},
                                   timeout_s=timeout_s, cancel=self.cancel, store=store)
        return {key[-1]: answer for key, answer in answers.items()}

    def index_ready(self, kind: str, params: tuple, item: Hashable, size: int,
                    load: Callable[[RunDb], object]) -> bool:
        """Whether ``shared(kind, params, [item], …, store="index")`` answers from the index store now, or from
        its index file (``index_files``: mapped, no read). When it does not but the store would keep an entry of
        about ``size`` bytes, or of a mapped entry's once written to its file (:meth:`QueryPool.index_admits`):
        for a small entry (at most the pool's ``foreground_bytes``: a read of a few ms) or a pool loading in the
        foreground, True (this request reads it); else ``load(db)`` is queued on the pool's background thread
        with a cursor of its own and no deadline, and this request is answered another way (False), so a first
        look at a large track or at a run's flows costs a query, not a whole read of 50-500 ms."""
        if self.file_id is None:
            return False
        key = (self.run.id, self.file_id, kind, params, item)
        background = self.pool.background_index and self.connection is not None and size > self.pool.foreground_bytes
        if self.pool.index_has(key):
            return True
        files = self.index_files
        if files is not None and files.has(self.index_key(kind, params, item)):
            return True  # mapped from its file by this request: no read
        if files is not None and files.writable:
            # once written, the entry is mapped (it costs the budget little); the read itself holds ``size``
            if size > self.pool.index_bytes or not self.pool.index_admits(key, MAPPED_ENTRY_BYTES):
                return False
        elif not self.pool.index_admits(key, size):
            return False
        if not background:
            return True
        if self.pool.index_pending(key):
            return False
        try:
            cur = self.connection.cursor()
        except duckdb.Error:  # a connection closed meanwhile (its run deleted): this request reads it
            return True

        def job() -> None:
            try:
                load(dataclasses.replace(self, cur=cur, deadline=None, cancel=None, heavy=False))
            finally:
                cur.close()

        if not self.pool.index_later(key, job):
            cur.close()
        return False

    def index_key(self, kind: str, params: tuple, item: Hashable) -> tuple:
        """The key of an index entry in ``index_files`` (whose folder names ``file_id`` but the ranks in scope):
        kind, parameters, item, and the ranks in scope unless the entry is the same in every scope."""
        scope = () if kind in SCOPE_FREE else self.file_id[len(self.index_files.version):]
        return (scope, kind, params, item)

    def dicts(self, sql: str, params: list | tuple = ()) -> list[dict]:
        rows = self.rows(sql, params)
        names = [d[0] for d in self.cur.description]
        return [dict(zip(names, r)) for r in rows]


def open_run_db(run: Run, store: RunStore, databases: Databases, ranks: tuple[int, ...] | None = None,
                about: tuple[int, ...] | None = None, *, with_connection: bool = False) -> tuple:
    """The run's cached RunInfo and a fresh cursor on its database (the caller closes it), and with
    ``with_connection`` the connection the cursor came from. A damaged or missing
    file marks the run failed and answers 409 ``run_damaged``, one written for another schema version 409
    ``run_outdated`` (:mod:`server.schema_check`); a run deleted meanwhile answers 404."""
    path = store.db_path(run.id)
    try:
        scope = databases.scope(path, ranks, about)  # the ranks of a sharded run to load (server.db)
        opened = databases.info(run.id, path, scope), databases.cursor(run.id, path, scope)
        return (*opened, databases.connection(run.id, path, scope)) if with_connection else opened
    except DamagedDatabase as exc:
        raise run_damaged(store, run, str(exc)) from exc
    except OutdatedDatabase as exc:
        marked = mark_outdated(store, run, str(exc))
        raise ApiError(409, "run_outdated", marked.error or str(exc), run_status=marked.status) from exc
    except FileNotFoundError as exc:
        try:
            store.get(run.id)
        except RunNotFound:
            raise ApiError(404, "run_not_found", f"no run with id {run.id!r}") from None
        raise run_damaged(store, run, "the file is missing") from exc
    except (OSError, duckdb.Error) as exc:
        log.error("cannot open the database of run %s: %s", run.id, exc)  # names server paths: log only
        raise ApiError(500, "database_unavailable",
                       f"the database of run {run.id!r} cannot be opened (the server log has the reason)") from exc


def run_damaged(store: RunStore, run: Run, reason: str) -> ApiError:
    """Mark the run failed (its database cannot be read) and say so: 409 ``run_damaged``."""
    marked = store.mark_damaged(run.id, reason)
    return ApiError(409, "run_damaged", marked.error or f"the database file is damaged: {reason}",
                    run_status=marked.status)


def _locate(run: Run, store: RunStore, request: Request) -> tuple:
    """(path, version, ranks, about) of the request's database: the checks and ``stat`` calls before it is
    looked up or opened."""
    if not store.servable(run):
        raise ApiError(409, "run_not_ready", f"run {run.id!r} is {run.status}", run_status=run.status)
    try:
        # which ranks of a sharded run to load (server.db)
        ranks, about = request_scope(request.query_params, request.path_params)
    except ValueError as exc:
        raise ApiError(422, "invalid_parameter", str(exc), parameter="ranks") from None
    path = store.db_path(run.id)
    version = file_id(path)  # before opening: a file replaced meanwhile is then cached under its old identity
    return path, version, ranks, about


def scoped_version(version: tuple | None, info: RunInfo) -> tuple | None:
    """A RunDb's ``file_id``: the database's version, and the ranks in scope of a sharded run's connection
    (answers differ per scope)."""
    if version is None or info.loaded_ranks is None:
        return version
    return (*version, tuple(info.loaded_ranks))


@contextlib.contextmanager
def _serving(run: Run, store: RunStore, settings: Settings, request: Request, opened: tuple,
             version: tuple | None) -> Iterator[RunDb]:
    """The :class:`RunDb` of an opened database (``opened``: info, cursor, connection), its cursor closed after."""
    info, cur, conn = opened
    files = index_files(store, run.id, version) if settings.index_files and version is not None else None
    try:
        yield RunDb(run=run, cur=cur, info=info, settings=settings, pool=request.app.state.query_pool,
                    file_id=scoped_version(version, info), connection=conn, index_files=files,
                    **request_budget(request))
    except DamagedDatabase as exc:  # found by a query of this request
        get_databases(request).forget(run.id)
        raise run_damaged(store, run, str(exc)) from exc
    finally:
        cur.close()


async def get_run_db(run: RunDep, store: StoreDep, settings: SettingsDep, request: Request) -> AsyncIterator[RunDb]:
    """The request's :class:`RunDb`. Async: when the run's connection is open already (nearly every request) it
    is found on the event loop, and only opening one goes to a thread; a sync dependency would cost two thread
    hops per request (in and out), more than the few ``stat`` calls it makes."""
    path, version, ranks, about = _locate(run, store, request)
    databases = get_databases(request)
    opened = databases.open_already(run.id, path, ranks, about)
    if opened is None:
        opened = await run_in_threadpool(functools.partial(open_run_db, with_connection=True), run, store,
                                         databases, ranks, about)
    if opened[0].pending_ranks:  # a run still ingesting: the ranks this request is about are loaded next
        await run_in_threadpool(want_pending, store, run, opened[0], ranks, about)
    with _serving(run, store, settings, request, opened, version) as db:
        yield db


@contextlib.contextmanager
def request_db(run: Run, store: RunStore, settings: Settings, request: Request) -> Iterator[RunDb]:
    """What :func:`get_run_db` gives, all of it on the calling thread: for a caller on a worker thread already
    (``server.fastlane``). Under many users the event loop waits for the GIL after every system call it makes
    (a ``stat``, a cursor's close), so the viewport requests do these on the thread that answers them."""
    path, version, ranks, about = _locate(run, store, request)
    databases = get_databases(request)
    opened = databases.open_already(run.id, path, ranks, about) or open_run_db(
        run, store, databases, ranks, about, with_connection=True)
    if opened[0].pending_ranks:
        want_pending(store, run, opened[0], ranks, about)
    with _serving(run, store, settings, request, opened, version) as db:
        yield db


RunDbDep = Annotated[RunDb, Depends(get_run_db)]

# views whose queries may scan a whole run: they take a heavy slot (server.querypool), never a viewport one
HEAVY_PATHS = re.compile(r"^/api/(runs/[^/]+/(systemview|advice|timeline/(search|range_stats|range_instances))"
                         r"|compare)(/|$)")


def request_budget(request: Request) -> dict:
    """The request's deadline (``query_timeout_s`` after it arrived), its cancel token and whether it is heavy,
    as :class:`RunDb` takes them."""
    arrived = requestclock.arrival(request.scope)
    timeout = request.app.state.settings.query_timeout_s
    return {"deadline": None if arrived is None else arrived + timeout, "cancel": requestclock.token(request.scope),
            "heavy": HEAVY_PATHS.match(request.url.path) is not None}


def file_id(path: FilePath) -> tuple | None:
    """The run database's version as far as caching goes (``server.db.version``: inode, size, mtime, and a
    sharded run's manifest's), or None when it cannot be read."""
    try:
        return db_version(path)
    except OSError:
        return None


@functools.lru_cache(maxsize=256)
def _index_files(run_dir: FilePath, version: tuple) -> IndexFiles:
    return IndexFiles(run_dir, version)


def index_files(store: RunStore, run_id: str, version: tuple) -> IndexFiles:
    """The index files of this version of the run's database (``server.indexfiles``)."""
    return _index_files(store.run_dir(run_id), version)


def want_pending(store: RunStore, run: Run, info: RunInfo, ranks, about) -> None:
    """Tell the run's ingest worker which of its pending ranks a user is looking at (``RunStore.want_ranks``)."""
    wanted = [r for r in (ranks or about or ()) if r in set(info.pending_ranks)]
    if wanted:
        try:
            store.want_ranks(run.id, wanted)
        except (OSError, RunNotFound):
            pass
