"""Gzip for the answers that are worth it: JSON and pages of :data:`MIN_BYTES` or more, to a client that accepts it.

:class:`Compression` (pure ASGI middleware, just outside ``server.fastlane``) looks at each response's start:

* compressed: a whole body (one ``http.response.body`` message, as every JSON answer and page is sent) of a text
  type (JSON, HTML, CSV, plain text, JavaScript, CSS, SVG) of at least :data:`MIN_BYTES`, without a
  ``Content-Encoding`` of its own, to a GET or POST whose ``Accept-Encoding`` takes gzip. It gets
  ``Content-Encoding: gzip``, the new ``Content-Length`` and ``Vary: Accept-Encoding``. A body over
  :data:`INLINE_BYTES` is compressed on a worker thread (zlib lets go of the GIL), so the event loop is not held.
* untouched: anything streamed (a body in several messages: file downloads, trace exports, an upload's progress)
  passes through as it comes, message by message, so nothing waits for the end; binary answers (the timeline's
  columns, Parquet, images): they are mostly numbers that gzip shrinks little, and the viewport requests that carry
  them are the server's hot path (``docs/benchmarks.md``); HEAD requests; answers already encoded (the static
  files of ``server.assets`` come precompressed).

Level :data:`LEVEL` (zlib's default): a 1 MB JSON answer in ~10 ms, against ~3 ms at level 1 for a 15-20 % larger
result.
"""

from __future__ import annotations

import gzip

import anyio.to_thread

MIN_BYTES = 1024
INLINE_BYTES = 32 * 1024
LEVEL = 6
TYPES = (b"application/json", b"text/", b"application/javascript", b"image/svg+xml", b"application/x-ndjson")
METHODS = ("GET", "POST")


def takes_gzip(headers) -> bool:
    for key, value in headers:
        if key.lower() == b"accept-encoding":
            for part in value.decode("latin-1").split(","):
                token, _, params = part.strip().partition(";")
                if token.strip().lower() == "gzip":
                    return params.replace(" ", "").lower() not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


class Compression:
    def __init__(self, app, *, min_bytes: int = MIN_BYTES):
        self.app, self.min_bytes = app, min_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in METHODS or not takes_gzip(scope.get("headers", ())):
            await self.app(scope, receive, send)
            return
        start = None  # the held start message, until the first body message says whether to compress
        passing = False

        async def watch(message):
            nonlocal start, passing
            if passing:
                await send(message)
                return
            if message["type"] == "http.response.start":
                if self._candidate(message):
                    start = message
                else:
                    passing = True
                    await send(message)
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            body = message.get("body", b"")
            held, start = start, None
            passing = True
            if message.get("more_body") or len(body) < self.min_bytes:
                await send(held)
                await send(message)
                return
            packed = (await anyio.to_thread.run_sync(_pack, body) if len(body) > INLINE_BYTES else _pack(body))
            headers = [(k, v) for k, v in held.get("headers", []) if k.lower() not in (b"content-length", b"vary")]
            vary = [v for k, v in held.get("headers", []) if k.lower() == b"vary"]
            headers += [(b"content-encoding", b"gzip"), (b"content-length", str(len(packed)).encode()),
                        (b"vary", b", ".join([*vary, b"Accept-Encoding"]))]
            await send({**held, "headers": headers})
            await send({"type": "http.response.body", "body": packed})

        await self.app(scope, receive, watch)

    @staticmethod
    def _candidate(message) -> bool:
        ctype = b""
        for key, value in message.get("headers", []):
            key = key.lower()
            if key == b"content-encoding":
                return False
            if key == b"content-type":
                ctype = value.lower()
        return message.get("status", 200) not in (204, 304) and ctype.startswith(TYPES)


def _pack(body: bytes) -> bytes:
    return gzip.compress(body, LEVEL, mtime=0)
