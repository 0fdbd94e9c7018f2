"""A short path through the app for the timeline's viewport requests (``/timeline/slices``, ``/counters``,
``/flows``): the requests a page sends dozens of per second while a user pans, and, with many users, nearly all
the server's work.

Routing, parameter validation and dependency solving by FastAPI cost about as much CPU as answering a viewport
from memory (``docs/benchmarks.md``, issue #18). :class:`FastLane` (ASGI middleware, inside the security
middleware, so tokens, hosts and headers are checked as for any request) answers a well-formed GET of those three
endpoints itself: it parses the query string, then, on one worker thread, finds the run and its database with
the pieces the dependencies are made of (``server.api.find_run``, ``request_db``: the same checks, lookups and
errors as ``get_run`` and ``get_run_db``) and calls the same endpoint functions (``server.api.timeline``), so the
answer is the one the router would give, byte for byte. The event loop makes no system call for such a request
(under many users each one costs the loop a wait for the GIL, and every other request on it waits too), and at
most :data:`THREADS` such requests run at once in a process (the rest wait on the loop). In a server process of
``ascendscope serve`` the same function runs in its query processes instead (``server.queryprocs``), so no thread
of the server process shares its GIL with the loop.
A request whose client went away while it waited for a thread is answered 499 (as the router would: nobody reads
it) before any lookup or query, so it costs no more work.
Anything else (another path or method, a parameter it does not recognise or that does not validate, any
exception on the way) goes to the router untouched, which then answers or explains the error exactly as before;
a request that fails on the short path is simply asked again there, with what is left of its deadline.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from urllib.parse import parse_qsl

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from ascendscope.server import queryprocs, requestclock
from ascendscope.server.api import timeline as endpoints
from ascendscope.server.api.answers import INT64_MAX, INT64_MIN, ApiError, FastJSONResponse
from ascendscope.server.api.deps import find_run, request_db
from ascendscope.server.errors import http_answer
from ascendscope.server.requestclock import ClientGone

PATH = re.compile(r"^/api/runs/([^/]+)/timeline/(slices|counters|flows)$")
INT = re.compile(r"^[+-]?[0-9]{1,19}$")
KNOWN = {"slices": {"track_id", "start_ns", "end_ns", "width_px"},
         "counters": {"track_id", "start_ns", "end_ns", "width_px"},
         "flows": {"start_ns", "end_ns", "cat", "width_px"}}  # (flows have no width: the router ignores it)
MAX_WIDTH_PX = 20_000
# Viewport requests answered at once by one server process (the others wait their turn on the event loop, which
# costs nothing). Starlette's default of 40 threads lets every connection's request run at once, and the event loop
# then competes with all of them for the GIL each time it wakes: measured at 50 clients (docs/benchmarks.md, issue
# #18), 3 threads answered more requests per second than 40, with a lower p95 and half the wait of /api/health; 1
# thread made health's wait shortest but cost a third of the 1-rank throughput (the DuckDB and numpy parts of an
# answer let go of the GIL, so a few threads still overlap).
THREADS = 3
_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its limiter


class Unusual(Exception):
    """The request is not one the short path takes: the router answers it."""


def _int(text: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if not INT.match(text):
        raise Unusual(text)
    value = int(text)
    if not lo <= value <= hi:
        raise Unusual(text)
    return value


def parse(kind: str, query: bytes) -> dict:
    """The endpoint's keyword arguments from the query string; :class:`Unusual` when anything is off (an unknown
    or repeated parameter, a value that is not a plain integer in range), so that the router decides."""
    args: dict = {"track_id": [], "cat": []}
    known = KNOWN[kind]
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True, strict_parsing=False):
        if name not in known:
            raise Unusual(name)
        if name == "track_id":
            args["track_id"].append(_int(value))
        elif name == "cat":
            args["cat"].append(value)
        elif name in args:
            raise Unusual(name)  # a repeated scalar: the router's rule (the last one) is not guessed here
        elif name == "width_px":
            args["width_px"] = _int(value, 1, MAX_WIDTH_PX)
        else:
            args[name] = _int(value)
    if kind == "flows":
        del args["track_id"]
        args.pop("width_px", None)
    else:
        del args["cat"]
        if not args["track_id"]:
            raise Unusual("track_id")  # (the router's 400 or 422)
    return args


class FastLane:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        match = PATH.match(scope["path"])
        if match is None:
            await self.app(scope, receive, send)
            return
        try:
            response = await self._answer(scope, match.group(1), match.group(2))
        except ClientGone as exc:  # nobody reads the answer: the router's 499, without its work
            status, code, message = http_answer(exc)
            response = FastJSONResponse(ApiError(status, code, message).body(), status_code=status)
        except Exception:  # noqa: BLE001 - Unusual, or any error: the router answers it as it always does
            response = None
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    @staticmethod
    async def _answer(scope, run_id: str, kind: str):
        args = parse(kind, scope.get("query_string", b""))
        state = scope["app"].state
        pool = queryprocs.pool_for(state.settings, state.query_processes)
        if pool is not None:  # (server.queryprocs: the same answer, computed in a query process)
            got = await pool.answer((run_id, kind, args, scope["path"], scope.get("query_string", b""),
                                     list(scope.get("headers", [])), requestclock.arrival(scope)),
                                    gone=requestclock.token(scope))
            if got is None:
                raise Unusual("no query process answered")
            status, headers, body = got
            response = Response(body, status_code=status)
            response.raw_headers = list(headers)
            return response
        request = Request(scope)
        request.scope.setdefault("path_params", {})["run_id"] = run_id
        return await anyio.to_thread.run_sync(respond, request, run_id, kind, args, limiter=_limiter())


def _limiter() -> anyio.CapacityLimiter:
    """The running event loop's :data:`THREADS` threads for viewport requests."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(THREADS)
    return limiter


def respond(request: Request, run_id: str, kind: str, args: dict):
    """The endpoint's response, found, opened, answered and closed on one worker thread: the event loop makes
    no system call for it (each would cost it a wait for the GIL, under load: see ``server.api.request_db``)."""
    gone = requestclock.token(request.scope)
    if gone is not None:
        gone.check()  # the client left while the request waited for a thread: ClientGone, nothing looked up
    app = request.scope["app"]
    store, settings = app.state.store, app.state.settings
    run = find_run(run_id, store, request)
    accept = request.headers.get("accept")
    with request_db(run, store, settings, request) as db:
        return getattr(endpoints, kind)(run_id, db, accept=accept, **args)

