"""The FastAPI application: JSON routers, HTML pages, static files and the one error shape.

Adding a JSON resource is one line: put its module name (``server/api/<name>.py`` exposing ``router``) in
:data:`API_MODULES`. Pages are in ``server.pages``, the API reference (``/docs``, ``/redoc``) in
``server.apidocs``; static files (``frontend/static`` at ``/static``, plotly.js from the installed ``plotly``
package at ``/vendor``, Swagger UI and ReDoc at ``/docs-assets``) are served by ``server.assets`` at versioned,
immutable URLs, precompressed; JSON answers and pages are gzipped by ``server.compression``.

Every error, from any route, leaves as ``{"error": {"code": …, "message": …, "status": …}}`` (HTML pages get
a small HTML page instead). An unexpected exception is logged with an error id and answers a generic 500 that
names only that id (exception texts carry server paths and SQL); it is answered by :class:`CatchAll` inside
Starlette's outermost error middleware, which would re-raise and so make the server drop the keep-alive
connection. A full disk (``ENOSPC``/``EDQUOT``) answers 507 ``insufficient_storage``. Errors of the layers below
the routers (uploads refused, query parameters the data does not have, query deadlines) are answered from the one
table in ``server.errors``. Every response carries the security headers of ``server.security`` (which also checks
the access token when one is set).
"""

from __future__ import annotations

import errno
import importlib
import logging
import secrets
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ascendscope.server import apidocs, assets, pages, queryprocs
from ascendscope.server.api.answers import ApiError, FastJSONResponse
from ascendscope.server.compression import Compression
from ascendscope.server.consolepool import ConsolePool
from ascendscope.server.coordinator import IngestCoordinator
from ascendscope.server.db import Databases
from ascendscope.server.errors import HTTP_ANSWERS, http_answer
from ascendscope.server.fastlane import FastLane
from ascendscope.server.headmethod import HeadAsGet
from ascendscope.server.querypool import QueryPool
from ascendscope.server.requestclock import RequestClock
from ascendscope.server.runs import RunStore
from ascendscope.server.security import SecurityMiddleware
from ascendscope.server.settings import Settings, cores, query_process_count, worker_count
from ascendscope.server.worker import IngestQueue

log = logging.getLogger("ascendscope.app")

# JSON routers, in the order they appear in /docs: one line per resource
API_MODULES = (
    "health",
    "runs",
    "timeline",
    "operators",
    "memory",
    "summary",
    "communication",
    "advice",
    "systemview",
    "compare",
    "cluster",
    "strategy",
    "export",
    "late_arrivals",
    "critical_path",
    "phases",
    "sqlconsole",
    "serving",
)

FAVICON_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
               'fill="#4c8dff"/><rect x="3" y="4" width="7" height="2" fill="#fff"/><rect x="5" y="7" width="8" '
               'height="2" fill="#fff"/><rect x="3" y="10" width="5" height="2" fill="#fff"/></svg>')
HTTP_CODES = {400: "bad_request", 401: "token_required", 403: "forbidden", 404: "not_found",
              405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
              422: "invalid_parameter", 500: "internal_error", 507: "insufficient_storage"}
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def query_threads(settings: Settings) -> int:
    """DuckDB threads per query: ``query_threads``, or the cores divided among the server processes (the
    processes already use every core; more threads per query only contend for them)."""
    if settings.query_threads > 0:
        return settings.query_threads
    return max(1, cores() // worker_count(settings))


def create_app(settings: Settings | None = None, *, store: RunStore | None = None,
               ingest_queue: IngestQueue | IngestCoordinator | None = None, own_ingest: bool = False,
               query_processes: bool = False) -> FastAPI:
    """Build the app over ``settings.data_dir``. Ingestion runs only if an ``ingest_queue`` is given (a server
    process gets an :class:`IngestCoordinator`, started and stopped with the app when ``own_ingest``; tests may
    give an :class:`IngestQueue` they run themselves); the app itself only ever reads finished databases.
    ``query_processes``: viewport requests are answered by ``settings.query_processes`` query processes
    (``server.queryprocs``; a server process of ``ascendscope serve``), else on threads."""
    settings = settings or Settings.from_env()
    store = store or RunStore(settings.data_dir)
    databases = Databases(settings.max_open_databases, settings.max_loaded_ranks, threads=query_threads(settings))
    query_pool = QueryPool(settings.query_slots, settings.query_cache_mb * 10**6, heavy_slots=settings.heavy_slots,
                           lock_dir=store.data_dir, index_bytes=settings.track_cache_mb * 10**6)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if own_ingest and ingest_queue is not None:
            ingest_queue.start()
        queryprocs.pool_for(settings, app.state.query_processes)  # (started now, in the background: not by a user)
        assets.warm(app.state.assets)
        try:
            yield
        finally:
            queryprocs.close()
            if own_ingest and ingest_queue is not None:
                ingest_queue.stop()
            databases.close_all()
            app.state.console.close_all()

    app = FastAPI(title="ascendscope", version=_version(), lifespan=lifespan, docs_url=None, redoc_url=None,
                  default_response_class=FastJSONResponse,
                  description="JSON API of the ascendscope dashboard. Absolute times are epoch ns as decimal "
                              "strings; times inside timeline responses are ns relative to `origin_ns`.")
    app.state.settings, app.state.store, app.state.databases = settings, store, databases
    app.state.query_pool = query_pool
    app.state.query_processes = query_process_count(settings) if query_processes else 0
    app.state.console = ConsolePool(store.data_dir, size=query_pool.heavy_slots, timeout_s=settings.query_timeout_s,
                                    max_loaded_ranks=settings.max_loaded_ranks,
                                    threads=query_threads(settings))  # the SQL console's worker processes
    app.state.ingest_queue = ingest_queue
    if ingest_queue is not None and ingest_queue.on_ready is None:
        ingest_queue.on_ready = databases.forget

    for name in API_MODULES:
        app.include_router(importlib.import_module(f"ascendscope.server.api.{name}").router)
    app.include_router(pages.router)
    app.include_router(apidocs.router)
    assets.install(app)  # /static, /vendor (plotly.js), /docs-assets: versioned, precompressed

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(FAVICON_SVG, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})

    respond = _install_error_handlers(app)
    app.add_middleware(FastLane)  # innermost: viewport requests answered without the router (server.fastlane)
    app.add_middleware(Compression)  # JSON answers and pages gzipped (server.compression); not the fast lane's columns
    app.add_middleware(HeadAsGet)  # HEAD answered as GET without the body, on every route and page
    app.add_middleware(CatchAll, respond=respond)  # added before the security middleware: it runs inside it
    app.add_middleware(SecurityMiddleware, token=settings.token, host=settings.host,
                       allowed_hosts=settings.allowed_hosts)
    app.add_middleware(RequestClock)  # outermost: a request's deadline counts from its arrival
    return app


def _install_error_handlers(app: FastAPI):
    """Registers the handlers; returns the one that answers an unexpected exception, for :class:`CatchAll`."""

    def respond(request: Request, status: int, code: str, message: str, details: dict | None = None):
        if not request.url.path.startswith("/api/") and request.method == "GET" and status in (404, 409, 500):
            return HTMLResponse(pages.error_page(request, status, message), status_code=status)
        return FastJSONResponse(ApiError(status, code, message, **(details or {})).body(), status_code=status)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return respond(request, exc.status, exc.code, exc.message, exc.details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        return respond(request, exc.status_code, HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}"), message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        problems = [{"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")}
                    for e in exc.errors()]
        first = problems[0] if problems else {"where": "request", "problem": "invalid"}
        return respond(request, 422, "invalid_parameter", f"{first['where']}: {first['problem']}",
                       {"problems": problems})

    async def domain_error(request: Request, exc: Exception):
        return respond(request, *http_answer(exc))

    for error_class in HTTP_ANSWERS:  # one handler; the table in server.errors says each class's answer
        app.add_exception_handler(error_class, domain_error)

    def internal_error(request: Request, exc: BaseException):
        error_id = secrets.token_hex(4)
        log.error("internal error %s on %s %s", error_id, request.method, request.url.path, exc_info=exc)
        return respond(request, 500, "internal_error",
                       f"internal error {error_id}: the request failed on the server (its log has the details)",
                       {"error_id": error_id})

    @app.exception_handler(OSError)
    async def os_error(request: Request, exc: OSError):
        if exc.errno not in DISK_FULL_ERRNOS:
            return internal_error(request, exc)
        log.error("disk full on %s %s: %s", request.method, request.url.path, exc)
        return respond(request, 507, "insufficient_storage",
                       "the server ran out of disk space (or quota) while writing; free some space on the server "
                       "and try again")

    @app.exception_handler(Exception)
    async def last_resort(request: Request, exc: Exception):
        """Only for an exception raised outside CatchAll (in the security middleware itself)."""
        return internal_error(request, exc)

    return internal_error


class CatchAll:
    """Answers an exception that no handler took with ``respond(request, exc)`` — unless part of the response
    has already left, when only closing the connection can tell the client (so it is re-raised)."""

    def __init__(self, app, *, respond):
        self.app, self.respond = app, respond

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            if started:
                raise
            await self.respond(Request(scope), exc)(scope, receive, send)


def _version() -> str:
    try:
        return version("ascendscope")
    except PackageNotFoundError:  # not installed (running from a checkout)
        return "dev"
