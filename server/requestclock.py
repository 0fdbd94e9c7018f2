"""Each request's deadline and its client: the time it arrived, and a token that stops its database work when the
client goes away.

:class:`RequestClock` (ASGI middleware) stamps every HTTP request with its arrival time (monotonic) and a
:class:`CancelToken`, both in ``scope["state"]``. A request's database work must end within ``query_timeout_s``
of its **arrival**: time spent queued for a thread or a query slot counts (``server.api.RunDb`` computes what is
left before each wait and each query). For a GET, the middleware also listens for the client's disconnect while
the app runs: then the token interrupts the DuckDB query in flight (``cursor.interrupt``) and wakes the waits, so a
request nobody will read stops costing CPU at once. Its work raises :class:`ClientGone`, answered 499 (nobody
reads it). Requests with a body (uploads) read it themselves and are left alone.
"""

from __future__ import annotations

import asyncio
import threading
import time


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


class CancelToken:
    """Cancelled once, from any thread; ``watch(fn)`` registers what to call then (e.g. a cursor's interrupt)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._callbacks: dict[int, object] = {}
        self._next = 0
        self.cancelled = False
        self.event = threading.Event()

    def watch(self, fn) -> callable:
        """Call ``fn()`` on cancellation (at once if already cancelled); returns the function that unregisters."""
        with self._lock:
            if not self.cancelled:
                key = self._next
                self._next += 1
                self._callbacks[key] = fn
                return lambda: self._callbacks.pop(key, None)
        fn()
        return lambda: None

    def cancel(self) -> None:
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        self.event.set()
        for fn in callbacks:
            try:
                fn()
            except Exception:  # noqa: BLE001 - a cursor already closed: nothing left to stop
                pass

    def check(self) -> None:
        if self.cancelled:
            raise ClientGone("the client went away before the answer was ready")


def arrival(scope) -> float | None:
    return (scope.get("state") or {}).get("arrived")


def token(scope) -> CancelToken | None:
    return (scope.get("state") or {}).get("cancel")


class RequestClock:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["arrived"] = time.monotonic()
        cancel = state["cancel"] = CancelToken()
        if scope.get("method") not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        inbox: asyncio.Queue = asyncio.Queue()

        async def listen() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    cancel.cancel()
                    await inbox.put(message)
                    return
                await inbox.put(message)

        listener = asyncio.ensure_future(listen())
        try:
            await self.app(scope, inbox.get, send)
        finally:
            listener.cancel()
