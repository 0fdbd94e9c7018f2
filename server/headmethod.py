"""HEAD answers wherever GET does (RFC 9110 §9.3.2): monitors and proxies probe pages and routes with HEAD.

FastAPI routes declared with ``@router.get`` answer only GET (405 to HEAD). :class:`HeadAsGet` (pure ASGI, so a
streamed body still streams) hands a HEAD request to the app as a GET and sends the GET's status and headers
(``Content-Length`` included) with an empty body, whatever the app produces.
"""

from __future__ import annotations


class HeadAsGet:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message):
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # (the last body message, empty, ends the response)
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
